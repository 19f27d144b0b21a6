"""C/C++ source read the way the compiler's first phases read it, for the screen.

The screen matches patterns on source whose comments are gone; if it finds a comment where the
compiler finds a string (or the reverse), a hidden `#include` reaches the compiler unseen
(issue 32: a raw string literal holding `" /*` hid the line after it). So this lexer follows
translation phases 2 and 3 rather than a regex:
- line splices (backslash-newline) join lines everywhere except inside raw strings, so a `//`
  comment ending in a backslash swallows the next line, and `#inc\\<newline>lude` is a directive;
- raw strings `R"delim( ... )delim"` (with u8/u/U/L prefixes) end only at `)delim"`;
- ordinary strings and character literals honour escapes and end at the line's end;
- pp-numbers keep C++14 digit separators (1'000), which are not character literals;
- the digraphs `%:` and `%:%:` are `#` and `##`, so `%:include` is a directive.
Trigraphs are not translated (C++17 removed them; gcc in strict modes still reads them), so the
screen refuses any source that spells one (`trigraphs` below).

`lex` returns two texts of the same length and line structure as the spliced source: `code`
(comments replaced by a space, strings kept) and `bare` (string and character contents blanked,
their quotes kept). A match's offset in `bare` is its offset in `code`; the newlines a splice
removed come back at the end of the logical line, so line numbers stay the physical ones of each
logical line's start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_STRING_PREFIXES = {"u8", "u", "U", "L"}
_RAW_PREFIXES = {"R", "u8R", "uR", "UR", "LR"}
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_PP_NUMBER = re.compile(r"\.?\d(?:[eEpP][+-]|'[\w]|[\w.])*")
_RAW_DELIM = re.compile(r'[^\s()\\"]{0,16}\(')
TRIGRAPH = re.compile(r"\?\?[=/'()!<>\-]")


@dataclass
class Lexed:
    """The source after lexing: `code` and `bare` (same length), and what could not be lexed."""

    code: str
    bare: str
    strings: list[tuple[int, str]] = field(default_factory=list)  # (offset in code, literal)
    errors: list[tuple[int, str]] = field(default_factory=list)  # (offset in code, problem)


class _Out:
    def __init__(self) -> None:
        self.code: list[str] = []
        self.bare: list[str] = []
        self.size = 0
        self.pending_newlines = 0  # removed by splices; given back at the next real newline

    def put(self, code: str, bare: str | None = None) -> None:
        self.code.append(code)
        self.bare.append(code if bare is None else bare)
        self.size += len(code)

    def newline(self) -> None:
        self.put("\n" * (1 + self.pending_newlines))
        self.pending_newlines = 0


def _blank(text: str) -> str:
    return "".join("\n" if c == "\n" else " " for c in text)


def _splice(source: str, i: int) -> int:
    """The index past any line splices starting at i."""
    while source.startswith("\\\n", i) or source.startswith("\\\r\n", i):
        i += 2 if source[i + 1] == "\n" else 3
    return i


class _Reader:
    """Characters of phase 2: reads past line splices, counting the newlines they remove."""

    def __init__(self, source: str, out: _Out) -> None:
        self.s = source
        self.n = len(source)
        self.out = out

    def skip(self, i: int) -> int:
        j = _splice(self.s, i)
        if j != i:
            self.out.pending_newlines += self.s.count("\n", i, j)
        return j

    def take(self, i: int, pred) -> tuple[str, int]:
        """Characters from i while pred(char) holds, splices removed."""
        chars: list[str] = []
        i = self.skip(i)
        while i < self.n and pred(self.s[i]):
            chars.append(self.s[i])
            i = self.skip(i + 1)
        return "".join(chars), i

    def peek(self, i: int, count: int) -> str:
        """The next `count` phase-2 characters from i (splices removed), without counting."""
        chars: list[str] = []
        while len(chars) < count:
            i = _splice(self.s, i)
            if i >= self.n:
                break
            chars.append(self.s[i])
            i += 1
        return "".join(chars)

    def advance(self, i: int, count: int) -> int:
        for _ in range(count):
            i = self.skip(i) + 1
        return self.skip(i)


def lex(source: str) -> Lexed:
    source = source.replace("\r\n", "\n")
    out = _Out()
    r = _Reader(source, out)
    lexed = Lexed("", "")
    i = r.skip(0)
    n = len(source)
    while i < n:
        c = source[i]
        two = r.peek(i, 2)
        if c == "\n":
            out.newline()
            i = r.skip(i + 1)
        elif two == "//":
            i = r.advance(i, 2)
            while i < n and source[i] != "\n":
                i = r.skip(i + 1)
            out.put(" ")
        elif two == "/*":
            start, pending = i, out.pending_newlines
            i = r.advance(i, 2)
            while i < n and r.peek(i, 2) != "*/":
                i += 1
            if i >= n:
                lexed.errors.append((out.size, "unterminated /* comment"))
            else:
                i = r.advance(i, 2)
            # The comment's newlines, spliced or not, stay where they were.
            out.pending_newlines = pending
            out.put(" " + "\n" * source.count("\n", start, i))
        elif c.isalpha() or c in "_$":
            word, j = r.take(i, lambda ch: ch.isalnum() or ch in "_$")
            nxt = source[j] if j < n else ""
            if word in _RAW_PREFIXES and nxt == '"':
                i = _raw_string(source, j, word, out, lexed)
            elif word in _STRING_PREFIXES and nxt in "\"'":
                out.put(word)
                i = _quoted(r, j, out, lexed)
            else:
                out.put(word)
                i = j
        elif c.isdigit() or (c == "." and r.peek(i, 2)[1:].isdigit()):
            number, i = r.take(i, lambda ch: ch.isalnum() or ch in "_.'+-")
            m = _PP_NUMBER.match(number)
            keep = m[0] if m else number[:1]
            out.put(keep)
            i = _rewind(source, i, number, len(keep), r)
        elif c in "\"'":
            i = _quoted(r, i, out, lexed)
        elif two == "%:":
            i = r.advance(i, 2)
            out.put("#")
        else:
            out.put(c)
            i = r.skip(i + 1)
    if out.pending_newlines > 0:
        out.put("\n" * out.pending_newlines)
    lexed.code = "".join(out.code)
    lexed.bare = "".join(out.bare)
    return lexed


def _rewind(source: str, end: int, taken: str, kept: int, r: _Reader) -> int:
    """After `take` read `taken` ending at `end` but only `kept` chars belong to the token:
    the index of the first character not kept (splices inside a number are vanishingly rare,
    so a number with a splice keeps its full spelling)."""
    if kept == len(taken):
        return end
    back = len(taken) - kept
    j = end
    while back and j > 0:
        j -= 1
        if source[j] not in "\\\n":
            back -= 1
    return j


def _quoted(r: _Reader, i: int, out: _Out, lexed: Lexed) -> int:
    """A string or character literal starting at the quote at i; ends at the line's end."""
    s, n = r.s, r.n
    quote = s[i]
    chars = [quote]
    start = out.size
    i = r.skip(i + 1)
    closed = False
    while i < n and s[i] != "\n":
        ch = s[i]
        chars.append(ch)
        if ch == "\\":
            i = r.skip(i + 1)
            if i < n and s[i] != "\n":
                chars.append(s[i])
                i = r.skip(i + 1)
            continue
        i = r.skip(i + 1)
        if ch == quote:
            closed = True
            break
    text = "".join(chars)
    inner = len(text) - (2 if closed else 1)
    out.put(text, quote + " " * inner + (quote if closed else ""))
    if quote == '"':
        lexed.strings.append((start, text))
    return i


