"""Which lines of a HIP source an AMD compile skips: the NVIDIA-only preprocessor branches.

A kernel may carry platform code under `__HIP_PLATFORM_NVIDIA__` / `__CUDA_ARCH__` guards
(DESIGN.md, Backends). The warp-width lint and the AMD static gate judge the lines an AMD compile
keeps, so `nvidia_only_lines` evaluates each #if/#ifdef/#ifndef/#elif/#else with three values:
the NVIDIA platform macros are false, the AMD ones true, anything else unknown (both branches
kept). A branch is dropped only when its condition is surely false on AMD, or an earlier branch
of the same #if was surely true. An integer macro #defined in branches AMD keeps takes those
values (`#if GEMM_MATRIX_CORES == 1` after 1 was defined only under an NVIDIA guard is false).
What it does not do: expand macros that stand for the platform macros (`#define ON_NVIDIA
__HIP_PLATFORM_NVIDIA__`) or hold expressions; such code is judged as if AMD compiled it.
"""

from __future__ import annotations

import ast
import re

NVIDIA_MACROS = (
    "__HIP_PLATFORM_NVIDIA__",
    "__HIP_PLATFORM_NVCC__",
    "__CUDA_ARCH__",
    "__NVCC__",
    "__CUDACC__",
)
AMD_MACROS = ("__HIP_PLATFORM_AMD__", "__HIP_PLATFORM_HCC__")  # per target: __gfx942__ unknown
_DIRECTIVE = re.compile(r"^\s*#\s*(?P<kind>if|ifdef|ifndef|elif|else|endif)\b(?P<rest>.*)$")
_DEFINE = re.compile(r"^\s*#\s*define\s+(?P<name>[A-Za-z_]\w*)(?P<value>[^(\w].*)?$")
Macros = dict[str, set[int] | None]  # None: defined with a value that is not an integer literal


def _known(name: str) -> bool | None:
    if name in NVIDIA_MACROS:
        return False
    if name in AMD_MACROS:
        return True
    return None


def _compare(node: ast.Compare, macros: Macros) -> bool | None:
    if len(node.ops) != 1 or not isinstance(node.left, ast.Name):
        return None
    values, right = macros.get(node.left.id), node.comparators[0]
    if not values or not (isinstance(right, ast.Constant) and isinstance(right.value, int)):
        return None
    test = {
        ast.Eq: int.__eq__,
        ast.NotEq: int.__ne__,
        ast.Lt: int.__lt__,
        ast.LtE: int.__le__,
        ast.Gt: int.__gt__,
        ast.GtE: int.__ge__,
    }.get(type(node.ops[0]))
    if test is None:
        return None
    results = {test(v, right.value) for v in values}
    return results.pop() if len(results) == 1 else None


def _value(node: ast.AST, macros: Macros) -> bool | None:
    """Three-valued truth of a converted #if expression on AMD (None: not known here)."""
    if isinstance(node, ast.Compare):
        return _compare(node, macros)
    if isinstance(node, ast.BoolOp):
        values = [_value(v, macros) for v in node.values]
        if isinstance(node.op, ast.And):
            return False if False in values else (None if None in values else True)
        return True if True in values else (None if None in values else False)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _value(node.operand, macros)
        return None if inner is None else not inner
    if isinstance(node, ast.Name):
        return _known(node.id)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return bool(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "defined":
        arg = node.args[0] if node.args else None
        return _known(arg.id) if isinstance(arg, ast.Name) else None
    return None


def condition_on_amd(expr: str, macros: Macros | None = None) -> bool | None:
    """True/False when an #if expression is decided by the platform macros on AMD, else None.
    `macros`: integer macros and the values AMD's compiles may give them (nvidia_only_lines)."""
    text = expr.split("//")[0]
    text = re.sub(r"\bdefined\s+([A-Za-z_]\w*)", r"defined(\1)", text)
    text = text.replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"!(?!=)", " not ", text)
    try:
        return _value(ast.parse(text.strip(), mode="eval").body, macros or {})
    except SyntaxError:
        return None


def _defined(before: set[int] | None, value: str | None) -> set[int] | None:
    text = (value or "").split("//")[0].strip()
    if before is None or not re.fullmatch(r"-?\d+", text):
        return None
    return before | {int(text)}


def nvidia_only_lines(source: str) -> set[int]:
    """1-based numbers of the lines an AMD compile drops."""
    dropped: set[int] = set()
    # Each open #if: (this branch live?, an earlier branch surely taken?, the enclosing live?)
    stack: list[tuple[bool, bool, bool]] = []
    live = True
    macros: Macros = {}
    for number, line in enumerate(source.splitlines(), start=1):
        if live and (d := _DEFINE.match(line)):
            macros[d["name"]] = _defined(macros.get(d["name"], set()), d["value"])
        m = _DIRECTIVE.match(line)
        kind = m["kind"] if m else None
        if kind in ("if", "ifdef", "ifndef"):
            rest = m["rest"].strip()
            cond = (
                condition_on_amd(rest, macros)
                if kind == "if"
                else _known(rest.split()[0])
                if rest
                else None
            )
            if kind == "ifndef" and cond is not None:
                cond = not cond
            stack.append((cond is not False, cond is True, live))
            live = live and cond is not False
        elif kind == "elif" and stack:
            _, taken, outer = stack.pop()
            cond = condition_on_amd(m["rest"], macros)
            branch = not taken and cond is not False
            stack.append((branch, taken or cond is True, outer))
            live = outer and branch
        elif kind == "else" and stack:
            _, taken, outer = stack.pop()
            stack.append((not taken, True, outer))
            live = outer and not taken
        elif kind == "endif" and stack:
            live = stack.pop()[2]
        if not live:
            dropped.add(number)
    return dropped


def amd_source(source: str) -> str:
    """`source` with the lines an AMD compile drops blanked (line numbers kept)."""
    dropped = nvidia_only_lines(source)
    return "\n".join("" if i in dropped else ln for i, ln in enumerate(source.splitlines(), 1))
