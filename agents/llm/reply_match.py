"""Finding where an edit's old text sits in a file: exactly, or with whitespace drift, never
ambiguously.

Models copy the lines an edit replaces imperfectly: trailing spaces dropped, the whole snippet
re-indented by a level, a blank line lost. `replace_once` tries three ways, strictest first, and
stops at the first that finds anything:
  1. the text itself (it may start or end mid-line; when it is whole lines found more than once,
     the one place where they are whole lines);
  2. line by line, trailing whitespace ignored;
  3. line by line, leading and trailing whitespace ignored and blank lines skipped; the
     replacement is then re-indented by the same shift the match needed.
Two or more places at the strictest way that finds any is a refusal with its reason: an edit is
never applied where the model may not have meant it. A unified diff's hunk may give the line it
expects to start at (`hint`, 1-based): of several places, the one starting exactly there counts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NoMatch:
    """Why the old text could not be placed: `count` places found (0: none, 2+: ambiguous)."""

    count: int
    how: str  # which way found them: "exactly", "ignoring trailing spaces", ...


def replace_once(
    source: str, old: str, new: str, *, code: str, hint: int | None = None
) -> str | NoMatch:
    """`source` with `old` replaced by `new` at its one place; `code` is "hip" or "python"
    (Python's indentation is meaning, so an inconsistent re-indent there is refused)."""
    count = source.count(old)
    if count == 1:
        return source.replace(old, new, 1)
    if count > 1:
        if old.endswith("\n"):  # whole lines: a copy inside a longer line is not a place
            whole = _line_hits(
                source.splitlines(keepends=True), old.splitlines(), str.rstrip, False
            )
            if len(whole) == 1:
                lines = source.splitlines(keepends=True)
                start, end = whole[0]
                return "".join(lines[:start]) + new + "".join(lines[end:])
        at = _substring_at_line(source, old, hint)
        return (
            source[:at] + new + source[at + len(old) :]
            if at is not None
            else NoMatch(count, "exactly")
        )
    lines = source.splitlines(keepends=True)
    want = old.splitlines()
    for how, key, skip_blank in (
        ("ignoring trailing spaces", str.rstrip, False),
        ("ignoring indentation and blank lines", str.strip, True),
    ):
        hits = _line_hits(lines, want, key, skip_blank)
        if len(hits) > 1 and hint is not None:
            hits = [h for h in hits if h[0] + 1 == hint] or hits
        if len(hits) > 1:
            return NoMatch(len(hits), how)
        if hits:
            start, end = hits[0]
            replacement = new
            if skip_blank:
                shifted = _reindent(lines[start:end], want, new, code)
                if shifted is None:
                    return NoMatch(0, "with a consistent indentation shift")
                replacement = shifted
            return "".join(lines[:start]) + replacement + "".join(lines[end:])
    return NoMatch(0, "exactly or with whitespace drift")


def _substring_at_line(source: str, old: str, hint: int | None) -> int | None:
    """The offset of the occurrence of `old` that starts at the beginning of line `hint`."""
    if hint is None:
        return None
    lines = source.splitlines(keepends=True)
    if not 1 <= hint <= len(lines):
        return None
    at = sum(len(line) for line in lines[: hint - 1])
    return at if source.startswith(old, at) else None


def _line_hits(
    lines: list[str], want: list[str], key: object, skip_blank: bool
) -> list[tuple[int, int]]:
    """(start, end) line ranges of `lines` whose keyed lines equal `want`'s."""
    norm = key  # str.rstrip or str.strip
    target = [norm(w) for w in want if not (skip_blank and not w.strip())]  # type: ignore[operator]
    if not target:
        return []
    have = [(i, norm(line.rstrip("\n"))) for i, line in enumerate(lines)]  # type: ignore[operator]
    if skip_blank:
        have = [(i, text) for i, text in have if text]
    hits = []
    for k in range(len(have) - len(target) + 1):
        if all(have[k + j][1] == target[j] for j in range(len(target))):
            hits.append((have[k][0], have[k + len(target) - 1][0] + 1))
    return hits


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _reindent(matched: list[str], want: list[str], new: str, code: str) -> str | None:
    """`new` shifted by the indentation the source has over (or under) the old text.

    One shift for every line when the drift is uniform. Otherwise (HIP only: in Python an
    uneven drift is refused, None) line by line: a replacement line that is one of the old
    lines takes that line's shift, a new line the shift of the line before it."""
    have = [m for m in matched if m.strip()]
    old = [w for w in want if w.strip()]
    shifts = [len(_indent(h)) - len(_indent(w)) for h, w in zip(have, old, strict=False)]
    if len(set(shifts)) > 1 and code != "hip":
        return None
    by_text = {}
    for w, shift in zip(old, shifts, strict=False):
        by_text.setdefault(w.strip(), shift)
    shift = shifts[0]
    out = []
    for line in new.splitlines(True):
        if not line.strip():
            out.append(line)
            continue
        shift = by_text.get(line.strip(), shift)
        if shift >= 0:
            out.append(" " * shift + line)
        else:
            out.append(line[min(-shift, len(_indent(line))) :])
    return "".join(out)
