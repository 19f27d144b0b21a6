"""Turning a model's reply into a native candidate: a pure function, every malformation named.

A reply carries a candidate in one of two forms.

Whole files, as fenced blocks (``` or ~~~, any length of three or more):
    ```hip          (also cpp, c++, cxx, cc, c, cuda, cu, or a tag naming kernel.hip)  -> kernel.hip
    ```python       (also py, python3, or a tag naming model.py)                     -> model.py
  A block without a tag counts when the line before it names the file, or when its content
  shows what it is (a __global__ or extern "C" function: kernel.hip; class ModelNew:
  model.py); other blocks (shell, output) are ignored. A reply may give one file and take the
  other from the parent.

Edits, as SEARCH/REPLACE blocks against the parent's files (fences around them are ignored):
    kernel.hip
    <<<<<<< SEARCH
    lines copied exactly from the parent
    =======
    the lines that replace them
    >>>>>>> REPLACE
  The line before `<<<<<<< SEARCH` names the file (kernel.hip or model.py; backticks, ** and
  a trailing colon are allowed). Blocks apply in order; each SEARCH must match exactly one place
  in the file as it stands (exactly, or else ignoring trailing spaces on each line).

A reply that fits neither becomes ok=False with a named error_class (FAULTS 27), a message the
repairer can quote, and the search goes on. Nothing in a reply is interpreted beyond locating
code: instructions in comments ("ignore the grader") pass through untouched to a verifier that
never reads them (FAULTS 29).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from hipevolve.core.candidate import KERNEL_FILE, MODEL_FILE, Candidate

MAX_REPLY_BYTES = 256 * 1024

ParseErrorClass = Literal[
    "empty_reply",
    "reply_too_large",
    "no_code_block",
    "several_ambiguous_blocks",
    "unterminated_fence",
    "nested_fence",
    "diff_does_not_apply",
    "missing_file",  # one file given, no parent to take the other from
]

HIP_TAGS = frozenset({"hip", "cpp", "c++", "cxx", "cc", "c", "cuda", "cu", "hpp", "h"})
PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_SEARCH = re.compile(r"^[ \t]*<{5,9} ?SEARCH[ \t]*$")
_DIVIDER = re.compile(r"^[ \t]*={5,9}[ \t]*$")
_REPLACE = re.compile(r"^[ \t]*>{5,9} ?REPLACE[ \t]*$")
_HIP_HINT = re.compile(r"__global__|extern\s+\"C\"|#\s*include\s*<hip/")
_PYTHON_HINT = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)


class ParsedReply(BaseModel):
    """The outcome of parsing one reply: a candidate, or the class of what was wrong with it."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    candidate: Candidate | None = None
    error_class: ParseErrorClass | None = None
    message: str = ""
    form: Literal["blocks", "diff"] | None = None  # how the reply carried the candidate


