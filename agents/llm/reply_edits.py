"""Edits against the parent's files, read out of a reply: SEARCH/REPLACE blocks and unified diffs.

SEARCH/REPLACE (fences around them are ignored):
    kernel.hip
    <<<<<<< SEARCH
    lines copied from the parent
    =======
    the lines that replace them
    >>>>>>> REPLACE
Unified diffs, git style or not, a/ b/ prefixes or none, inside a ```diff fence or bare:
    --- a/kernel.hip
    +++ b/kernel.hip
    @@ -120,7 +120,9 @@
     context
    -removed
    +added
A hunk's line numbers are only a hint (models get them wrong): its old lines are looked up like
a SEARCH block. Which file an edit is for: the file its block names, in its fence's info string
(```cpp title=kernel.hip), on a label line of its own before it (`kernel.hip`, **model.py**,
"File: kernel.hip", "// kernel.hip"), or in the diff header; a sentence of prose that mentions a
file names nothing ("model.py stays as it is; the kernel change:"). With none named, the file
whose text the old lines match: kernel.hip, or model.py when they match only there (both:
refused as ambiguous). A label naming some other file (notes.txt) is refused. Places are found
by reply_match.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hipevolve.agents.llm.reply_match import NoMatch, replace_once
from hipevolve.core.candidate import KERNEL_FILE, MODEL_FILE

SEARCH = re.compile(r"^[ \t]*<{5,9} ?SEARCH\b.*$")
_DIVIDER = re.compile(r"^[ \t]*={5,9}[ \t]*$")
_REPLACE = re.compile(r"^[ \t]*>{5,9} ?REPLACE\b.*$")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
HUNK = re.compile(r"^@@ ?(?:-(?P<old>\d+)(?:,\d+)? \+\d+(?:,\d+)?)? ?@@")
_HEADER = re.compile(r"^(?:---|\+\+\+) (?P<path>\S+)")
_GIT = re.compile(r"^diff --git (?P<a>\S+) (?P<b>\S+)")
_FILEISH = re.compile(r"^[\w./-]+\.[A-Za-z]{1,4}$")


@dataclass(frozen=True)
class Edit:
    file: str | None  # None: the reply did not say; decided against the parent's files
    old: str
    new: str
    line: int  # 1-based line of the reply where the edit starts
    hint: int | None = None  # a diff hunk's old start line
    what: str = "the SEARCH block"  # how messages name it ("the hunk" in a unified diff)


@dataclass(frozen=True)
class EditError:
    error_class: str
    message: str


def named_file(text: str) -> str | None:
    """kernel.hip or model.py when `text` names exactly one of them (by a .hip/.cu/.cpp or a .py
    path); None otherwise."""
    lowered = text.lower()
    hip = re.search(r"(?<![\w.])[\w./-]*\.(hip|cu|cpp)\b", lowered)
    python = re.search(r"(?<![\w.])[\w./-]*\.py\b", lowered)
    if hip and not python:
        return KERNEL_FILE
    if python and not hip:
        return MODEL_FILE
    return None


# A line that is only a file's name, decorated: `kernel.hip`, **model.py**, ### File: kernel.hip,
# // kernel.hip, "Edit kernel.hip:", "1. In `model.py`:".
_LABEL_LINE = re.compile(
    r"^(?:(?:file(?:name)?|path|in|edits?|changes?|patch|update|modify|for)(?: (?:to|in|for|of))?"
    r"\s*:?\s+)?(?P<path>[\w./-]+\.[A-Za-z]{1,4})(?:\s*\([^()]*\))?\s*:?$",
    re.IGNORECASE,
)


def label_file(label: str) -> str | None:
    """The file a label line names when the line is a label (the file's name, decorated); None
    for prose, which names nothing."""
    bare = re.sub(r"^\s*(?:[-*+>]|\d+[.)]|//|#+|/\*)\s*", "", label).strip()
    bare = re.sub(r"\*/\s*$", "", bare)
    bare = re.sub(r"[`*_\"]", "", bare).strip()
    m = _LABEL_LINE.match(bare)
    return m["path"] if m else None


def _label_target(label: str, prose: bool = False) -> str | None | EditError:
    """The file a label line names; an EditError when it names a file that is neither. With
    `prose`, only a line that is a label (label_file) names a file."""
    if prose:
        path = label_file(label)
        if path is None:
            return None
        label = path
    named = named_file(label)
    if named is not None:
        return named
    bare = re.sub(r"^(file|path)\s*:\s*", "", label.strip("`*#: \t"), flags=re.IGNORECASE)
    bare = bare.strip("`*#: \t")
    if _FILEISH.match(bare):
        return EditError(
            "diff_does_not_apply",
            f"an edit names {bare!r}, which is not a file of the candidate; "
            "say which file it edits (kernel.hip or model.py)",
        )
    return None


def search_replace_edits(lines: list[str]) -> list[Edit] | EditError:
    edits: list[Edit] = []
    label = ""
    fence_info = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if not SEARCH.match(line):
            fence = _FENCE.match(line)
            if fence:
                fence_info = fence["info"]
            elif line.strip():
                label, fence_info = line.strip(), ""
            i += 1
            continue
        start = i + 1
        target = _label_target(fence_info) or _label_target(label, prose=True)
        if isinstance(target, EditError):
            return EditError(
                target.error_class, f"the SEARCH block at line {start}: " + target.message
            )
        old: list[str] = []
        new: list[str] = []
        part = old
        i += 1
        while i < len(lines) and not _REPLACE.match(lines[i]):
            if _DIVIDER.match(lines[i]) and part is old:
                part = new
            elif SEARCH.match(lines[i]):
                return EditError(
                    "unterminated_fence",
                    f"the SEARCH block at line {start} is not closed by >>>>>>> REPLACE "
                    f"before the next one at line {i + 1}",
                )
            else:
                part.append(lines[i])
            i += 1
        if i == len(lines):
            return EditError(
                "truncated",
                f"the SEARCH block at line {start} never reaches >>>>>>> REPLACE "
                "(the reply was cut off?)",
            )
        if part is old:
            return EditError(
                "diff_does_not_apply", f"the SEARCH block at line {start} has no ======= divider"
            )
        edits.append(Edit(target, _joined(old), _joined(new), start))
        label = ""
        i += 1
    return edits


def _joined(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


# ----------------------------------------------------------------------------- unified diffs


def has_unified_diff(lines: list[str]) -> bool:
    """A hunk header, with a ---/+++ header pair or a ```diff fence before it."""
    headed = fenced = False
    for k, line in enumerate(lines):
        if line.startswith("--- ") and k + 1 < len(lines) and lines[k + 1].startswith("+++ "):
            headed = True
        fence = _FENCE.match(line)
        if fence and fence["info"].lower().split()[:1] in (["diff"], ["patch"], ["udiff"]):
            fenced = True
        if HUNK.match(line) and (headed or fenced):
            return True
    return False


def unified_diff_edits(lines: list[str]) -> list[Edit] | EditError:
    edits: list[Edit] = []
    target: str | None = None
    fenced = False  # inside a ```diff fence only the fence or a header ends a hunk
    i = 0
    while i < len(lines):
        line = lines[i]
        if _FENCE.match(line):
            fenced = not fenced
        git = _GIT.match(line)
        header = _HEADER.match(line)
        if git or (header and line.startswith("+++ ")):
            path = git["b"] if git else header["path"]  # type: ignore[index]
            if path != "/dev/null":
                named = _label_target(path)
                if isinstance(named, EditError):
                    return EditError(
                        named.error_class, f"the diff at line {i + 1}: " + named.message
                    )
                target = named
        hunk = HUNK.match(line)
        if not hunk:
            i += 1
            continue
        start = i + 1
        old: list[str] = []
        new: list[str] = []
        i += 1
        while i < len(lines) and not _ends_hunk(lines, i, fenced):
            body = lines[i]
            if body.startswith("\\"):  # "\ No newline at end of file"
                pass
            elif body.startswith("-"):
                old.append(body[1:])
            elif body.startswith("+"):
                new.append(body[1:])
            else:  # context; models often drop the space of an empty (or any) context line
                context = body[1:] if body.startswith(" ") else body
                old.append(context)
                new.append(context)
            i += 1
        while old and new and not old[-1].strip() and not new[-1].strip():
            old.pop(), new.pop()  # trailing blank context: the gap before the next hunk
        if not any(x.strip() for x in old):
            return EditError(
                "diff_does_not_apply",
                f"the hunk at line {start} has no old lines to place it by; "
                "give context lines or use SEARCH/REPLACE",
            )
        hint = int(hunk["old"]) if hunk["old"] else None
        edits.append(Edit(target, _joined(old), _joined(new), start, hint, "the hunk"))
    return edits


def _ends_hunk(lines: list[str], i: int, fenced: bool) -> bool:
    line = lines[i]
    if HUNK.match(line) or _GIT.match(line) or _FENCE.match(line):
        return True
    if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
        return True
    # bare, prose after the diff ends it; fenced, an unprefixed line is context
    return not fenced and not (line == "" or line[0] in " +-\\")


# ----------------------------------------------------------------------------- applying


def apply_edits(files: dict[str, str], edits: list[Edit]) -> dict[str, str] | EditError:
    """The files with every edit applied in order; the first that cannot be placed is the error."""
    files = dict(files)
    for edit in edits:
        if not edit.old.strip():
            return EditError(
                "diff_does_not_apply",
                f"{edit.what} at line {edit.line} is empty; copy the lines to replace",
            )
        name = edit.file or _default_file(files, edit)
        if isinstance(name, EditError):
            return name
        code = "hip" if name == KERNEL_FILE else "python"
        result = replace_once(files[name], edit.old, edit.new, code=code, hint=edit.hint)
        if isinstance(result, NoMatch):
            return _no_match(edit, name, result)
        files[name] = result
    return files


def _default_file(files: dict[str, str], edit: Edit) -> str | EditError:
    """kernel.hip, unless the old text is found in model.py and not in kernel.hip; an
    EditError when it is found in both."""

    def found(name: str) -> bool:
        result = replace_once(files[name], edit.old, edit.new, code="hip", hint=edit.hint)
        return not isinstance(result, NoMatch) or result.count > 1

    in_kernel, in_model = found(KERNEL_FILE), found(MODEL_FILE)
    if in_kernel and in_model:
        return EditError(
            "ambiguous_edit",
            f"{edit.what} at line {edit.line} matches both kernel.hip and model.py and names "
            "neither; put the file's name on the line before it",
        )
    return MODEL_FILE if in_model else KERNEL_FILE


def _no_match(edit: Edit, name: str, result: NoMatch) -> EditError:
    first = edit.old.strip().splitlines()[0][:80]
    what = edit.what
    if result.count == 0:
        return EditError(
            "diff_does_not_apply",
            f"{what} at line {edit.line} does not match {name} {result.how} (it starts "
            f"{first!r}); copy the lines exactly",
        )
    return EditError(
        "ambiguous_edit",
        f"{what} at line {edit.line} matches {result.count} places in {name} {result.how} "
        f"(it starts {first!r}); include more lines so it matches one",
    )
