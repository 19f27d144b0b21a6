"""The lowering's emitter: V expressions (ir.py) as HIP C for one element (or one row) of the
output, with the device helpers and tunables every lowered kernel shares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hipevolve.agents.lowering.ir import (
    BINARY,
    SHORT,
    UNARY,
    Graph,
    Unsupported,
    V,
    access,
    numel,
    strip,
)

# The tunables every lowered pointwise and row kernel declares; each pattern adds its own.
BLOCK_VEC_TUNABLES = """// Threads per block.
// @tunable BLOCK: 64, 128, 256, 512, 1024
#define BLOCK 256
// Elements per load and store.
// @tunable VEC: 1, 2, 4, 8
#define VEC 4
"""

DEVICE_HELPERS = r"""
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float bf16_to_float(uint16_t v) {
    return __uint_as_float(static_cast<uint32_t>(v) << 16);
}
// Round to nearest even, as PyTorch's float -> bfloat16; NaN stays a NaN. On NVIDIA sm_80+,
// through the HIP layer's hip_bf16.h (included where bf16 is used), one cvt.rn.bf16.f32
// instruction; elsewhere (CDNA3 has no such instruction) about eight integer ones.
__device__ __forceinline__ uint16_t float_to_bf16(float f) {
#if defined(HIPEVOLVE_HIP_BF16_H) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    return __bfloat16_as_ushort(__float2bfloat16(f));
#else
    uint32_t bits = __float_as_uint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
#endif
}
__device__ __forceinline__ float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }
__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + __expf(-x)); }
__device__ __forceinline__ float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}
__device__ __forceinline__ float gelu_tanh(float x) {
    const float k = 0.79788456080286536f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}