def parse_reply(text: str, parent: Candidate | None) -> ParsedReply:
    """Parses a reply into a native candidate; the parent supplies files the reply leaves out."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_REPLY_BYTES:
        return _fail("reply_too_large", f"the reply is {size} bytes, over {MAX_REPLY_BYTES}")
    if not text.strip():
        return _fail("empty_reply", "the reply is empty")
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if any(_SEARCH.match(line) for line in lines):
        return _parse_diff(lines, parent)
    return _parse_blocks(lines, parent)


def _fail(error_class: ParseErrorClass, message: str) -> ParsedReply:
    return ParsedReply(ok=False, error_class=error_class, message=message)


def _build(hip: str, python: str, form: Literal["blocks", "diff"]) -> ParsedReply:
    digest = hashlib.sha256(f"{hip}\0{python}".encode()).hexdigest()[:12]
    candidate = Candidate(
        format="native", hip_source=hip, python_source=python, name=f"reply-{digest}"
    )
    return ParsedReply(ok=True, candidate=candidate, form=form)


# ----------------------------------------------------------------------------- whole files


@dataclass
class _Block:
    info: str
    start: int  # 1-based line of the opening fence
    body: str
    label: str  # the non-blank line before the fence


def _parse_blocks(lines: list[str], parent: Candidate | None) -> ParsedReply:
    blocks, error = _fenced_blocks(lines)
    if error is not None:
        return error
    files: dict[str, list[_Block]] = {KERNEL_FILE: [], MODEL_FILE: []}
    for block in blocks:
        kind = _kind(block)
        if kind is not None:
            files[kind].append(block)
    for name, found in files.items():
        if len(found) > 1:
            where = ", ".join(f"line {b.start}" for b in found)
            return _fail(
                "several_ambiguous_blocks",
                f"{len(found)} code blocks for {name} ({where}); give exactly one per file",
            )
    hip_blocks, python_blocks = files[KERNEL_FILE], files[MODEL_FILE]
    if not hip_blocks and not python_blocks:
        seen = f" ({len(blocks)} blocks, none of them HIP or Python)" if blocks else ""
        return _fail("no_code_block", f"no ```hip or ```python code block in the reply{seen}")
    for found in (hip_blocks, python_blocks):
        if found and not found[0].body.strip():
            return _fail("no_code_block", f"the code block at line {found[0].start} is empty")
    hip = hip_blocks[0].body if hip_blocks else _from_parent(parent, KERNEL_FILE)
    python = python_blocks[0].body if python_blocks else _from_parent(parent, MODEL_FILE)
    if hip is None or python is None:
        missing = KERNEL_FILE if hip is None else MODEL_FILE
        return _fail(
            "missing_file",
            f"the reply has no {missing} block and there is no native parent to take it from",
        )
    return _build(hip, python, "blocks")


def _fenced_blocks(lines: list[str]) -> tuple[list[_Block], ParsedReply | None]:
    """The fenced blocks in order (CommonMark-style fences), or the error that stops parsing."""
    blocks: list[_Block] = []
    label = ""
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            if lines[i].strip():
                label = lines[i].strip()
            i += 1
            continue
        fence, info = opening["fence"], opening["info"]
        body: list[str] = []
        j = i + 1
        closed = False
        while j < len(lines):
            inner = _FENCE.match(lines[j])
            # A shorter fence, or one of the other character, is content (markdown nesting).
            if inner and inner["fence"][0] == fence[0] and len(inner["fence"]) >= len(fence):
                if not inner["info"]:
                    closed = True
                    break
                return blocks, _fail(
                    "nested_fence",
                    f"a fence opened at line {j + 1} ({lines[j].strip()}) inside the block "
                    f"opened at line {i + 1}; close each block before opening the next",
                )
            body.append(_dedent(lines[j], len(opening["indent"])))
            j += 1
        if not closed:
            if not info and not "".join(body).strip():
                break  # a stray fence at the very end with nothing after it: no block lost
            return blocks, _fail(
                "unterminated_fence",
                f"the code block opened at line {i + 1} never closes (the reply was cut off?)",
            )
        blocks.append(_Block(info, i + 1, "\n".join(body) + "\n", label))
        label = ""
        i = j + 1
    return blocks, None


def _dedent(line: str, width: int) -> str:
    """A block fenced inside a list item is indented: remove up to the fence's indentation."""
    k = 0
    while k < width and k < len(line) and line[k] in " \t":
        k += 1
    return line[k:]


def _kind(block: _Block) -> str | None:
    """Which file a block is, from its tag, the line naming it, or (untagged) its content."""
    words = [w for w in re.split(r"[\s:{}=\"',]+", block.info.lower()) if w]
    named = _named_file(" ".join(words)) or (None if words else _named_file(block.label))
    if named is not None:
        return named
    if words:
        tag = words[0].lstrip(".")
        if tag in HIP_TAGS:
            return KERNEL_FILE
        if tag in PYTHON_TAGS:
            return MODEL_FILE
        return None  # bash, text, json, diff...: not a candidate file
    if _HIP_HINT.search(block.body):
        return KERNEL_FILE
    if _PYTHON_HINT.search(block.body):
        return MODEL_FILE
    return None


def _named_file(text: str) -> str | None:
    lowered = text.lower()
    hip = re.search(r"\b[\w./-]*\.(hip|cu|cpp)\b", lowered)
    python = re.search(r"\b[\w./-]*\.py\b", lowered)
    if hip and not python:
        return KERNEL_FILE
    if python and not hip:
        return MODEL_FILE
    return None


def _from_parent(parent: Candidate | None, name: str) -> str | None:
    if parent is None or parent.format != "native":
        return None
    return parent.hip_source if name == KERNEL_FILE else parent.python_source


# ----------------------------------------------------------------------------- edits


@dataclass
class _Edit:
    file: str
    search: str
    replace: str
    line: int  # 1-based line of <<<<<<< SEARCH


