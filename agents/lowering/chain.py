"""Splitting a traced graph into the kernels that compute it (KernelBench Level 2 chains).

One kernel computes one of: a pointwise graph (pointwise.py), last-dimension reductions with
their prologue and epilogue (rowreduce.py), or one matrix product with a pointwise epilogue
(gemm.py). A graph that is none of these is cut where no kernel can fuse across:
- an operand of a matrix product that is computed (not a tensor in memory) is materialised first,
  in its own kernel (a pointwise prologue fuses into that kernel, so relu -> layernorm -> GEMM
  is two kernels);
- a product whose result feeds a reduction, another product, or values of another shape is
  materialised together with its largest pointwise epilogue that every use passes through
  (GEMM + bias -> softmax: the GEMM kernel adds the bias, the softmax kernel reads its output).
Intermediate values live in buffers that model.py allocates; the segments run in order. A graph
without a matrix product is one segment, exactly as before.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hipevolve.agents.lowering.fx_trace import Placeholder
from hipevolve.agents.lowering.ir import FLOAT_DTYPES, Graph, Unsupported, V, _walk, numel

TORCH_DTYPES = {name: dtype for dtype, name in FLOAT_DTYPES.items()}


@dataclass
class Segment:
    pattern: str  # "lower_gemm", "lower_rowreduce" or "lower_pointwise"
    graph: Graph  # outputs: what this kernel writes; buffers are placeholders of role "buffer"
    dests: list[str]  # per output: the model's variable ("out0", "buf1")


@dataclass
class Plan:
    segments: list[Segment]
    buffers: list[str]  # intermediate tensors, in the order they are allocated
    returns: list[str]  # per model output: its variable ("out0" or a buffer returned as is)


def pattern_of(outputs: list[V]) -> str:
    nodes = [x for o in outputs for x in _walk(o)]
    if any(x.op == "mm" for x in nodes):
        return "lower_gemm"
    return "lower_rowreduce" if any(x.op == "reduce" for x in nodes) else "lower_pointwise"


def plan(graph: Graph) -> Plan:
    """The kernels, in launch order, that compute the graph's outputs."""
    names = [f"out{j}" for j in range(len(graph.outputs))]
    if not any(x.op == "mm" for o in graph.outputs for x in _walk(o)):
        return Plan([Segment(pattern_of(graph.outputs), graph, names)], [], names)
    planner = _Planner(graph)
    outs = planner.kernelable(list(graph.outputs))
    returns: list[str] = []
    final: list[V] = []
    for o in outs:
        if o.op == "load" and o.args[0] in planner.buffers:
            if o.args[0] in returns:
                raise Unsupported("one intermediate returned as two outputs")
            returns.append(o.args[0])  # the buffer is the output: no copy
        else:
            returns.append(f"out{len(final)}")
            final.append(o)
    if final:
        planner.segments.append(planner.segment(final, [r for r in returns if r.startswith("out")]))
    return Plan(planner.segments, planner.buffers, returns)


class _Planner:
    def __init__(self, graph: Graph) -> None:
        self.placeholders = dict(graph.case.placeholders)  # grows by one entry per buffer
        self.case = dataclasses.replace(graph.case, placeholders=self.placeholders)
        self.segments: list[Segment] = []
        self.buffers: list[str] = []

    def segment(self, outputs: list[V], dests: list[str]) -> Segment:
        used = sorted({x.args[0] for o in outputs for x in _walk(o) if x.op == "load"})
        graph = Graph(outputs=outputs, case=self.case, used=used)
        return Segment(pattern_of(outputs), graph, dests)

    def materialise(self, v: V) -> V:
        """A load of a buffer that a new segment (or several) fills with v."""
        [v] = self.kernelable([v])
        if v.op == "load":
            return v
        if v.dtype not in TORCH_DTYPES:
            raise Unsupported(f"an intermediate of dtype {v.dtype}")
        name = f"buf{len(self.buffers)}"
        self.placeholders[name] = Placeholder("buffer", name, v.shape, TORCH_DTYPES[v.dtype])
        self.buffers.append(name)
        self.segments.append(self.segment([v], [name]))
        return V("load", (name,), v.shape, v.dtype)

    def kernelable(self, outs: list[V]) -> list[V]:
        """outs rewritten (parts materialised) so that one kernel computes them."""
        while True:  # every product reads its operands from memory
            computed = next(
                (u for m in _products(outs) for u in _operand_bases(m) if u.op != "load"), None
            )
            if computed is None:
                break
            outs = _substitute(outs, {id(computed): self.materialise(computed)})
        while True:  # at most one product, and only with a pointwise epilogue
            products = _products(outs)
            if not products:
                return outs
            m = products[0]
            if len(products) == 1 and all(_epilogue(m, o) for o in outs):
                return outs
            root = _epilogue_root(m, outs)
            outs = _substitute(outs, {id(root): self.materialise(root)})


def _products(outs: list[V]) -> list[V]:
    """The matrix products, operands before their users (post-order), each once."""
    seen: set[int] = set()
    found: list[V] = []

    def visit(v: V) -> None:
        if id(v) in seen:
            return
        seen.add(id(v))
        for a in v.args:
            if isinstance(a, V):
                visit(a)
        if v.op == "mm":
            found.append(v)

    for o in outs:
        visit(o)
    return found


def _operand_bases(m: V) -> list[V]:
    """The values under a product's operands' views and transposes."""
    bases = []
    for operand in m.args:
        while operand.op in ("view", "t"):
            operand = operand.args[0]
        bases.append(operand)
    return bases


def _substitute(outs: list[V], mapping: dict[int, V]) -> list[V]:
    """outs with the nodes named (by identity) in mapping replaced; sharing is kept."""
    memo: dict[int, V] = {}

    def go(v: V) -> V:
        if id(v) in mapping:
            return mapping[id(v)]
        if id(v) not in memo:
            args = tuple(go(a) if isinstance(a, V) else a for a in v.args)
            same = all(x is y for x, y in zip(args, v.args, strict=True))
            memo[id(v)] = v if same else V(v.op, args, v.shape, v.dtype)
        return memo[id(v)]

    return [go(o) for o in outs]


def _contains(v: V, m: V) -> bool:
    return any(x is m for x in _walk(v))


def _epilogue(m: V, o: V) -> bool:
    """o is computed element by element from m's result (no reduction, no other product, every
    value on the way has m's rows and columns), so a GEMM kernel can write it."""
    if numel(o.shape) != numel(m.shape) or o.shape[-1:] != m.shape[-1:]:
        return False
    for x in _walk(o):
        if x.op == "reduce" or (x.op == "mm" and x is not m):
            return False
        if _contains(x, m) and (numel(x.shape) != numel(m.shape) or x.shape[-1:] != m.shape[-1:]):
            return False
    return True


def _epilogue_root(m: V, outs: list[V]) -> V:
    """The largest value that is m plus a pointwise epilogue and through which every use of m
    passes (m itself at least)."""
    marker = V("load", ("<cut>",), (), "float32")
    best, size = m, 1
    seen: set[int] = set()
    for o in outs:
        for x in _walk(o):
            if id(x) in seen or not _contains(x, m) or not _epilogue(m, x):
                continue
            seen.add(id(x))
            n = sum(1 for _ in _walk(x))
            if n > size and not any(_contains(y, m) for y in _substitute(outs, {id(x): marker})):
                best, size = x, n
    return best


__all__ = ["Plan", "Segment", "TORCH_DTYPES", "pattern_of", "plan"]
