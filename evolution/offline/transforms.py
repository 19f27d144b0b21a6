"""Source transforms the offline mutator applies to a native candidate's kernel.hip.

Each transform is named, carries a one-line rationale a kernel engineer would give for it, and
`apply(source) -> str | None`: the edited source, or None where it does not apply (nothing to
change). They are idempotent: applying one to its own output gives None. A transform only proposes;
the verifier decides. Each one keeps the source compiling, and each is correct for the launches
it can see; the one exception is `restrict_pointers`, which is wrong if a caller passes aliasing
buffers (in-place use), and the verifier's correctness check is what catches that.

The edits are textual, guided by a scan of the source with comments and string literals blanked
(so offsets match the original). The scan understands the C++ that kernels are written in: kernel
definitions, `for` headers, launch sites (`hipLaunchKernelGGL` and `<<<...>>>`); where it is not
sure (a loop bound that is not a compile-time constant, a block size held in a variable) it
leaves the code alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hipevolve.evolution.offline.tunables import TunableError, parse_tunables, with_values


@dataclass(frozen=True)
class Transform:
    """A named source edit; `apply` returns the edited source, or None when it does not apply."""

    name: str
    rationale: str
    edit: Callable[[str], str | None]

    def apply(self, source: str) -> str | None:
        result = self.edit(source)
        return None if result is None or result == source else result


# ----------------------------------------------------------------------------- scanning


def blank_comments(source: str) -> str:
    """`source` with comments and string/char literal contents replaced by spaces.

    Same length and same newlines, so an offset found in the result is an offset in `source`.
    """
    out = list(source)
    i, n = 0, len(source)
    while i < n:
        two = source[i : i + 2]
        if two == "//":
            end = source.find("\n", i)
            start, end = i, n if end < 0 else end
            resume = end
        elif two == "/*":
            end = source.find("*/", i + 2)
            start, end = i, n if end < 0 else end + 2
            resume = end
        elif source[i] in "\"'":
            quote, end = source[i], i + 1
            while end < n and source[end] not in (quote, "\n"):
                end += 2 if source[end] == "\\" else 1
            start, end = i + 1, min(end, n)  # keep the quotes, blank what is between them
            resume = end + 1
        else:
            i += 1
            continue
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "
        i = resume
    return "".join(out)


_OPEN = {"(": ")", "[": "]", "{": "}"}


def _match(text: str, start: int) -> int:
    """Index of the bracket closing the one at `start` (same kind), or -1."""
    opening = text[start]
    closing = ">" if opening == "<" else _OPEN[opening]
    depth = 0
    for i in range(start, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    return -1


def _split_top(text: str, start: int, end: int, angles: bool = False) -> list[tuple[int, int]]:
    """Spans of the comma-separated parts of text[start:end], splitting only outside brackets.

    `angles` counts < > as brackets too: right for declarations (`Pack<T, 4>* p`), wrong for
    expressions, where they compare and shift.
    """
    opening, closing = ("([{<", ")]}>") if angles else ("([{", ")]}")
    parts, depth, begin = [], 0, start
    for i in range(start, end):
        c = text[i]
        if c in opening:
            depth += 1
        elif c in closing:
            depth -= 1
        elif c == "," and depth == 0:
            parts.append((begin, i))
            begin = i + 1
    parts.append((begin, end))
    return parts


@dataclass(frozen=True)
class _Kernel:
    name: str
    name_at: int
    params: tuple[int, int]  # offsets of the parameter list's ( and )
    body: tuple[int, int]  # offsets of the body's { and }
    bounds: tuple[int, int] | None  # offsets of __launch_bounds__'s ( and )


_ATTRIBUTES = {"__launch_bounds__", "__attribute__", "__declspec", "alignas"}


def _kernels(blank: str) -> list[_Kernel]:
    """The __global__ function definitions (declarations without a body are skipped)."""
    found = []
    for m in re.finditer(r"\b__global__\b", blank):
        groups: list[tuple[str, int, int]] = []
        i = m.end()
        while i < len(blank) and blank[i] not in "{;":
            if blank[i] == "(":
                close = _match(blank, i)
                if close < 0:
                    break
                word = re.search(r"(\w+)\s*$", blank[m.end() : i])
                groups.append((word[1] if word else "", i, close))
                i = close
            i += 1
        if i >= len(blank) or blank[i] != "{" or not groups:
            continue
        params = [g for g in groups if g[0] not in _ATTRIBUTES]
        bounds = [g for g in groups if g[0] == "__launch_bounds__"]
        close = _match(blank, i)
        if not params or close < 0:
            continue
        name, open_, close_params = params[-1]
        name_at = blank.rfind(name, m.end(), open_)
        found.append(
            _Kernel(
                name=name,
                name_at=name_at,
                params=(open_, close_params),
                body=(i, close),
                bounds=(bounds[0][1], bounds[0][2]) if bounds else None,
            )
        )
    return found


def _insert(source: str, edits: list[tuple[int, int, str]]) -> str:
    """Applies (start, end, replacement) edits; they must not overlap."""
    for start, end, text in sorted(edits, reverse=True):
        source = source[:start] + text + source[end:]
    return source


# ----------------------------------------------------------------------------- constants

_INTEGRAL = r"(?:unsigned|signed|int|long|short|char|bool|size_t|u?int\d+_t|auto)"
_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*|[A-Za-z_]\w*|<<|>>|[-+*/%()~])")


def _is_constant(expr: str, constants: set[str]) -> bool:
    """Whether `expr` is an integer expression of literals and known compile-time constants."""
    expr = re.sub(r"\bsizeof\s*\([^()]*\)", "1", expr).strip()
    if not expr:
        return False
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            return expr[pos:].strip() == ""
        word = m[1]
        if (word[0].isalpha() or word[0] == "_") and word not in constants:
            return False
        pos = m.end()
    return True


def _constants(blank: str) -> set[str]:
    """Names that are integer compile-time constants: constexpr variables, template value
    parameters, and object-like #defines whose value is itself constant."""
    names = set(
        re.findall(rf"\bconstexpr\s+(?:static\s+)?{_INTEGRAL}(?:\s+{_INTEGRAL})*\s+(\w+)", blank)
    )
    for params in re.findall(r"\btemplate\s*<([^<>]*)>", blank):
        names.update(re.findall(rf"\b{_INTEGRAL}\s+(\w+)", params))
    defines = dict(re.findall(r"^\s*#\s*define\s+(\w+)[ \t]+(.+)$", blank, re.M))
    changed = True
    while changed:  # a #define may refer to one defined after it
        changed = False
        for name, value in defines.items():
            if name not in names and _is_constant(value, names):
                names.add(name)
                changed = True
    return names


