"""The static gate: what an AMD GPU cannot do, refused before any GPU time.

Checked per kernel and target, from the static backend's facts (amd_static.analyze) and the
candidate's launchers:
- LDS per workgroup over the target's limit (64 KiB on gfx90a and gfx942, 160 KiB on gfx950),
  static and dynamic alike: the dynamic size is the third launch-configuration argument
  (`k<<<grid, block, BYTES, stream>>>`, `hipLaunchKernelGGL(k, grid, block, BYTES, stream, ...)`)
  when it is a constant or computable from the source (#define, constexpr/const integers, sizeof
  of scalar types, arithmetic); static + dynamic must fit. A size that is not computable here
  (it depends on a launcher argument) is recorded in the verdict's flags as unchecked: no GPU
  this project has runs the AMD runtime that would see it (docs/ROCM.md, "Never run here").
- VGPRs + AGPRs over the per-wave budget (512 on CDNA2/CDNA3: 256 arch + 256 accumulation);
- scratch (private memory, where spills go) over a threshold per lane.

What it protects against: a kernel that asks at launch for more LDS than the workgroup has, which
a ROCm runtime has been seen to launch anyway, reading garbage and scoring a fake speedup (issue
36); kernels whose register or scratch use make them unfit for the target. What it does not: a
dynamic LDS size computed from run-time values (a launcher argument) is not known here, and
launch bounds or register counts that differ under the user's ROCm compiler version.
"""

from __future__ import annotations

import ast
import operator
import re

from pydantic import BaseModel, ConfigDict, Field

from hipevolve.core.evaluation import StaticFacts
from hipevolve.verifier.screen.platform_guards import amd_source

LDS_LIMIT = {"gfx90a": 64 << 10, "gfx942": 64 << 10, "gfx950": 160 << 10}
REGISTER_BUDGET = 512  # VGPRs + AGPRs per lane of one wave (CDNA2/CDNA3 unified register file)
SCRATCH_LIMIT = 4096  # bytes of private memory per lane: beyond this a kernel is spill-bound

_SIZEOF = {
    "char": 1,
    "int8_t": 1,
    "uint8_t": 1,
    "bool": 1,
    "short": 2,
    "int16_t": 2,
    "uint16_t": 2,
    "half": 2,
    "__half": 2,
    "_Float16": 2,
    "__hip_bfloat16": 2,
    "hip_bfloat16": 2,
    "__bf16": 2,
    "int": 4,
    "unsigned": 4,
    "int32_t": 4,
    "uint32_t": 4,
    "float": 4,
    "unsigned int": 4,
    "double": 8,
    "int64_t": 8,
    "uint64_t": 8,
    "long": 8,
    "size_t": 8,
    "float2": 8,
    "float4": 16,
    "int4": 16,
    "__half2": 4,
    "half2": 4,
}
_CONST = re.compile(
    r"(?:^\s*#\s*define\s+(?P<macro>[A-Za-z_]\w*)\s+(?P<mvalue>[^\n]+?)\s*$)"
    r"|(?:\b(?:static\s+)?(?:(?:constexpr|const)\s+)?(?:unsigned\s+|signed\s+)?(?:int|long|"
    r"size_t|int32_t|uint32_t|int64_t|unsigned)\s+(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>[^;{}]+);)",
    re.M,
)
_ASSIGNED = (
    r"(?:\b{0}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|\+\+\s*{0}\b|\b{0}\s*\+\+|--\s*{0}\b|\b{0}\s*--)"
)
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Div: operator.floordiv,
    ast.Mod: operator.mod,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}


class LaunchLds(BaseModel):
    """The dynamic LDS one launch asks for: bytes when computable, else the expression."""

    model_config = ConfigDict(frozen=True)

    kernel: str
    line: int
    expression: str
    bytes: int | None = Field(description="None: not computable from the source")


class GateVerdict(BaseModel):
    model_config = ConfigDict(frozen=True)

    reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = Field(default=(), description="what could not be checked here")

    @property
    def passed(self) -> bool:
        return not self.reasons


def _integer(expr: str, consts: dict[str, int]) -> int | None:
    text = re.sub(r"\b(?:static_cast|size_t|unsigned|int)\s*<[^>]*>", "", expr)
    text = re.sub(
        r"\bsizeof\s*\(\s*([A-Za-z_][\w ]*?)\s*\)",
        lambda m: str(_SIZEOF.get(m[1], f"__unknown_{m[1]}")),
        text,
    )
    text = re.sub(r"(\d+)(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)\b", r"\1", text)
    text = re.sub(r"\((?:size_t|int|unsigned|unsigned int|long)\)", "", text)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None
    return _eval(tree.body, consts, depth=0)


def _eval(node: ast.AST, consts: dict[str, int], depth: int) -> int | None:
    if depth > 50:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left, consts, depth + 1), _eval(node.right, consts, depth + 1)
        dividing = type(node.op) in (ast.Div, ast.FloorDiv, ast.Mod)
        if left is None or right is None or (dividing and right == 0):
            return None
        return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _eval(node.operand, consts, depth + 1)
        return None if value is None else -value
    return None


