"""The lowering's intermediate form: an fx aten graph as a DAG of scalar expressions (V), and the
emitter that turns it into HIP C for one element (or one row) of the output.

Every value is carried as fp32 in registers; a value whose traced dtype is bfloat16 or float16 is
rounded to that dtype after the op that makes it, as PyTorch rounds each op's result, so a chain
that computes in bf16 keeps PyTorch's rounding. Broadcasting is resolved lazily where a value is
used: an input of shape S read at an output position of shape T is FULL (same shape), COL (one per
column, [C]), ROW (one per row, [..., 1]), SCALAR or INNER (a suffix of T, index modulo its size).
Composite ops (softmax, log_softmax, layer_norm, mean) are expanded into reductions over the last
dimension and pointwise ops here; rowreduce.py emits the reductions.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field

import torch

from hipevolve.agents.lowering.fx_trace import TracedCase

FLOAT_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
C_TYPES = {"float32": "float", "bfloat16": "uint16_t", "float16": "uint16_t"}
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


class Unsupported(Exception):
    """The graph uses something the lowering cannot emit; the message names it (one line)."""


@dataclass(frozen=True)
class V:
    op: str  # load const farg un bin where round reduce slice
    args: tuple
    shape: tuple[int, ...]
    dtype: str  # float32 bfloat16 float16 bool


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def strip(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape without leading 1s (broadcasting aligns from the right)."""
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return tuple(shape[i:])


def access(s: tuple[int, ...], t: tuple[int, ...]) -> str:
    """How a value of shape s is read at a position of shape t."""
    s, t = strip(s), strip(t)
    if s == t:
        return "FULL"
    if numel(s) == 1:
        return "SCALAR"
    if len(t) >= 1 and s == (t[-1],):
        return "COL"
    if len(t) >= 2 and s == t[:-1] + (1,):
        return "ROW"
    if len(s) <= len(t) and s == t[len(t) - len(s) :]:
        return "INNER"
    raise Unsupported(f"broadcast of shape {s} to {t} (only full, per-row, per-column, suffix)")


# ------------------------------------------------------------------------------ fx -> V

_UNARY = {
    "exp": "__expf({})", "log": "__logf({})", "sqrt": "sqrtf({})", "rsqrt": "rsqrtf({})",
    "tanh": "tanhf({})", "sigmoid": "(1.0f / (1.0f + __expf(-({}))))", "neg": "(-({}))",
    "relu": "fmaxf({}, 0.0f)", "abs": "fabsf({})", "erf": "erff({})", "log1p": "log1pf({})",
    "expm1": "expm1f({})", "reciprocal": "(1.0f / ({}))", "sin": "sinf({})", "cos": "cosf({})",
    "silu": "silu_f({})", "exp2": "exp2f({})", "floor": "floorf({})", "ceil": "ceilf({})",
    "hardsigmoid": "fminf(fmaxf(({}) / 6.0f + 0.5f, 0.0f), 1.0f)",
    "gelu_tanh": "gelu_tanh({})", "gelu_erf": "gelu_erf({})", "hardswish": "hardswish_f({})", "mish": "mish_f({})", "sign": "sign_f({})",
}  # fmt: skip
_BINARY = {
    "add": "({} + {})", "sub": "({} - {})", "mul": "({} * {})", "div": "({} / {})",
    "maximum": "fmaxf({}, {})", "minimum": "fminf({}, {})", "pow": "powf({}, {})",
    "gt": "(({}) > ({}) ? 1.0f : 0.0f)", "lt": "(({}) < ({}) ? 1.0f : 0.0f)",
    "ge": "(({}) >= ({}) ? 1.0f : 0.0f)", "le": "(({}) <= ({}) ? 1.0f : 0.0f)",
    "eq": "(({}) == ({}) ? 1.0f : 0.0f)", "ne": "(({}) != ({}) ? 1.0f : 0.0f)",
}  # fmt: skip
# The reduced dimension's length, as a float, at run time (mean divides by it).
COLS = V("cols", (), (), "float32")