# ----------------------------------------------------------------------------- unroll

_FOR_HEADER = re.compile(
    rf"^\s*(?:const\s+)?{_INTEGRAL}(?:\s+{_INTEGRAL})*\s+(?P<var>\w+)\s*=\s*(?P<init>[^;]+);"
    r"\s*(?P=var)\s*(?:<=|<|>=|>|!=)\s*(?P<bound>[^;]+);"
    r"\s*(?P<step>[^;]+?)\s*$"
)


def _step_is_constant(step: str, var: str, constants: set[str]) -> bool:
    if re.fullmatch(rf"(?:\+\+|--)\s*{var}|{var}\s*(?:\+\+|--)", step):
        return True
    m = re.fullmatch(rf"{var}\s*(?:\+=|-=|\*=|<<=|>>=)\s*(.+)", step)
    return bool(m) and _is_constant(m[1], constants)


def _loop_body_end(blank: str, after_header: int) -> int:
    i = after_header
    while i < len(blank) and blank[i].isspace():
        i += 1
    if i < len(blank) and blank[i] == "{":
        return _match(blank, i)
    depth = 0
    for j in range(i, len(blank)):
        c = blank[j]
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0 and c == "}":
                return j
        elif c == ";" and depth == 0:
            return j
    return -1


def _line_start(text: str, at: int) -> int:
    return text.rfind("\n", 0, at) + 1


