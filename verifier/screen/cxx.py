"""A piece of C++ as the screen reads it (kernel.hip, or a string handed to load_inline), and
where a check fired in any source.

`CxxSource` lexes its text once: comments stripped (`code`), string and character contents blanked
as well (`bare`, where call patterns are matched), preprocessor lines as the compiler reads them.
sources.py bundles these with the parsed model.py for the checks; expand.py makes macro-expanded
views of them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from hipevolve.verifier.screen.lexer import Lexed, lex


class Hit(NamedTuple):
    """Where a check fired: the file, its 1-based line, and what is wrong there."""

    file: str
    line: int
    message: str


@dataclass
class CxxSource:
    """One piece of C++: kernel.hip, or a string handed to load_inline (line_offset into the .py)."""

    file: str
    text: str
    inline: bool = False
    line_offset: int = 0
    code: str = field(init=False)  # splices joined, comments stripped, strings kept
    bare: str = field(init=False)  # the same with string and character contents blanked
    lexed: Lexed = field(init=False)

    def __post_init__(self) -> None:
        self.lexed = lex(self.text)
        self.code = self.lexed.code
        self.bare = self.lexed.bare

    def line(self, pos: int) -> int:
        return self.line_offset + self.code.count("\n", 0, pos) + 1

    def hits(
        self, pattern: re.Pattern[str], message: Callable[[re.Match[str]], str]
    ) -> Iterator[Hit]:
        """Matches outside comments and string literals, each with its line and message."""
        for m in pattern.finditer(self.bare):
            yield Hit(self.file, self.line(m.start()), message(m))

    def directives(self) -> Iterator[tuple[int, str, str]]:
        """(line, directive, rest) of each preprocessor line, as the compiler joins and lexes
        it: a `#` at a line's start outside any string or comment (lines inside a raw string
        are no directives)."""
        pos = 0
        for raw in self.bare.split("\n"):
            m = re.match(r"\s*#\s*(\w*)", raw)
            if m:
                rest = self.code[pos + m.end() : pos + len(raw)]
                yield self.line(pos), m[1], rest.strip()
            pos += len(raw) + 1

    def comments(self) -> Iterator[tuple[int, str]]:
        for m in re.finditer(r"//[^\n]*|/\*.*?(?:\*/|$)", self.text, re.S):
            yield self.line_offset + self.text.count("\n", 0, m.start()) + 1, m[0]
