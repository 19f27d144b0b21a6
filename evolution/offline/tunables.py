"""Tunable parameters declared in a native candidate's kernel.hip, and the space they span.

The notation (the only one hipevolve reads): a line comment `// @tunable NAME: v1, v2, ...`
directly before the object-like `#define NAME value` it governs. The comment lists every value
NAME may take; the #define holds the current one, which must be in the list:

    // @tunable BV: 16, 32, 64
    #define BV 32

Values are single tokens as written in C (`64`, `0x40`, `true`, `float`), compared as text.
A name is declared once and #defined once in the file (a second #define would make an edit
ambiguous). Changing a configuration rewrites only the #define lines; every other byte stays.

Malformed declarations raise TunableError with the line number: the verifier's parse stage turns
it into a parse_error, the mutator treats a parent that raises it as having nothing to tune.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

_DECLARATION = re.compile(r"^\s*//\s*@tunable\b(?P<rest>.*)$")
_DECLARED = re.compile(r"^\s+(?P<name>[A-Za-z_]\w*)\s*:(?P<values>.*)$")
_DEFINE = re.compile(r"^(?P<head>\s*#\s*define\s+(?P<name>[A-Za-z_]\w*))(?P<tail>.*)$")
_VALUE = re.compile(r"[^\s,/*]+")
# The value of an object-like #define: what follows the name up to a trailing comment.
_DEFINE_TAIL = re.compile(r"^(?P<gap>\s+)(?P<value>[^\s/]+)(?P<rest>\s*(?://.*|/\*.*)?)$")

Configuration = dict[str, str]


class TunableError(ValueError):
    """A malformed `@tunable` declaration; `line` is 1-based in the kernel source."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"kernel.hip line {line}: {message}")
        self.line = line


class Tunable(BaseModel):
    """One declared parameter: the values it may take and the one its #define holds now."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="the macro name, as in `#define NAME value`")
    values: tuple[str, ...] = Field(description="declared values, in the order written")
    current: str = Field(description="the #define's value now; one of `values`")
    line: int = Field(description="1-based line of the #define in the source")


def _parse_values(line: int, name: str, text: str) -> tuple[str, ...]:
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise TunableError(line, f"@tunable {name}: values must be `v1, v2, ...` with none empty")
    for p in parts:
        if not _VALUE.fullmatch(p):
            raise TunableError(line, f"@tunable {name}: value {p!r} is not a single C token")
    if len(set(parts)) != len(parts):
        raise TunableError(line, f"@tunable {name}: a value is listed twice")
    return tuple(parts)


def _defined_value(line: int, name: str, source_line: str | None) -> str:
    define = _DEFINE.match(source_line or "")
    if define is None or define["name"] != name:
        raise TunableError(
            line, f"@tunable {name} must be directly followed by `#define {name} <value>`"
        )
    tail = _DEFINE_TAIL.match(define["tail"])
    if tail is None:
        raise TunableError(
            line + 1, f"#define {name} must be object-like with one value token (no macro args)"
        )
    return tail["value"]


def parse_tunables(source: str) -> list[Tunable]:
    """The tunables declared in `source`, in source order; TunableError if one is malformed."""
    lines = source.splitlines()
    found: dict[str, Tunable] = {}
    for index, text in enumerate(lines):
        declaration = _DECLARATION.match(text)
        if declaration is None:
            continue
        number = index + 1
        declared = _DECLARED.match(declaration["rest"])
        if declared is None:
            raise TunableError(number, "write `// @tunable NAME: v1, v2, ...`")
        name = declared["name"]
        if name in found:
            raise TunableError(number, f"{name} is declared @tunable twice")
        values = _parse_values(number, name, declared["values"])
        following = lines[index + 1] if index + 1 < len(lines) else None
        current = _defined_value(number, name, following)
        if current not in values:
            raise TunableError(
                number + 1, f"#define {name} {current}: not among the declared {', '.join(values)}"
            )
        found[name] = Tunable(name=name, values=values, current=current, line=number + 1)
    _check_single_definition(lines, found)
    return list(found.values())


def _check_single_definition(lines: Sequence[str], found: Mapping[str, Tunable]) -> None:
    for index, text in enumerate(lines):
        define = _DEFINE.match(text)
        if define is None:
            continue
        tunable = found.get(define["name"])
        if tunable is not None and tunable.line != index + 1:
            raise TunableError(
                index + 1,
                f"{tunable.name} is #defined again (its @tunable #define is on line "
                f"{tunable.line}); a tunable has exactly one #define",
            )


def current_configuration(tunables: Sequence[Tunable]) -> Configuration:
    """Each tunable's current value, by name."""
    return {t.name: t.current for t in tunables}


def with_values(source: str, values: Mapping[str, str]) -> str:
    """`source` with the #define of each named tunable set to the given value.

    Only those #define lines change (their trailing comments stay). Raises TunableError for a
    malformed source, KeyError for a name that is not declared, ValueError for an undeclared value.
    """
    tunables = {t.name: t for t in parse_tunables(source)}
    lines = source.splitlines(keepends=True)
    for name, value in values.items():
        if name not in tunables:
            raise KeyError(f"{name} is not a declared tunable (declared: {', '.join(tunables)})")
        tunable = tunables[name]
        if value not in tunable.values:
            raise ValueError(f"{name}={value}: not among the declared {', '.join(tunable.values)}")
        index = tunable.line - 1
        body = lines[index].rstrip("\r\n")
        ending = lines[index][len(body) :]
        define = _DEFINE.match(body)
        tail = _DEFINE_TAIL.match(define["tail"]) if define else None
        assert define is not None and tail is not None  # parse_tunables checked this line
        lines[index] = f"{define['head']}{tail['gap']}{value}{tail['rest']}{ending}"
    return "".join(lines)


def configurations(tunables: Sequence[Tunable]) -> Iterator[Configuration]:
    """Every configuration of the declared space (the product of the values), in a fixed order."""
    names = [t.name for t in tunables]
    for combo in itertools.product(*(t.values for t in tunables)):
        yield dict(zip(names, combo, strict=True))


def space_size(tunables: Sequence[Tunable]) -> int:
    """How many configurations the declared space holds (1 when nothing is declared)."""
    return math.prod(len(t.values) for t in tunables)


def configuration_key(configuration: Mapping[str, str]) -> str:
    """A stable text key, independent of dict order: `BV=32;NT=256` (names sorted)."""
    return ";".join(f"{name}={configuration[name]}" for name in sorted(configuration))