def _lines_before(text: str, at: int) -> Iterator[str]:
    """The lines of `text` before the one holding offset `at`, nearest first, stripped."""
    end = text.rfind("\n", 0, at)
    while end >= 0:
        start = text.rfind("\n", 0, end)
        yield text[start + 1 : end].strip()
        end = start


def _hinted(source: str, at: int) -> bool:
    """Whether the last non-blank line before the one at `at` is a loop pragma."""
    previous = next((line for line in _lines_before(source, at) if line), "")
    return bool(re.match(r"#\s*pragma\s+(?:unroll|nounroll|clang\s+loop|GCC\s+unroll)", previous))


def _starts_statement(blank: str, at: int) -> bool:
    """Whether `at` begins its line and the code before it ends a statement or opens a block
    (preprocessor lines skipped), so a `#pragma unroll` line can go in front of it."""
    if blank[_line_start(blank, at) : at].strip():
        return False
    for code in _lines_before(blank, at):
        if code and not code.startswith("#"):
            return code[-1] in ";{}:"
    return True


def _unroll(source: str) -> str | None:
    blank = blank_comments(source)
    constants = _constants(blank)
    edits = []
    for kernel in _kernels(blank):
        body_start, body_end = kernel.body
        for m in re.finditer(r"\bfor\s*\(", blank[body_start:body_end]):
            at = body_start + m.start()
            open_ = body_start + m.end() - 1
            close = _match(blank, open_)
            header = _FOR_HEADER.match(blank[open_ + 1 : close]) if close > 0 else None
            if header is None:
                continue
            end = _loop_body_end(blank, close + 1)
            if end < 0 or re.search(r"\b(?:for|while|do)\b", blank[close + 1 : end + 1]):
                continue  # not innermost
            trip = (header["init"], header["bound"])
            if not all(_is_constant(e, constants) for e in trip):
                continue
            if not _step_is_constant(header["step"].strip(), header["var"], constants):
                continue
            start = _line_start(source, at)
            if _hinted(source, start) or not _starts_statement(blank, at):
                continue
            edits.append((start, start, f"{source[start:at]}#pragma unroll\n"))
    return _insert(source, edits) if edits else None


# ----------------------------------------------------------------------------- __restrict__

_RESTRICT = re.compile(r"\b(?:__restrict__|__restrict|restrict)\b")


def _restrict(source: str) -> str | None:
    blank = blank_comments(source)
    edits = []
    for kernel in _kernels(blank):
        open_, close = kernel.params
        for start, end in _split_top(blank, open_ + 1, close, angles=True):
            param = blank[start:end]
            if param.count("*") != 1 or _RESTRICT.search(param) or re.search(r"[&(\[]", param):
                continue
            star = start + param.index("*")
            gap = "" if blank[star + 1].isspace() else " "
            edits.append((star + 1, star + 1, f" __restrict__{gap}"))
    return _insert(source, edits) if edits else None


# ----------------------------------------------------------------------------- __launch_bounds__


def _launches(blank: str) -> list[tuple[str, str]]:
    """(kernel name, block-size argument) of each launch site in the source."""
    found = []
    for m in re.finditer(r"\bhipLaunchKernelGGL\s*\(", blank):
        close = _match(blank, m.end() - 1)
        args = _split_top(blank, m.end(), close) if close > 0 else []
        if len(args) >= 3:
            kernel = blank[args[0][0] : args[0][1]].strip()
            kernel = re.sub(r"^HIP_KERNEL_NAME\s*\((.*)\)$", r"\1", kernel).strip()
            name = re.match(r"\w+", kernel)
            if name:
                found.append((name[0], blank[args[2][0] : args[2][1]]))
    for m in re.finditer(r"<<<", blank):
        end = blank.find(">>>", m.end())
        i = m.start()
        while i > 0 and blank[i - 1].isspace():
            i -= 1
        if i > 0 and blank[i - 1] == ">":  # template arguments: walk back to their <
            depth = 0
            for j in range(i - 1, -1, -1):
                depth += {">": 1, "<": -1}.get(blank[j], 0)
                if depth == 0:
                    i = j
                    break
        name = re.search(r"(\w+)\s*$", blank[:i])
        args = _split_top(blank, m.end(), end) if end > 0 else []
        if name and len(args) >= 2:
            found.append((name[1], blank[args[1][0] : args[1][1]]))
    return found