@dataclass
class Graph:
    """A traced case as Vs: the outputs, and how each placeholder is read."""

    outputs: list[V]
    case: TracedCase
    used: list[str] = field(default_factory=list)  # placeholder names that are read


def _dtype(node) -> str:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"{_name(node)} does not produce one tensor")
    if val.dtype == torch.bool:
        return "bool"
    if val.dtype not in FLOAT_DTYPES:
        raise Unsupported(f"{_name(node)} produces {val.dtype} (float32/bf16/fp16/bool only)")
    return FLOAT_DTYPES[val.dtype]


def _name(node) -> str:
    target = node.target
    return getattr(target, "__name__", None) or str(target)


def _rounded(v: V) -> V:
    return V("round", (v.dtype, v), v.shape, v.dtype) if v.dtype in ("bfloat16", "float16") else v


def _rank_dim(dim, rank: int) -> int:
    return dim + rank if dim < 0 else dim


class _Builder:
    def __init__(self, case: TracedCase) -> None:
        self.case = case
        self.env: dict[str, object] = {}

    def scalar(self, value) -> V:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise Unsupported(f"scalar argument {value!r}")
        # A float equal to one of the Model's float attributes (eps) is passed at run time, so
        # cases that differ only in it share a kernel.
        for attr, x in self.case.scalars.items():
            if isinstance(value, float) and value == x:
                return V("farg", (attr,), (), "float32")
        return V("const", (float(value),), (), "float32")

    def arg(self, a) -> V:
        if isinstance(a, torch.fx.Node):
            got = self.env[a.name]
            if not isinstance(got, V):
                raise Unsupported(f"{a.name} is not a tensor value")
            return got
        return self.scalar(a)

    def build(self) -> Graph:
        outputs: list[V] = []
        for node in self.case.graph.nodes:
            if node.op == "placeholder":
                ph = self.case.placeholders[node.name]
                if ph.dtype not in FLOAT_DTYPES:
                    self.env[node.name] = node  # usable only by ops that take indices
                    continue
                self.env[node.name] = V("load", (node.name,), ph.shape, FLOAT_DTYPES[ph.dtype])
            elif node.op == "call_function":
                self.env[node.name] = self.call(node)
            elif node.op == "output":
                outs = node.args[0]
                outs = outs if isinstance(outs, (list, tuple)) else [outs]
                outputs = [self.arg(o) for o in outs]
            else:
                raise Unsupported(f"fx node kind {node.op} ({node.name})")
        used = sorted({v.args[0] for o in outputs for v in _walk(o) if v.op == "load"})
        return Graph(outputs=outputs, case=self.case, used=used)

    def call(self, node) -> object:
        if node.target is operator.getitem:
            parts = self.env[node.args[0].name]
            if not isinstance(parts, tuple):
                raise Unsupported(f"getitem of {node.args[0].name}")
            return parts[node.args[1]]
        name = node.target.__name__.split(".")[0] if hasattr(node.target, "__name__") else ""
        overload = _name(node)
        method = getattr(self, "op_" + name, None)
        if method is not None:
            return method(node)
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or (name not in _UNARY and name not in _BINARY):
            raise Unsupported(f"op {overload}")
        shape = tuple(val.shape)
        if name in _UNARY and len(node.args) == 1:
            return _rounded(V("un", (name, self.arg(node.args[0])), shape, _dtype(node)))
        if name in _BINARY:
            a, b = (self.arg(x) for x in node.args[:2])
            if "alpha" in node.kwargs and name in ("add", "sub"):
                b = V("bin", ("mul", b, self.scalar(node.kwargs["alpha"])), b.shape, b.dtype)
            return _rounded(V("bin", (name, a, b), shape, _dtype(node)))
        raise Unsupported(f"op {overload}")

    # -- ops with arguments beyond their tensors

    def op__to_copy(self, node) -> V:
        src = self.arg(node.args[0])
        out = _dtype(node)
        return _rounded(V("un", ("copy", src), src.shape, out)) if out != src.dtype else src

    op_clone = op_alias = op_lift_fresh_copy = op_detach = op__to_copy

    def op_gelu(self, node) -> V:
        x = self.arg(node.args[0])
        fn = "gelu_tanh" if node.kwargs.get("approximate", "none") == "tanh" else "gelu_erf"
        return _rounded(V("un", (fn, x), x.shape, _dtype(node)))

    def op_pow(self, node) -> V:
        x, e = node.args
        if not isinstance(e, torch.fx.Node) and e == 2:
            x = self.arg(x)
            return _rounded(V("bin", ("mul", x, x), x.shape, _dtype(node)))
        a, b = self.arg(x), self.arg(e)
        return _rounded(V("bin", ("pow", a, b), tuple(node.meta["val"].shape), _dtype(node)))

    def op_where(self, node) -> V:
        c, a, b = (self.arg(x) for x in node.args)
        return _rounded(V("where", (c, a, b), tuple(node.meta["val"].shape), _dtype(node)))

    def op_clamp(self, node) -> V:
        x = self.arg(node.args[0])
        lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
        hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
        if lo is not None:
            x = V("bin", ("maximum", x, self.scalar(lo)), x.shape, x.dtype)
        if hi is not None:
            x = V("bin", ("minimum", x, self.scalar(hi)), x.shape, x.dtype)
        return _rounded(V(x.op, x.args, x.shape, _dtype(node)))

    def op_clamp_min(self, node) -> V:
        x = self.arg(node.args[0])
        return _rounded(V("bin", ("maximum", x, self.scalar(node.args[1])), x.shape, _dtype(node)))

    def op_clamp_max(self, node) -> V:
        x = self.arg(node.args[0])
        return _rounded(V("bin", ("minimum", x, self.scalar(node.args[1])), x.shape, _dtype(node)))

    def op_hardtanh(self, node) -> V:
        x = self.arg(node.args[0])
        lo, hi = (list(node.args[1:]) + [-1.0, 1.0][len(node.args) - 1 :])[:2]
        x = V("bin", ("maximum", x, self.scalar(float(lo))), x.shape, x.dtype)
        return _rounded(V("bin", ("minimum", x, self.scalar(float(hi))), x.shape, _dtype(node)))

    def op_leaky_relu(self, node) -> V:
        x = self.arg(node.args[0])
        slope = self.scalar(node.args[1] if len(node.args) > 1 else 0.01)
        neg = V("bin", ("mul", x, slope), x.shape, x.dtype)
        pos = V("bin", ("gt", x, V("const", (0.0,), (), "float32")), x.shape, "bool")
        return _rounded(V("where", (pos, x, neg), x.shape, _dtype(node)))

    def op_slice(self, node) -> V:
        src = self.arg(node.args[0])
        dim, start, end = (list(node.args[1:]) + [0, None, None])[:3]
        step = node.args[4] if len(node.args) > 4 else 1
        if _rank_dim(dim, len(src.shape)) != len(src.shape) - 1 or step != 1:
            raise Unsupported("slice other than a unit-step slice of the last dimension")
        size = src.shape[-1]
        start = max(0, min(start or 0, size))
        end = size if end is None else max(start, min(end, size))
        shape = src.shape[:-1] + (end - start,)
        return V("slice", (src, start), shape, src.dtype)

    def _last_dim(self, node, dims) -> None:
        rank = len(node.args[0].meta["val"].shape)
        dims = [dims] if isinstance(dims, int) else list(dims or [])
        if [_rank_dim(d, rank) for d in dims] != [rank - 1]:
            raise Unsupported(f"{_name(node)} over dims {dims} (the last dimension only)")

    def reduce(self, kind: str, x: V, keep: bool) -> V:
        shape = x.shape[:-1] + (1,)
        r = V("reduce", (kind, x), shape, "float32")
        return r if keep else V("squeeze", (r,), x.shape[:-1], "float32")

    def op_sum(self, node) -> V:
        self._last_dim(node, node.args[1] if len(node.args) > 1 else None)
        keep = bool(node.args[2]) if len(node.args) > 2 else bool(node.kwargs.get("keepdim"))
        x = self.arg(node.args[0])
        return _rounded(_retype(self.reduce("sum", x, keep), _dtype(node)))

    def op_mean(self, node) -> V:
        self._last_dim(node, node.args[1] if len(node.args) > 1 else None)
        keep = bool(node.args[2]) if len(node.args) > 2 else bool(node.kwargs.get("keepdim"))
        x = self.arg(node.args[0])
        total = self.reduce("sum", x, keep)
        return _rounded(V("bin", ("div", total, COLS), total.shape, _dtype(node)))

    def op_amax(self, node) -> V:
        self._last_dim(node, node.args[1])
        keep = bool(node.args[2]) if len(node.args) > 2 else False
        return _retype(self.reduce("max", self.arg(node.args[0]), keep), _dtype(node))

    def op_amin(self, node) -> V:
        self._last_dim(node, node.args[1])
        keep = bool(node.args[2]) if len(node.args) > 2 else False
        return _retype(self.reduce("min", self.arg(node.args[0]), keep), _dtype(node))

    def _softmax_parts(self, node) -> tuple[V, V, V]:
        self._last_dim(node, node.args[1])
        x = self.arg(node.args[0])
        if x.dtype != "float32" or node.args[2]:
            raise Unsupported(f"{_name(node)} in {x.dtype} (fp32 softmax only)")
        m = self.reduce("max", x, True)
        shifted = V("bin", ("sub", x, m), x.shape, "float32")
        e = V("un", ("exp", shifted), x.shape, "float32")
        return shifted, e, self.reduce("sum", e, True)

    def op__softmax(self, node) -> V:
        _, e, s = self._softmax_parts(node)
        return V("bin", ("mul", e, V("un", ("reciprocal", s), s.shape, "float32")), e.shape,
                 "float32")  # fmt: skip

    def op__log_softmax(self, node) -> V:
        shifted, _, s = self._softmax_parts(node)
        return V("bin", ("sub", shifted, V("un", ("log", s), s.shape, "float32")), shifted.shape,
                 "float32")  # fmt: skip

    def op_native_layer_norm(self, node) -> tuple:
        x = self.arg(node.args[0])
        if len(node.args[1]) != 1 or x.dtype != "float32":
            raise Unsupported("layer_norm over more than the last dimension, or not in fp32")
        w, b = (self.arg(a) if a is not None else None for a in node.args[2:4])
        eps = self.scalar(node.args[4])
        mean = V("bin", ("div", self.reduce("sum", x, True), COLS), x.shape[:-1] + (1,), "float32")
        d = V("bin", ("sub", x, mean), x.shape, "float32")
        var = V("bin", ("div", self.reduce("sum", V("bin", ("mul", d, d), x.shape, "float32"),
                                           True), COLS), mean.shape, "float32")  # fmt: skip
        rstd = V("un", ("rsqrt", V("bin", ("add", var, eps), var.shape, "float32")), var.shape,
                 "float32")  # fmt: skip
        y = V("bin", ("mul", d, rstd), x.shape, "float32")
        if w is not None:
            y = V("bin", ("mul", y, w), x.shape, "float32")
        if b is not None:
            y = V("bin", ("add", y, b), x.shape, "float32")
        return (y, mean, rstd)

    # -- views and matrix products (gemm.py emits the products; chain.py splits around them)

    def op_view(self, node) -> V:
        """A reshape that keeps the last dimension is the same contiguous data, read with the
        same (row, column) at every flat index: lowered as a relabelled shape."""
        src = self.arg(node.args[0])
        shape = tuple(node.meta["val"].shape)
        if numel(shape) != numel(src.shape) or shape[-1:] != src.shape[-1:]:
            raise Unsupported(f"{_name(node)} from {src.shape} to {shape} (the last dimension "
                              "must stay)")  # fmt: skip
        return src if shape == src.shape else V("view", (src,), shape, src.dtype)

    op__unsafe_view = op_reshape = op_view

    def op_t(self, node) -> V:
        src = self.arg(node.args[0])
        if len(src.shape) != 2:
            raise Unsupported(f"{_name(node)} of a rank-{len(src.shape)} tensor")
        return V("t", (src,), (src.shape[1], src.shape[0]), src.dtype)

    def op_transpose(self, node) -> V:
        src = self.arg(node.args[0])
        dims = sorted(_rank_dim(d, len(src.shape)) for d in node.args[1:3])
        if len(src.shape) != 2 or dims != [0, 1]:
            raise Unsupported(f"{_name(node)} other than the transpose of a matrix")
        return V("t", (src,), (src.shape[1], src.shape[0]), src.dtype)

    def _product(self, node, a, b) -> V:
        a, b = self.arg(a), self.arg(b)
        if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
            raise Unsupported(f"{_name(node)} of shapes {a.shape} and {b.shape}")
        # fp32 accumulation; the product is rounded (to a 16-bit dtype) only where PyTorch
        # rounds it: after mm, or after addmm's bias add.
        return V("mm", (a, b), (a.shape[0], b.shape[1]), "float32")

    def op_mm(self, node) -> V:
        y, out = self._product(node, *node.args[:2]), _dtype(node)
        return V("round", (out, y), y.shape, out) if out != "float32" else y

    def op_addmm(self, node) -> V:
        bias, a, b = node.args[:3]
        beta = node.kwargs.get("beta", 1)
        alpha = node.kwargs.get("alpha", 1)
        y = self._product(node, a, b)
        if alpha != 1:
            y = V("bin", ("mul", y, self.scalar(alpha)), y.shape, "float32")
        c = self.arg(bias)
        if beta != 1:
            c = V("bin", ("mul", c, self.scalar(beta)), c.shape, "float32")
        return _rounded(V("bin", ("add", y, c), y.shape, _dtype(node)))


