"""KernelBench-format files as tasks: class Model, get_inputs(), get_init_inputs().

The file is read with `ast`, not imported, to list it: a malformed file is reported by name with
what it lacks, and nothing in it runs until its reference is evaluated.

KernelBench sizes its inputs with module-level constants (`batch_size = 4096`, `dim = 393216`:
median 2 GiB of inputs), far too large for a CPU check. Each task therefore gets, beside its
`default` case, a `reduced` case (small, untimed) that sets those constants lower: every integer
above SMALL_INT (and every such element of a literal list or tuple) shifts right by the same
amount, the smallest that brings their product (each occurrence counted) within SIZE_BUDGET and
each within MAX_DIM, but never so far that the smallest of them drops below MIN_DIM. One shift
for all keeps their ratios (a stride-2 transposed convolution's output width still equals the
channel count a LayerNorm expects); equal values stay equal. Values at or below SMALL_INT
(kernel sizes, strides, a reduction's dim, head counts) keep their value, so the structure
stays, and the shift stops before a small value that divides a large one no longer would
(GroupNorm's 8 groups of 24 channels). A constant named for the batch that equals no other goes down to BATCH. Constants
computed from others (`bias_shape = (out_channels, 1, 1)`) follow when the case runs
(hipevolve.core.reference.module_globals).
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import Case, TaskSpec, Tolerance

REQUIRED = {
    "Model": ast.ClassDef,
    "get_inputs": ast.FunctionDef,
    "get_init_inputs": ast.FunctionDef,
}
SMALL_INT = 16  # constants at or below this are structure, never scaled
MAX_DIM = 256  # no scaled constant above this
SIZE_BUDGET = 1 << 18  # the product of the scaled constants
MIN_DIM = 4  # no shift takes the smallest scaled constant below this
BATCH = 2  # a constant named for the batch goes down to this
REDUCED = "reduced"


def task_name(path: Path) -> str:
    """A file name as a task name: '19_ReLU.py' -> '19_ReLU'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)


def _int_value(node: ast.expr) -> int | None:
    """An integer literal or an arithmetic expression of them (`2048 * 2`), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(
        node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Pow)
    ):
        a, b = _int_value(node.left), _int_value(node.right)
        if a is None or b is None or (isinstance(node.op, ast.Pow) and b > 64):
            return None
        if isinstance(node.op, ast.FloorDiv) and b == 0:
            return None
        ops = {
            ast.Add: int.__add__,
            ast.Sub: int.__sub__,
            ast.Mult: int.__mul__,
            ast.FloorDiv: int.__floordiv__,
            ast.Pow: int.__pow__,
        }
        return ops[type(node.op)](a, b)
    return None


def _ints(node: ast.expr) -> int | list[int] | tuple[int, ...] | None:
    value: int | list | tuple | None = _int_value(node)
    if value is None and isinstance(node, (ast.List, ast.Tuple)) and node.elts:
        items = [_int_value(e) for e in node.elts]
        kind = tuple if isinstance(node, ast.Tuple) else list  # `(b,) + shape` needs a tuple
        value = kind(items) if all(i is not None for i in items) else None
    return value


def size_constants(tree: ast.Module) -> dict[str, int | list[int] | tuple[int, ...]]:
    """Module-level integer constants: `n = 4096`, `a = b = 2048 * 2`, `shape = (16, 64)`,
    `depth, height, width = 32, 64, 64`."""
    found: dict[str, int | list[int] | tuple[int, ...]] = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Name) and (value := _ints(node.value)) is not None:
                found[target.id] = value
            elif (
                isinstance(target, ast.Tuple)
                and isinstance(node.value, ast.Tuple)
                and len(target.elts) == len(node.value.elts)
            ):
                for name, item in zip(target.elts, node.value.elts, strict=True):
                    if isinstance(name, ast.Name) and (number := _int_value(item)) is not None:
                        found[name.id] = number
    return found


def _is_batch(name: str) -> bool:
    return "batch" in name.lower()


def reduced_globals(constants: dict[str, int | list[int] | tuple[int, ...]]) -> dict[str, str]:
    """The reduced case's constants as Python literals; empty when nothing needs reducing.
    Equal values stay equal (a reference may rely on `batch_size == dim`)."""
    values = lambda c: c if isinstance(c, (list, tuple)) else [c]  # noqa: E731
    structural = {v for name, c in constants.items() if not _is_batch(name) for v in values(c)}
    # every occurrence counts (height = width = 128 is 128 * 128 elements); a batch equal to a
    # structural constant scales with it
    large = [
        v
        for name, c in constants.items()
        for v in values(c)
        if v > SMALL_INT and (not _is_batch(name) or v in structural)
    ]

    def scaled(v: int, shift: int) -> int:
        return v if v <= SMALL_INT else max(1, v >> shift)

    # a structural value that divides a large one (GroupNorm's groups, a head count) still
    # divides it after the shift
    small = {v for c in constants.values() for v in values(c) if 1 < v <= SMALL_INT}
    divides = [(v, s) for v in large for s in small if v % s == 0]

    def keeps_divisors(shift: int) -> bool:
        return all(scaled(v, shift) % s == 0 for v, s in divides)

    # the deepest shift that keeps the smallest large value at MIN_DIM or more
    deepest = max(0, (min(large) // MIN_DIM).bit_length() - 1) if large else 0
    shift = 0
    while (
        shift < deepest
        and keeps_divisors(shift + 1)
        and (
            math.prod(scaled(v, shift) for v in large) > SIZE_BUDGET
            or max(scaled(v, shift) for v in large) > MAX_DIM
        )
    ):
        shift += 1
    reduced = {}
    for name, value in constants.items():
        if _is_batch(name) and isinstance(value, int) and value not in structural:
            new: int | list[int] | tuple[int, ...] = min(value, BATCH)  # a batch is never structure
        elif isinstance(value, (list, tuple)):
            new = type(value)(scaled(v, shift) for v in value)
        else:
            new = scaled(value, shift)
        if new != value:
            reduced[name] = repr(new)
    return reduced


def load_kernelbench_file(path: Path) -> TaskSpec:
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as e:
        raise UserError(
            f"{path}: not valid Python (line {e.lineno}: {e.msg})",
            "fix the file or move it out of the tasks folder",
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(
            f"{path}: cannot be read ({type(e).__name__}: {e})",
            "fix the file or move it out of the tasks folder",
        ) from None
    defined = {
        node.name: type(node)
        for node in tree.body
        if isinstance(node, (ast.ClassDef, ast.FunctionDef))
    }
    missing = [name for name, kind in REQUIRED.items() if defined.get(name) is not kind]
    if missing:
        raise UserError(
            f"{path}: not a KernelBench task, missing {', '.join(missing)}",
            "define class Model, get_inputs() and get_init_inputs()",
        )
    doc = (
        ast.get_docstring(tree)
        or ast.get_docstring(
            next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")
        )
        or ""
    )
    cases = [Case(name="default", small=False)]
    reduced = reduced_globals(size_constants(tree))
    if reduced:
        cases.append(Case(name=REDUCED, small=True, timed=False, globals=reduced))
    return TaskSpec(
        name=task_name(path),
        description=doc.strip().splitlines()[0] if doc.strip() else f"KernelBench task {path.name}",
        family="kernelbench",
        origin="kernelbench",
        reference=path.resolve(),
        cases=tuple(cases),
        tolerance=Tolerance(kind="kernelbench"),
    )
