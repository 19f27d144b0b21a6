"""Last-dimension reductions with pointwise prologue and epilogue (softmax, log-softmax,
LayerNorm, RMSNorm, sum, mean, max, min) -> one HIP kernel per dtype variant.

Layout: ROWS rows per block, a group of GROUP = BLOCK / ROWS threads per row. Reductions are
grouped by depth (a reduction whose input needs another's result comes one pass later); each
pass re-reads the row (largely from L2) and merges its partials across the group (warp shuffles,
then LDS across the group's warps; warpSize is read, never assumed). A last pass writes the
outputs of full row shape; per-row outputs are written by the group's first thread. Full-shape,
per-column ([C]) and suffix-shaped inputs move VEC elements per load when every pointer is on a
32-byte boundary and the row length is a multiple of VEC; otherwise the scalar loop covers the
row. Per-row values (a reduction's mean, a [..., 1] input, rstd) and scalars are computed once
per row, before the loops that read them.
"""

from __future__ import annotations

import re

from hipevolve.agents.lowering.emit import (
    BLOCK_VEC_TUNABLES,
    STORE,
    Ctx,
    Emitter,
    inner_rows,
    per_row,
)
from hipevolve.agents.lowering.ir import (
    C_TYPES,
    FLOAT_DTYPES,
    Graph,
    Unsupported,
    V,
    reductions,
    strip,
)

TUNABLES = (
    BLOCK_VEC_TUNABLES
    + """// Rows per block (short rows leave big blocks idle; long rows want whole blocks).
// @tunable ROWS: 1, 2, 4
#define ROWS 1

constexpr int GROUP = BLOCK / ROWS;    // threads per row
constexpr int MAX_WARPS = BLOCK / 32;  // warps per block at the narrowest warp (32 lanes)
static_assert(BLOCK % ROWS == 0 && (GROUP & (GROUP - 1)) == 0, "GROUP must be a power of two");
"""
)

HELPERS = r"""
struct SumOp {
    static __device__ __forceinline__ float init() { return 0.0f; }
    static __device__ __forceinline__ float apply(float a, float b) { return a + b; }
};
struct MaxOp {
    static __device__ __forceinline__ float init() { return -INFINITY; }
    static __device__ __forceinline__ float apply(float a, float b) { return fmaxf(a, b); }
};
struct MinOp {
    static __device__ __forceinline__ float init() { return INFINITY; }
    static __device__ __forceinline__ float apply(float a, float b) { return fminf(a, b); }
};

// The group's reduction of v, in every thread of the group. Every thread of the block calls it
// (it holds barriers); the shuffle butterfly leaves the same bits in every lane.
template <typename Op>
__device__ __forceinline__ float group_reduce(float v, float* lds) {
    const int width = GROUP < warpSize ? GROUP : warpSize;
    for (int offset = width >> 1; offset > 0; offset >>= 1) {
        v = Op::apply(v, __shfl_xor(v, offset, width));
    }
    if (GROUP > warpSize) {  // the same for the whole block: the barriers are reached by all
        const int warps = GROUP / warpSize;
        const int first = threadIdx.x / GROUP * warps;
        __syncthreads();  // the previous reduction's readers are done with lds
        if (threadIdx.x % warpSize == 0) lds[threadIdx.x / warpSize] = v;
        __syncthreads();
        v = lds[first];
        for (int w = 1; w < warps; ++w) v = Op::apply(v, lds[first + w]);
    }
    return v;
}
"""

_OPS = {"sum": "SumOp", "max": "MaxOp", "min": "MinOp"}


def _depths(graph: Graph) -> dict[V, int]:
    depth: dict[V, int] = {}

    def of(r: V) -> int:
        if r not in depth:
            inner = [x for x in reductions(r.args[1]) if x is not r]
            depth[r] = 1 + max((of(x) for x in inner), default=0)
        return depth[r]

    for o in graph.outputs:
        for r in reductions(o):
            of(r)
    return depth


