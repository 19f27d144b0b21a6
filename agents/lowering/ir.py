"""The lowering's intermediate form: an fx aten graph as a DAG of scalar expressions (V); emit.py
turns it into HIP C for one element (or one row) of the output.

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

UNARY = {
    "exp": "__expf({})",
    "log": "__logf({})",
    "sqrt": "sqrtf({})",
    "rsqrt": "rsqrtf({})",
    "tanh": "tanhf({})",
    "sigmoid": "(1.0f / (1.0f + __expf(-({}))))",
    "neg": "(-({}))",
    "relu": "fmaxf({}, 0.0f)",
    "abs": "fabsf({})",
    "erf": "erff({})",
    "log1p": "log1pf({})",
    "expm1": "expm1f({})",
    "reciprocal": "(1.0f / ({}))",
    "sin": "sinf({})",
    "cos": "cosf({})",
    "silu": "silu_f({})",
    "exp2": "exp2f({})",
    "floor": "floorf({})",
    "ceil": "ceilf({})",
    "hardsigmoid": "fminf(fmaxf(({}) / 6.0f + 0.5f, 0.0f), 1.0f)",
    "gelu_tanh": "gelu_tanh({})",
    "gelu_erf": "gelu_erf({})",
    "hardswish": "hardswish_f({})",
    "mish": "mish_f({})",
    "sign": "sign_f({})",
}
BINARY = {
    "add": "({} + {})",
    "sub": "({} - {})",
    "mul": "({} * {})",
    "div": "({} / {})",
    "maximum": "fmaxf({}, {})",
    "minimum": "fminf({}, {})",
    "pow": "powf({}, {})",
    "gt": "(({}) > ({}) ? 1.0f : 0.0f)",
    "lt": "(({}) < ({}) ? 1.0f : 0.0f)",
    "ge": "(({}) >= ({}) ? 1.0f : 0.0f)",
    "le": "(({}) <= ({}) ? 1.0f : 0.0f)",
    "eq": "(({}) == ({}) ? 1.0f : 0.0f)",
    "ne": "(({}) != ({}) ? 1.0f : 0.0f)",
}
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
        if not isinstance(val, torch.Tensor) or (name not in UNARY and name not in BINARY):
            raise Unsupported(f"op {overload}")
        shape = tuple(val.shape)
        if name in UNARY and len(node.args) == 1:
            return _rounded(V("un", (name, self.arg(node.args[0])), shape, _dtype(node)))
        if name in BINARY:
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
        return V(
            "bin", ("mul", e, V("un", ("reciprocal", s), s.shape, "float32")), e.shape, "float32"
        )

    def op__log_softmax(self, node) -> V:
        shifted, _, s = self._softmax_parts(node)
        return V(
            "bin",
            ("sub", shifted, V("un", ("log", s), s.shape, "float32")),
            shifted.shape,
            "float32",
        )

    def op_native_layer_norm(self, node) -> tuple:
        x = self.arg(node.args[0])
        if len(node.args[1]) != 1 or x.dtype != "float32":
            raise Unsupported("layer_norm over more than the last dimension, or not in fp32")
        w, b = (self.arg(a) if a is not None else None for a in node.args[2:4])
        eps = self.scalar(node.args[4])
        mean = V("bin", ("div", self.reduce("sum", x, True), COLS), x.shape[:-1] + (1,), "float32")
        d = V("bin", ("sub", x, mean), x.shape, "float32")
        var = V(
            "bin",
            ("div", self.reduce("sum", V("bin", ("mul", d, d), x.shape, "float32"), True), COLS),
            mean.shape,
            "float32",
        )
        rstd = V(
            "un", ("rsqrt", V("bin", ("add", var, eps), var.shape, "float32")), var.shape, "float32"
        )
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
            raise Unsupported(
                f"{_name(node)} from {src.shape} to {shape} (the last dimension must stay)"
            )
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
