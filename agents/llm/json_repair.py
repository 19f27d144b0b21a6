"""Reading a JSON object a model wrote with a common slip: a pure function, each repair named.

The slips read here, as models make them: single or typographic quotes, trailing commas, a
missing comma between members, // # and /* */ comments, Python's True/False/None, unquoted
keys, an unquoted text value ({bottleneck: memory}), invalid backslash escapes. The object is
tokenized and read by a small recursive-descent reader that accepts those slips and nothing
looser: an object that never closes, or a key without its colon, is not read.
"""

from __future__ import annotations

import json
import re
from typing import Any

_QUOTES = {'"': '"', "'": "'", "\u201c": "\u201d", "\u2018": "\u2019"}
_WORD = re.compile(r"[^\s{}\[\]:,\"'\u201c\u201d\u2018\u2019]+")
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None}
_PYTHON = {"True": True, "False": False, "None": None}


class _Unreadable(Exception):
    pass


def balanced_end(text: str, start: int) -> int | None:
    """The index just past the brace that closes the one at `start` (strings in any of the
    quotes above and comments skipped), or None when it never closes."""
    depth = 0
    i = start
    while i < len(text):
        ch = text[i]
        if ch in _QUOTES:
            i = _string_end(text, i)
            if i < 0:
                return None
            continue
        if text.startswith(("//", "/*"), i) or ch == "#":
            i = _comment_end(text, i)
            continue
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _string_end(text: str, i: int) -> int:
    """Just past the string opening at `i`, or -1 when it never closes."""
    close = _QUOTES[text[i]]
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text[j] == close:
            return j + 1
        if close == "'" and text[j] == "\n":
            return -1  # an apostrophe in prose, not a string
        j += 1
    return -1


def _comment_end(text: str, i: int) -> int:
    if text.startswith("/*", i):
        end = text.find("*/", i + 2)
        return len(text) if end < 0 else end + 2
    end = text.find("\n", i)
    return len(text) if end < 0 else end


def repaired(raw: str) -> tuple[Any, tuple[str, ...]] | None:
    """The value `raw` holds, read with the slips above, and which slips it had; None when it
    cannot be read."""
    repairs: set[str] = set()
    try:
        tokens = _tokens(raw, repairs)
        value, at = _value(tokens, 0, repairs)
    except _Unreadable:
        return None
    if at != len(tokens):
        return None
    return value, tuple(sorted(repairs))


def _tokens(raw: str, repairs: set[str]) -> list[tuple[str, Any]]:
    tokens: list[tuple[str, Any]] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch.isspace():
            i += 1
        elif raw.startswith(("//", "/*"), i) or ch == "#":
            repairs.add("comments")
            i = _comment_end(raw, i)
        elif ch in _QUOTES:
            end = _string_end(raw, i)
            if end < 0:
                raise _Unreadable
            tokens.append(("str", _string(raw[i + 1 : end - 1], ch, repairs)))
            i = end
        elif ch in "{}[]:,":
            tokens.append((ch, ch))
            i += 1
        elif ch == "=":
            repairs.add("= for :")
            tokens.append((":", ":"))
            i += 1
        else:
            word = _WORD.match(raw, i)
            assert word is not None
            tokens.append(("word", word.group()))
            i = word.end()
    return tokens


def _string(body: str, quote: str, repairs: set[str]) -> str:
    if quote != '"':
        repairs.add("single quotes" if quote == "'" else "typographic quotes")
        body = body.replace("\\'", "'").replace('"', '\\"')
    try:
        return json.loads(f'"{body}"', strict=False)
    except ValueError:
        repairs.add("invalid escapes")
        return json.loads('"' + re.sub(r'\\(?!["\\/bfnrtu])', r"\\\\", body) + '"', strict=False)


def _value(tokens: list[tuple[str, Any]], i: int, repairs: set[str]) -> tuple[Any, int]:
    if i >= len(tokens):
        raise _Unreadable
    kind, text = tokens[i]
    if kind == "{":
        return _object(tokens, i + 1, repairs)
    if kind == "[":
        return _array(tokens, i + 1, repairs)
    if kind == "str":
        return text, i + 1
    if kind != "word":
        raise _Unreadable
    if text in _LITERALS:
        return _LITERALS[text], i + 1
    if text in _PYTHON:
        repairs.add("Python literals")
        return _PYTHON[text], i + 1
    if _NUMBER.fullmatch(text):
        return json.loads(text) if not text.startswith(".") else float(text), i + 1
    words = []
    while i < len(tokens) and tokens[i][0] == "word":
        words.append(tokens[i][1])
        i += 1
    repairs.add("unquoted text")
    return " ".join(words), i


def _object(tokens: list[tuple[str, Any]], i: int, repairs: set[str]) -> tuple[dict, int]:
    out: dict[str, Any] = {}
    while True:
        if i >= len(tokens):
            raise _Unreadable
        if tokens[i][0] == "}":
            return out, i + 1
        if tokens[i][0] == "str":
            key, i = tokens[i][1], i + 1
        elif tokens[i][0] == "word":
            words = []
            while i < len(tokens) and tokens[i][0] == "word":
                words.append(tokens[i][1])
                i += 1
            key = " ".join(words)
            repairs.add("unquoted keys")
        else:
            raise _Unreadable
        if i >= len(tokens) or tokens[i][0] != ":":
            raise _Unreadable
        out[key], i = _value(tokens, i + 1, repairs)
        i = _separator(tokens, i, "}", repairs)


def _array(tokens: list[tuple[str, Any]], i: int, repairs: set[str]) -> tuple[list, int]:
    out: list[Any] = []
    while True:
        if i >= len(tokens):
            raise _Unreadable
        if tokens[i][0] == "]":
            return out, i + 1
        value, i = _value(tokens, i, repairs)
        out.append(value)
        i = _separator(tokens, i, "]", repairs)


def _separator(tokens: list[tuple[str, Any]], i: int, close: str, repairs: set[str]) -> int:
    """Past the comma after a member: a trailing comma before `close`, or a missing one, noted."""
    if i < len(tokens) and tokens[i][0] == ",":
        if i + 1 < len(tokens) and tokens[i + 1][0] == close:
            repairs.add("trailing comma")
        return i + 1
    if i < len(tokens) and tokens[i][0] != close:
        repairs.add("missing comma")
    return i