def _parse_diff(lines: list[str], parent: Candidate | None) -> ParsedReply:
    edits, error = _edits(lines)
    if error is not None:
        return error
    blocks, _ = _fenced_blocks(lines)
    whole = [
        b for b in blocks if _kind(b) and not any(_SEARCH.match(x) for x in b.body.splitlines())
    ]
    if whole:
        return _fail(
            "several_ambiguous_blocks",
            f"the reply has both SEARCH/REPLACE edits and a whole-file block (line "
            f"{whole[0].start}); give one or the other",
        )
    if parent is None or parent.format != "native" or parent.hip_source is None:
        return _fail(
            "diff_does_not_apply",
            "SEARCH/REPLACE edits need a native parent to apply to; reply with whole files",
        )
    files = {KERNEL_FILE: parent.hip_source, MODEL_FILE: parent.python_source}
    for edit in edits:
        result = _apply(files[edit.file], edit)
        if isinstance(result, ParsedReply):
            return result
        files[edit.file] = result
    return _build(files[KERNEL_FILE], files[MODEL_FILE], "diff")


def _edits(lines: list[str]) -> tuple[list[_Edit], ParsedReply | None]:
    edits: list[_Edit] = []
    label = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if not _SEARCH.match(line):
            if line.strip() and not _FENCE.match(line):
                label = line.strip()
            i += 1
            continue
        start = i + 1
        file = _edit_target(label)
        if file is None:
            return edits, _fail(
                "diff_does_not_apply",
                f"the SEARCH block at line {start} does not say which file it edits (the line "
                f"before it is {label!r}; write kernel.hip or model.py there)",
            )
        search: list[str] = []
        replace: list[str] = []
        part = search
        i += 1
        while i < len(lines) and not _REPLACE.match(lines[i]):
            if _DIVIDER.match(lines[i]) and part is search:
                part = replace
            elif _SEARCH.match(lines[i]):
                return edits, _fail(
                    "unterminated_fence",
                    f"the SEARCH block at line {start} is not closed by >>>>>>> REPLACE "
                    f"before the next one at line {i + 1}",
                )
            else:
                part.append(lines[i])
            i += 1
        if i == len(lines):
            return edits, _fail(
                "unterminated_fence",
                f"the SEARCH block at line {start} never reaches >>>>>>> REPLACE "
                "(the reply was cut off?)",
            )
        if part is search:
            return edits, _fail(
                "diff_does_not_apply", f"the SEARCH block at line {start} has no ======= divider"
            )
        edits.append(_Edit(file, _joined(search), _joined(replace), start))
        label = ""
        i += 1
    return edits, None


def _joined(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _edit_target(label: str) -> str | None:
    name = label.strip("`*#: \t").rsplit("/", 1)[-1].strip("`*#: \t").lower()
    if name in (KERNEL_FILE, "kernel.cu"):
        return KERNEL_FILE
    if name == MODEL_FILE:
        return MODEL_FILE
    return None


def _apply(source: str, edit: _Edit) -> str | ParsedReply:
    if not edit.search.strip():
        return _fail(
            "diff_does_not_apply",
            f"the SEARCH block at line {edit.line} is empty; copy the lines to replace",
        )
    count = source.count(edit.search)
    if count == 1:
        return source.replace(edit.search, edit.replace, 1)
    if count == 0:
        loose = _apply_ignoring_trailing_space(source, edit)
        if loose is not None:
            return loose
    first = edit.search.strip().splitlines()[0][:80]
    if count == 0:
        return _fail(
            "diff_does_not_apply",
            f"the SEARCH block at line {edit.line} does not match {edit.file} (it starts "
            f"{first!r}); copy the lines exactly",
        )
    return _fail(
        "diff_does_not_apply",
        f"the SEARCH block at line {edit.line} matches {count} places in {edit.file} (it "
        f"starts {first!r}); include more lines so it matches one",
    )


def _apply_ignoring_trailing_space(source: str, edit: _Edit) -> str | None:
    """Models often drop or add trailing spaces; match line by line with them stripped."""
    lines = source.splitlines(keepends=True)
    want = [line.rstrip() for line in edit.search.splitlines()]
    have = [line.rstrip() for line in lines]
    hits = [k for k in range(len(have) - len(want) + 1) if have[k : k + len(want)] == want]
    if len(hits) != 1:
        return None
    k = hits[0]
    return "".join(lines[:k]) + edit.replace + "".join(lines[k + len(want) :])