def _raw_string(source: str, i: int, prefix: str, out: _Out, lexed: Lexed) -> int:
    """A raw string literal whose opening quote is at i: no splices or escapes inside."""
    start = out.size
    m = _RAW_DELIM.match(source, i + 1)
    if not m:
        lexed.errors.append((start, "raw string literal with a malformed delimiter"))
        out.put(prefix + '"', prefix + '"')
        return i + 1
    delim = m[0][:-1]
    close = source.find(")" + delim + '"', m.end())
    if close < 0:
        lexed.errors.append((start, "unterminated raw string literal"))
        close = len(source) - len(delim) - 2
    end = close + len(delim) + 2
    body = source[i:end]
    out.put(prefix + body, prefix + '"' + _blank(body[1:-1]) + '"')
    lexed.strings.append((start, prefix + body))
    return end


_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def string_value(literal: str) -> str:
    """What a string literal stands for (escapes decoded; raw strings as written)."""
    m = re.match(r'(?:u8|u|U|L)?(R?)"', literal)
    if not m:
        return literal
    if m[1]:
        body = literal[m.end() :]
        open_paren = body.find("(")
        return body[open_paren + 1 : body.rfind(")")]
    body = literal[m.end() :].removesuffix('"')
    return re.sub(
        r"\\(x[0-9A-Fa-f]+|[0-7]{1,3}|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)",
        _unescape,
        body,
        flags=re.S,
    )


def _unescape(m: re.Match[str]) -> str:
    e = m[1]
    if e[0] in "xuU" and len(e) > 1:
        return chr(min(int(e[1:], 16), 0x10FFFF))
    if e[0] in "01234567":
        return chr(int(e, 8))
    return _SIMPLE_ESCAPES.get(e, e)


def joined_strings(lexed: Lexed) -> list[tuple[int, str]]:
    """Adjacent string literals joined (as phase 6 does), each decoded: (offset, value)."""
    joined: list[tuple[int, str]] = []
    end = -1
    for offset, literal in lexed.strings:
        value = string_value(literal)
        if joined and not lexed.bare[end:offset].strip():
            joined[-1] = (joined[-1][0], joined[-1][1] + value)
        else:
            joined.append((offset, value))
        end = offset + len(literal)
    return joined
