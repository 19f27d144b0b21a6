"""Code a reply left out and marked as left out: `// ... unchanged ...`, `# rest of the code`, a
line of `...`. A pure function.

A whole file written with a body elided compiles more often than not (an empty body, a comment)
and is silently a different kernel; so is a REPLACE whose text ends "// ... rest unchanged". A
marker counts when a comment (or the whole line) says code was left out, and the parent's file
does not already hold the same line (a parent's own "// ..." is code the reply kept, not
elided). Comments that merely mention the rest of some data ("the rest of the row") are not
markers: the phrases name code, the file, or say "unchanged", "omitted", "as before".
"""

from __future__ import annotations

import re
from collections import Counter

_DOTS = r"(?:\.{3,}|…)"
# Words that, beside dots, say code was left out ("// ... unchanged", "// rest of code ...").
_WORDS = (
    r"(?:unchanged|same|rest|existing|previous|omitted|elided|original|as[ -]is|etc|snip|"
    r"code|body|implementation|kernels?|functions?|helpers?|launchers?)"
)
# Comment text that says code was left out.
_MARKER = re.compile(
    rf"^\W*{_DOTS}\W*$"  # a comment of dots alone
    rf"|{_DOTS}.*\b{_WORDS}\b"
    rf"|\b{_WORDS}\b.*{_DOTS}"
    r"|\b(?:rest|remainder) of (?:the )?(?:\w+ )?(?:code|file|kernel|function|functions|"
    r"implementation|body|launcher|launchers|helpers|source|class|module|methods?)\b"
    r"|\b(?:omitted|elided|abbreviated|skipped|truncated)\b(?: \w+)? (?:for brevity|here|to save space)"
    r"|\bfor brevity\b"
    r"|\b(?:existing|original|previous|unchanged|same) (?:code|implementation|body|logic|"
    r"kernel|launcher|helpers?|functions?|definitions?)\b(?: \w+)? *(?:here|unchanged|as before|"
    r"goes here|stays?|remains?|omitted|not shown|as in the parent|from above)"
    r"|\b(?:unchanged|same as (?:before|above|the original|original|the parent|in the parent|"
    r"previously|the previous version))\W*$"
    r"|^\W*(?:as before|unchanged|no changes?|identical to the original)\W*$",
    re.IGNORECASE,
)
_LINE_COMMENT = {"hip": re.compile(r"//(?P<text>.*)$"), "python": re.compile(r"#(?P<text>.*)$")}
_BLOCK_COMMENT = re.compile(r"/\*(?P<text>.*?)\*/")


def elided(source: str, parent: str | None, code: str) -> tuple[int, str] | None:
    """The first line (1-based, and its text) of `source` that marks code as left out and is
    not a line of `parent`; `code` is "hip" or "python"."""
    kept = Counter(line.strip() for line in (parent or "").splitlines())
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if not stripped or not _marks(stripped, code):
            continue
        if kept[stripped] > 0:
            kept[stripped] -= 1
            continue
        return number, stripped
    return None


def _marks(line: str, code: str) -> bool:
    if re.fullmatch(rf"{_DOTS}[;,]?", line):
        return True  # `...` as a statement: Python's Ellipsis, never C++
    comments = [m["text"] for m in _BLOCK_COMMENT.finditer(line)] if code == "hip" else []
    rest = _BLOCK_COMMENT.sub("", line) if code == "hip" else line
    if code == "python" and rest.lstrip().startswith(("'", '"')):
        return False  # inside a string's line: never a comment
    found = _LINE_COMMENT[code].search(rest)
    if found and not (code == "hip" and "://" in found.group(0)[:3]):
        comments.append(found["text"])
    return any(_MARKER.search(text.strip(" */#")) for text in comments)