def _block_threads(block: str, tunables: set[str]) -> str | None:
    """`A * B` when the block size is `A`, or `dim3(A, B[, 1])`, with tunables or literals, at
    least one a tunable; None when the thread count is not readable from declared tunables."""
    block = " ".join(block.split())
    m = re.fullmatch(r"dim3\s*\((.*)\)", block)
    parts = [p.strip() for p in (m[1] if m else block).split(",")]
    if not 1 <= len(parts) <= 3:
        return None
    if not all(p in tunables or re.fullmatch(r"\d+", p) for p in parts):
        return None
    if not any(p in tunables for p in parts):
        return None
    return " * ".join(p for p in parts if p != "1")


def _launch_bounds(source: str) -> str | None:
    try:
        tunables = {t.name for t in parse_tunables(source)}
    except TunableError:
        return None
    if not tunables:
        return None
    blank = blank_comments(source)
    threads: dict[str, set[str | None]] = {}
    for kernel, block in _launches(blank):
        threads.setdefault(kernel, set()).add(_block_threads(block, tunables))
    edits = []
    for kernel in _kernels(blank):
        launched = threads.get(kernel.name, set())
        if len(launched) != 1 or None in launched:
            continue  # never launched here, launched with differing or unreadable sizes
        (wanted,) = launched
        if kernel.bounds is None:
            edits.append((kernel.name_at, kernel.name_at, f"__launch_bounds__({wanted}) "))
            continue
        open_, close = kernel.bounds
        first = _split_top(blank, open_ + 1, close)[0]
        if " ".join(blank[first[0] : first[1]].split()) != wanted:
            edits.append((first[0], first[1], wanted))
    return _insert(source, edits) if edits else None


# ----------------------------------------------------------------------------- vector width

_VECTOR_NAME = re.compile(r"VEC|^VW$", re.IGNORECASE)


def _vector_width(pick: Callable[[list[int]], int]) -> Callable[[str], str | None]:
    def edit(source: str) -> str | None:
        try:
            declared = parse_tunables(source)
        except TunableError:
            return None
        values = {}
        for t in declared:
            if not _VECTOR_NAME.search(t.name):
                continue
            try:
                widths = [int(v, 0) for v in t.values]
            except ValueError:
                continue  # not integers: not a width
            chosen = t.values[widths.index(pick(widths))]
            if chosen != t.current:
                values[t.name] = chosen
        return with_values(source, values) if values else None

    return edit


# ----------------------------------------------------------------------------- catalogue

CATALOGUE: tuple[Transform, ...] = (
    Transform(
        "unroll_constant_loops",
        "Fully unrolling innermost constant-trip loops keeps their arrays in registers and "
        "removes loop counters and branches.",
        _unroll,
    ),
    Transform(
        "restrict_pointers",
        "__restrict__ on kernel pointers promises no aliasing, so loads can be hoisted, kept in "
        "registers and issued as scalar or wider loads.",
        _restrict,
    ),
    Transform(
        "launch_bounds_from_block",
        "__launch_bounds__ equal to the launched block size lets the register allocator use the "
        "registers that size allows instead of assuming 1024 threads.",
        _launch_bounds,
    ),
    Transform(
        "widen_vector",
        "The widest declared vector width moves the most bytes per memory instruction, what a "
        "bandwidth-bound kernel wants.",
        _vector_width(max),
    ),
    Transform(
        "narrow_vector",
        "The narrowest declared vector width needs the fewest registers per thread, for a kernel "
        "that spills or is held back by occupancy.",
        _vector_width(min),
    ),
)


def transform_named(name: str) -> Transform:
    """The catalogue's transform called `name`; KeyError listing the names if there is none."""
    for transform in CATALOGUE:
        if transform.name == name:
            return transform
    raise KeyError(f"no transform {name!r} (known: {', '.join(t.name for t in CATALOGUE)})")