__device__ __forceinline__ float hardswish_f(float x) {
    return x * fminf(fmaxf(x + 3.0f, 0.0f), 6.0f) / 6.0f;
}
__device__ __forceinline__ float mish_f(float x) {
    const float sp = x > 20.0f ? x : log1pf(__expf(x));
    return x * tanhf(sp);
}
__device__ __forceinline__ float sign_f(float x) { return (x > 0.0f) - (x < 0.0f); }
// a / b for 0 <= a, 0 < b: in 32 bits when the kernel found its sizes below 2^31 (`narrow`), since
// a 64-bit division costs several times the instructions of a 32-bit one on either vendor.
__device__ __forceinline__ int64_t index_div(int64_t a, int64_t b, bool narrow) {
    return narrow ? static_cast<int64_t>(static_cast<uint32_t>(a) / static_cast<uint32_t>(b)) : a / b;
}
"""

F16_HELPERS = r"""
__device__ __forceinline__ float f16_to_float(uint16_t v) {
    return __half2float(__ushort_as_half(v));
}
__device__ __forceinline__ uint16_t float_to_f16(float f) {
    return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ float round_f16(float f) { return f16_to_float(float_to_f16(f)); }
"""

_LOAD = {"float32": "{}", "bfloat16": "bf16_to_float({})", "float16": "f16_to_float({})"}
STORE = {"float32": "{}", "bfloat16": "float_to_bf16({})", "float16": "float_to_f16({})"}


@dataclass(frozen=True)
class Ctx:
    """Where an expression is evaluated: flat index, row, column, row length, and the shape
    these index (all C expressions)."""

    flat: str
    r: str
    c: str
    cols: str
    shape: tuple[int, ...]


class Emitter:
    """C statements for Vs at contexts, each computed once (memoised per value and context).

    `pointers` maps a placeholder to its kernel parameter; `packed(load, index)` gives the C
    expression of the element a loop already holds in a register for that load at that index
    (`pk_<param>.v[k]`), or None to read `param[index]`; `bound` holds values already in
    registers (the reductions of a row kernel); `ints` collects the runtime sizes each case must
    pass (slice starts and widths, suffix sizes), with this case's values. With `outer`, values
    at a context `invariant` accepts (the same for every element of the loop: per-row and scalar
    values) are computed by `outer`, whose lines the kernel places before the loop.
    """

    def __init__(
        self,
        graph: Graph,
        pointers: dict[str, str],
        packed=None,
        bound=None,
        outer: Emitter | None = None,
        invariant=None,
    ):
        self.graph = graph
        self.pointers = pointers
        self.packed = packed or (lambda load, index: None)
        self.bound: dict[V, str] = dict(bound or {})
        self.outer = outer
        self.invariant = invariant or (lambda ctx: False)
        self.memo: dict[tuple[V, Ctx], str] = {}
        self.lines: list[str] = []
        self.taken = 0
        self.ints: dict[str, int] = {}
        self.floats: list[str] = []
        self.slices: dict[tuple[V, int], int] = {}
        self.inners: dict[tuple[int, ...], int] = {}  # suffix shape -> its runtime sizes' number
        self.prefix = "v"

    def scope(
        self, prefix: str, packed=None, outer: Emitter | None = None, invariant=None
    ) -> Emitter:
        """A fresh block of statements (a loop body) sharing the runtime arguments found and the
        values bound (a row kernel binds each reduction once it is emitted)."""
        inner = Emitter(self.graph, self.pointers, packed, None, outer, invariant)
        inner.bound, inner.ints, inner.floats, inner.slices, inner.inners, inner.prefix = (
            self.bound,
            self.ints,
            self.floats,
            self.slices,
            self.inners,
            prefix,
        )
        return inner

    def take(self) -> list[str]:
        """The statements emitted since the last take (an outer scope is placed in parts)."""
        new, self.taken = self.lines[self.taken :], len(self.lines)
        return new

    def value(self, v: V, ctx: Ctx) -> str:
        if v in self.bound:
            return self.bound[v]
        if self.outer is not None and self.invariant(ctx):
            return self.outer.value(v, ctx)
        key = (v, ctx)
        if key not in self.memo:
            expr = self._expr(v, ctx)
            name = f"{self.prefix}{len(self.lines)}"
            self.lines.append(f"const float {name} = {expr};")
            self.memo[key] = name
        return self.memo[key]

    def moved(self, v: V, ctx: Ctx) -> Ctx:
        """The context at which v is evaluated when read at ctx (broadcasting)."""
        kind = access(v.shape, ctx.shape)
        if kind == "FULL":
            return Ctx(ctx.flat, ctx.r, ctx.c, ctx.cols, v.shape)
        if kind == "SCALAR":
            return Ctx("0", "0", "0", "1", v.shape)
        if kind == "COL":
            return Ctx(ctx.c, "0", ctx.c, ctx.cols, v.shape)
        if kind == "ROW":
            return Ctx(ctx.r, ctx.r, "0", "1", v.shape)
        # INNER: a suffix [..., C] of the shape, repeating every m rows: read at row r modulo m,
        # which holds where ctx.cols is the shape's last dimension (every context but a squeezed
        # row output's, whose cols is 1).
        if ctx.cols == "1" and ctx.shape[-1:] != (1,):
            raise Unsupported(f"a value of shape {v.shape} broadcast to {ctx.shape} per row")
        k = self.inners.setdefault(strip(v.shape), len(self.inners))
        rows = f"inner{k}_rows"
        self.ints[rows] = numel(v.shape) // v.shape[-1]
        at = f"(({ctx.r}) % {rows})"
        return Ctx(inner_index(ctx, rows), at, ctx.c, ctx.cols, v.shape)

    def _expr(self, v: V, ctx: Ctx) -> str:
        op = v.op
        if op == "const":
            x = v.args[0]
            if x != x or x in (float("inf"), float("-inf")):
                return "NAN" if x != x else ("INFINITY" if x > 0 else "-INFINITY")
            return f"{x!r}f" if "e" in repr(x) or "." in repr(x) else f"{x!r}.0f"
        if op == "farg":
            name = f"s_{v.args[0]}"
            if name not in self.floats:
                self.floats.append(name)
            return name
        if op == "cols":
            return "static_cast<float>(cols)"  # the kernel's row length, wherever it is read
        if op == "load":
            return self._load(v, ctx)
        if op == "squeeze":
            inner = v.args[0]
            return self.value(inner, Ctx(ctx.flat, ctx.flat, "0", "1", inner.shape))
        if op == "slice":
            src, start = v.args
            k = self.slices.setdefault((src, start), len(self.slices))
            self.ints[f"sl{k}_cols"] = src.shape[-1]
            self.ints[f"sl{k}_start"] = start
            at = Ctx(
                f"(({ctx.r}) * sl{k}_cols + ({ctx.c}) + sl{k}_start)",
                ctx.r,
                f"(({ctx.c}) + sl{k}_start)",
                f"sl{k}_cols",
                src.shape,
            )
            return self.value(src, at) if access(v.shape, ctx.shape) == "FULL" else _bad(v, ctx)
        if op == "reduce":
            raise Unsupported("a reduction inside a pointwise kernel")
        if op == "view":  # same data, same (row, column) at each flat index
            src = v.args[0]
            return self.value(src, Ctx(ctx.flat, ctx.r, ctx.c, ctx.cols, src.shape))
        if op == "mm":
            raise Unsupported("a matrix product inside an element-wise kernel")
        if op == "t":
            raise Unsupported("a transpose outside a matrix product's operand")
        operands = v.args[1:] if op in ("un", "bin", "round") else v.args
        args = [self.value(a, self.moved(a, ctx)) for a in operands]
        if op == "un":
            fn = v.args[0]
            return args[0] if fn == "copy" else UNARY[fn].format(*args)
        if op == "bin":
            return BINARY[v.args[0]].format(*args)
        if op == "where":
            return f"(({args[0]}) != 0.0f ? ({args[1]}) : ({args[2]}))"
        if op == "round":
            return f"round_{SHORT[v.args[0]]}({args[0]})"
        raise Unsupported(f"value kind {op}")

    def _load(self, v: V, ctx: Ctx) -> str:
        name = v.args[0]
        param = self.pointers[name]
        kind = access(v.shape, ctx.shape)
        if kind == "INNER":  # the same read as any value of that shape
            return self._load(v, self.moved(v, ctx))
        index = {"FULL": ctx.flat, "SCALAR": "0", "COL": ctx.c, "ROW": ctx.r}[kind]
        held = self.packed(v, index)
        return _LOAD[v.dtype].format(held if held is not None else f"{param}[{index}]")


def inner_index(ctx: Ctx, rows: str) -> str:
    """The flat index of a suffix-shaped value (INNER) of `rows` rows read at ctx."""
    return f"((({ctx.r}) % {rows}) * {ctx.cols} + ({ctx.c}))"


_INNER = re.compile(r"\(\(\((.+)\) % (inner\d+_rows)\) \* (.+) \+ \((.+)\)\)")


def inner_rows(index: str, ctx: Ctx) -> str | None:
    """The row count of the suffix `index` reads, when it is inner_index(ctx, rows), else None."""
    found = _INNER.fullmatch(index)
    rows = found.group(2) if found else None
    return rows if rows is not None and index == inner_index(ctx, rows) else None


def per_row(r: str):
    """The contexts whose values are the same at every element of row `r`: the row's own
    ([..., 1] broadcasts, reductions) and scalars; what an element loop can hoist."""
    return lambda ctx: ctx.c == "0" and ctx.flat in ("0", r)


def _bad(v: V, ctx: Ctx) -> str:
    raise Unsupported(f"a slice of shape {v.shape} broadcast to {ctx.shape}")