def emit_kernel(graph: Graph, name: str, pointers: dict[str, str]) -> tuple[str, Emitter]:
    depth = _depths(graph)
    if not depth:
        raise Unsupported("no reduction (a pointwise graph)")
    shapes = {r.args[1].shape for r in depth}
    if len(shapes) != 1:
        raise Unsupported(f"reductions over rows of different shapes {sorted(shapes)}")
    shape = shapes.pop()
    root = Ctx("i", "r", "c", "cols", shape)
    top = Emitter(graph, pointers)
    row = top.scope("h")  # per-row values, each computed once before the first loop reading it
    lines: list[str] = []
    for level in range(1, max(depth.values()) + 1):
        group = [r for r in depth if depth[r] == level]
        accs = {r: f"acc{len(top.bound) + j}" for j, r in enumerate(group)}
        lines += [f"float {a} = {_OPS[r.args[0]]}::init();" for r, a in accs.items()]
        loops = _loops(
            top,
            row,
            root,
            f"p{level}",
            [(r.args[1], f"{a} = {_OPS[r.args[0]]}::apply({a}, {{}});") for r, a in accs.items()],
        )
        lines += row.take() + loops
        for r, a in accs.items():
            lines.append(f"{a} = group_reduce<{_OPS[r.args[0]]}>({a}, lds);")
            top.bound[r] = a
    elem = [(j, o) for j, o in enumerate(graph.outputs) if strip(o.shape) == strip(shape)]
    rows = [(j, o) for j, o in enumerate(graph.outputs) if (j, o) not in elem]
    for _, o in rows:
        if o.shape not in (shape[:-1] + (1,), shape[:-1]):
            raise Unsupported(f"an output of shape {o.shape} from rows of shape {shape}")
    if elem:
        loops = _loops(
            top,
            row,
            root,
            "w",
            [(o, f"out{j}[i] = {STORE[o.dtype].format('{}')};") for j, o in elem],
            vector_outs=elem,
        )
        lines += row.take() + loops
    if rows:
        at = {j: Ctx("r", "r", "0", "1", o.shape) for j, o in rows}  # [..., 1] or squeezed
        stores = [f"out{j}[r] = {STORE[o.dtype].format(row.value(o, at[j]))};" for j, o in rows]
        lines += [*row.take(), "if (lane == 0 && row < rows) {", *["    " + x for x in stores], "}"]
    ins = [(ph, pointers[ph]) for ph in graph.used]
    params = [f"const {_ctype(graph, ph)}* __restrict__ {p}" for ph, p in ins]
    params += [f"{C_TYPES[o.dtype]}* __restrict__ out{j}" for j, o in enumerate(graph.outputs)]
    params += ["int64_t rows", "int64_t cols"] + [f"int64_t {k}" for k in top.ints]
    params += [f"float {f}" for f in top.floats] + ["int vec_ok"]
    names = [p.split()[-1] for p in params]
    body = "\n    ".join(lines)
    return (
        f"""
__global__ void __launch_bounds__(BLOCK)
{name}_kernel({", ".join(params)}) {{
    __shared__ float lds[MAX_WARPS];
    const int lane = threadIdx.x % GROUP;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * ROWS + threadIdx.x / GROUP;
    // A group past the last row sees an empty row but still joins the block's barriers.
    const int64_t n = row < rows ? cols : 0;
    const int64_t r = row < rows ? row : 0;
    const int64_t nvec = (vec_ok && cols % VEC == 0) ? n / VEC : 0;
    {body}
}}

extern "C" hipError_t {name}({", ".join(params)}, hipStream_t stream) {{
    if (rows <= 0 || cols <= 0) return hipSuccess;
    const int64_t blocks = (rows + ROWS - 1) / ROWS;
    if (blocks > 2147483647) return hipErrorInvalidValue;
    hipLaunchKernelGGL({name}_kernel, dim3(static_cast<unsigned>(blocks)), dim3(BLOCK), 0, stream,
                       {", ".join(names)});
    return hipGetLastError();
}}
""",
        top,
    )


def _loops(
    top: Emitter,
    row: Emitter,
    root: Ctx,
    tag: str,
    work: list[tuple[V, str]],
    vector_outs=(),
) -> list[str]:
    """A vector loop and a scalar tail over the row, doing `work` (value, statement) at each
    element; the per-row values they read go to `row`, which the caller places first."""
    packs: dict[str, str] = {}  # Pack variable -> the statement that loads it

    def packed(load: V, index: str) -> str | None:
        param, ctype = top.pointers[load.args[0]], C_TYPES[load.dtype]
        if index == root.flat:  # full shape: this row's pack
            var, at = f"pk_{param}", f"{param} + r * cols)[cv]"
        elif index == root.c:  # per column: the same pack for every row
            var, at = f"pk_{param}_col", f"{param})[cv]"
        elif rows := inner_rows(index, root):  # a suffix [..., C]: its row r % rows
            var, at = f"pk_{param}_inner", f"{param} + r % {rows} * cols)[cv]"
        else:
            return None
        packs[var] = f"const Pack<{ctype}> {var} = reinterpret_cast<const Pack<{ctype}>*>({at};"
        return f"{var}.v[k]"

    hoist = per_row(root.r)
    vec = top.scope(f"{tag}a", packed, outer=row, invariant=hoist)
    vec_work = [stmt.format(vec.value(v, root)) for v, stmt in work]
    scalar = top.scope(f"{tag}b", outer=row, invariant=hoist)
    scalar_work = [stmt.format(scalar.value(v, root)) for v, stmt in work]
    loads = list(packs.values())
    if vector_outs:  # outputs go out a vector at a time too
        loads += [f"Pack<{C_TYPES[o.dtype]}> po{j};" for j, o in vector_outs]
        vec_work = [
            s.replace(f"out{j}[i] = ", f"po{j}.v[k] = ", 1)
            for s, (j, _) in zip(vec_work, vector_outs, strict=True)
        ]
    writes = [
        f"reinterpret_cast<Pack<{C_TYPES[o.dtype]}>*>(out{j} + r * cols)[cv] = po{j};"
        for j, o in vector_outs
    ]
    elem = vec.lines + vec_work
    heads = (["const int64_t c = cv * VEC + k;"] if _uses(elem, "c", "i") else []) + (
        ["const int64_t i = r * cols + c;"] if _uses(elem, "i") else []
    )
    tail = scalar.lines + scalar_work
    pad = "\n" + " " * 12
    return [
        "for (int64_t cv = lane; cv < nvec; cv += GROUP) {",
        *["    " + t for t in loads],
        "#pragma unroll",
        "    for (int k = 0; k < VEC; ++k) {",
        "        " + pad.join(heads + elem),
        "    }",
        *["    " + t for t in writes],
        "}",
        "for (int64_t c = nvec * VEC + lane; c < n; c += GROUP) {",
        *(["    const int64_t i = r * cols + c;"] if _uses(tail, "i") else []),
        *["    " + t for t in tail],
        "}",
    ]


def _uses(lines: list[str], *names: str) -> bool:
    """Whether the emitted lines read any of the loop's index variables (whole words of C)."""
    word = re.compile(r"\b(" + "|".join(names) + r")\b")
    return any(word.search(t) for t in lines)


def _ctype(graph: Graph, ph: str) -> str:
    return C_TYPES[FLOAT_DTYPES[graph.case.placeholders[ph].dtype]]
