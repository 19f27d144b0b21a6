"""Whether two candidates are the same code once comments and layout are gone (issue 34): a
model's child that only rewraps, re-indents or re-comments its parent, or an evaluated
candidate, is refused before any compile, and the model is told which one it repeated.

kernel.hip is read through the screen's lexer (lexer.py: line splices, comments, raw strings
and digit separators as the compiler's first phases read them) and compared as its tokens, so
`a+b` and `a + b` are one code and `a - -b` and `a--b` are not (multi-character punctuators
stay whole). Preprocessor lines are compared as written, spacing collapsed, since there a space
can matter (`#define F(x)` is not `#define F (x)`). String and character literals are compared
exactly. model.py is compared as core/candidate.py normalises it (tokens; comments and
docstrings gone). Source the lexer cannot read to the end (an unterminated comment or string)
is compared as written.
"""

from __future__ import annotations

import functools
import re

from hipevolve.core.candidate import Candidate, normalize_python, strip_c_comments
from hipevolve.verifier.screen.lexer import lex

_PUNCTUATORS = (
    r">>=|<<=|<=>|->\*|\.\.\.|::|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||"
    r"\+=|-=|\*=|/=|%=|&=|\|=|\^=|##|\.\*"
)
_TOKEN = re.compile(
    r'"[^"\n]*"|'
    r"'[^'\n]*'|"  # literals (their contents are blanked in `bare`)
    r"[A-Za-z_$][\w$]*|\.?\d(?:[eEpP][+-]|'\w|[\w.])*|" + _PUNCTUATORS + r"|\S"
)


@functools.lru_cache(maxsize=4096)
def token_form(source: str) -> str:
    """kernel.hip as the compiler's tokens: code as tokens joined by single spaces, each
    preprocessor line on a line of its own as written (spacing collapsed)."""
    lexed = lex(source)
    if lexed.errors:
        return source
    blocks: list[str] = []
    tokens: list[str] = []
    for code_line, bare_line in zip(lexed.code.split("\n"), lexed.bare.split("\n"), strict=True):
        if code_line.lstrip().startswith("#"):
            if tokens:
                blocks.append(" ".join(tokens))
                tokens = []
            blocks.append(" ".join(code_line.split()))
        else:  # spans found in `bare` (strings blanked), text taken from `code`
            tokens += [code_line[m.start() : m.end()] for m in _TOKEN.finditer(bare_line)]
    if tokens:
        blocks.append(" ".join(tokens))
    return "\n".join(blocks)


@functools.lru_cache(maxsize=4096)
def _squeezed(source: str) -> str:
    """The source without comments or any whitespace: equal for any two sources of equal
    token forms, and ten times quicker to get (the GDN seed: 0.4 s to lex), so the lexer only
    reads the few sources that pass it."""
    return re.sub(r"\s+", "", strip_c_comments(source.replace("\\\n", "")))


def same_code(a: Candidate, b: Candidate) -> bool:
    """True when a and b differ at most in comments, whitespace and layout."""
    if a.format != b.format:
        return False
    if a.hip_source is not None and b.hip_source is not None:
        if _squeezed(a.hip_source) != _squeezed(b.hip_source):
            return False
        if token_form(a.hip_source) != token_form(b.hip_source):
            return False
    elif a.hip_source != b.hip_source:
        return False
    return normalize_python(a.python_source) == normalize_python(b.python_source)