def _retype(v: V, dtype: str) -> V:
    return V(v.op, v.args, v.shape, dtype)


def _walk(v: V):
    seen: set[int] = set()
    stack = [v]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        stack.extend(a for a in x.args if isinstance(a, V))


def expression_graph(case: TracedCase) -> Graph:
    """The case's graph as Vs; Unsupported names the first op or pattern that cannot be emitted."""
    return _Builder(case).build()


def reductions(v: V) -> list[V]:
    return [x for x in _walk(v) if x.op == "reduce"]


# ------------------------------------------------------------------------------ V -> HIP C

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

    def __init__(self, graph: Graph, pointers: dict[str, str], packed=None, bound=None,
                 outer: Emitter | None = None, invariant=None):  # fmt: skip
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

    def scope(self, prefix: str, packed=None, outer: Emitter | None = None,
              invariant=None) -> Emitter:  # fmt: skip
        """A fresh block of statements (a loop body) sharing the runtime arguments found and the
        values bound (a row kernel binds each reduction once it is emitted)."""
        inner = Emitter(self.graph, self.pointers, packed, None, outer, invariant)
        inner.bound, inner.ints, inner.floats, inner.slices, inner.inners, inner.prefix = (
            self.bound, self.ints, self.floats, self.slices, self.inners, prefix)  # fmt: skip
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
            at = Ctx(f"(({ctx.r}) * sl{k}_cols + ({ctx.c}) + sl{k}_start)", ctx.r,
                     f"(({ctx.c}) + sl{k}_start)", f"sl{k}_cols", src.shape)  # fmt: skip
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
            return args[0] if fn == "copy" else _UNARY[fn].format(*args)
        if op == "bin":
            return _BINARY[v.args[0]].format(*args)
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