def constants(source: str) -> dict[str, int]:
    """Integer constants of the source: #defines, and integer variables (const or not) that are
    initialised once and never assigned again, with one value wherever they are declared."""
    raw = [(m["macro"] or m["name"], m["mvalue"] or m["value"]) for m in _CONST.finditer(source)]
    once = {
        n
        for n in {n for n, _ in raw}
        if len(re.findall(_ASSIGNED.format(re.escape(n)), source)) <= 1
        and len({v.strip() for m, v in raw if m == n}) == 1
    }
    raw = [(n, v) for n, v in raw if n in once]
    found: dict[str, int] = {}
    for _ in range(4):  # constants defined from constants
        for name, value in raw:
            if name not in found and (v := _integer(value.split("//")[0], found)) is not None:
                found[name] = v
    return found


def _split_args(text: str) -> list[str]:
    """Arguments split at top-level commas, up to the bracket that closes the list (as the
    preprocessor splits a macro's arguments: angle brackets do not nest)."""
    args, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                return [*args, text[start:i]]
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[start:i])
            start = i + 1
    return [*args, text[start:]]


_TRIPLE = re.compile(
    r"(?P<kernel>[A-Za-z_][\w:]*)\s*(?:<[^<>;]*(?:<[^<>;]*>[^<>;]*)*>)?\s*\)?\s*<<<(?P<config>.*?)>>>",
    re.S,
)
_GGL = re.compile(r"hipLaunchKernelGGL\s*\(")


def _kernel_id(text: str) -> str:
    text = text.strip().removeprefix("HIP_KERNEL_NAME").strip("() ")
    return re.split(r"[<(\s]", text.split("::")[-1], maxsplit=1)[0]


def dynamic_lds(source: str) -> list[LaunchLds]:
    """The dynamic LDS each launch an AMD compile keeps asks for (the third launch-configuration
    argument); launches in NVIDIA-only branches are not AMD's (platform_guards)."""
    source = amd_source(source)
    consts = constants(source)
    launches = []
    for m in _TRIPLE.finditer(source):
        config = _split_args(m["config"] + ")")
        if len(config) >= 3:
            launches.append((m["kernel"], m.start(), config[2]))
    for m in _GGL.finditer(source):
        args = _split_args(source[m.end() :])
        if len(args) >= 4:
            launches.append((args[0], m.start(), args[3]))
    out = []
    for kernel, pos, expr in launches:
        expr = " ".join(expr.split())
        out.append(
            LaunchLds(
                kernel=_kernel_id(kernel),
                line=source.count("\n", 0, pos) + 1,
                expression=expr,
                bytes=_integer(expr, consts),
            )
        )
    return out


def _fact_id(fact: StaticFacts) -> str:
    name = fact.kernel.split("(")[0]
    name = re.sub(r"<.*>", "", name)
    return name.split("::")[-1].strip()


def gate(source: str, facts: tuple[StaticFacts, ...] | list[StaticFacts]) -> GateVerdict:
    """Reasons the candidate cannot run as written on its AMD targets; empty when it can.
    Facts of a CUDA build (verifier/build/cuda_static.py) say nothing about AMD limits."""
    facts = [f for f in facts if f.platform == "amd"]
    reasons: list[str] = []
    notes: list[str] = []
    by_target: dict[str, list[StaticFacts]] = {}
    for f in facts:
        by_target.setdefault(f.target, []).append(f)
        registers = f.vgprs + f.agprs
        if registers > REGISTER_BUDGET:
            reasons.append(
                f"{f.kernel} on {f.target}: {f.vgprs} VGPRs + {f.agprs} AGPRs = "
                f"{registers}, over the {REGISTER_BUDGET}-register budget per wave"
            )
        if f.scratch_bytes > SCRATCH_LIMIT:
            reasons.append(
                f"{f.kernel} on {f.target}: {f.scratch_bytes} bytes of scratch per lane "
                f"(spills {f.spills}), over the {SCRATCH_LIMIT}-byte threshold"
            )
        limit = LDS_LIMIT.get(f.target)
        if limit is not None and f.lds_bytes > limit:
            reasons.append(
                f"{f.kernel} on {f.target}: {f.lds_bytes} bytes of static LDS per "
                f"workgroup, over the target's {limit}"
            )
    for launch in dynamic_lds(source):
        if launch.bytes is None:
            notes.append(
                f"dynamic LDS of {launch.kernel} (kernel.hip:{launch.line}: "
                f"{launch.expression}) is not computable statically: unchecked"
            )
            continue
        for target, kernels in by_target.items():
            limit = LDS_LIMIT.get(target)
            if limit is None:
                continue
            named = [f for f in kernels if _fact_id(f) == launch.kernel] or kernels
            static = max(f.lds_bytes for f in named)
            if static + launch.bytes > limit:
                reasons.append(
                    f"{launch.kernel} on {target}: launched at kernel.hip:{launch.line} with "
                    f"{launch.bytes} bytes of dynamic LDS ({launch.expression}) + {static} static "
                    f"= {static + launch.bytes}, over the target's {limit} per workgroup"
                )
    return GateVerdict(reasons=tuple(dict.fromkeys(reasons)), notes=tuple(dict.fromkeys(notes)))
