"""Pointwise graphs (any composition of elementwise ops, broadcasts, last-dimension slices and
dtype casts) -> one vectorised HIP kernel per dtype variant.

Layout: a 1-D grid; block b owns BLOCK * UNROLL vectors of VEC elements (thread t: vectors t,
t + BLOCK, ...). The vector path needs every pointer on a 32-byte boundary (the launcher's
vec_ok) and n % VEC == 0; a graph that reads by row or column (broadcasts, slices) needs
cols % VEC == 0 too, so that a pack never crosses a row: its row and first column then come
from one division per pack (32-bit when n < 2^31), a per-column ([C]) or suffix-shaped input
moves as one Pack like the full-shape ones, and per-row ([..., 1]) and scalar values are
computed once per pack, before the element loop. Otherwise every element goes through the
scalar loop (one division per element for its row and column), which strides over the grid.
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
from hipevolve.agents.lowering.ir import C_TYPES, Graph, Unsupported, V

TUNABLES = (
    BLOCK_VEC_TUNABLES
    + """// Vectors per thread (a block covers BLOCK * VEC * UNROLL elements).
// @tunable UNROLL: 1, 2, 4
#define UNROLL 1
"""
)


def emit_kernel(graph: Graph, name: str, pointers: dict[str, str]) -> tuple[str, Emitter]:
    """The __global__ kernel and launcher for one variant; the emitter holds its runtime args."""
    shape = graph.outputs[0].shape
    if any(o.shape != shape for o in graph.outputs):
        raise Unsupported("pointwise outputs of different shapes")
    root = Ctx("i", "r", "c", "cols", shape)
    top = Emitter(graph, pointers)
    packs: dict[str, str] = {}  # Pack variable -> the statement that loads it
    by_column = False  # a pack is read at its column: the rows must be whole packs

    def packed(load: V, index: str) -> str | None:
        nonlocal by_column
        param, ctype = pointers[load.args[0]], C_TYPES[load.dtype]
        if index == root.flat:  # full shape: the pack of the output's own elements
            var, at = f"pk_{param}", f"{param})[vi]"
        elif index == root.c:  # per column: the pack starts at the pack's first column
            var, at = f"pk_{param}_col", f"{param})[c0 / VEC]"
        elif rows := inner_rows(index, root):  # a suffix [..., C]: its row r % rows
            var, at = f"pk_{param}_inner", f"{param} + r % {rows} * cols)[c0 / VEC]"
        else:
            return None
        by_column = by_column or var != f"pk_{param}"
        packs[var] = f"const Pack<{ctype}> {var} = reinterpret_cast<const Pack<{ctype}>*>({at};"
        return f"{var}.v[k]"

    per_pack = top.scope("p")
    vec = top.scope("a", packed, outer=per_pack, invariant=per_row(root.r))
    vec_vals = [vec.value(o, root) for o in graph.outputs]
    scalar = top.scope("b")
    scalar_vals = [scalar.value(o, root) for o in graph.outputs]
    ins = [(ph, pointers[ph]) for ph in graph.used]
    params = [f"const {_ctype(graph, ph)}* __restrict__ {p}" for ph, p in ins]
    params += [f"{C_TYPES[o.dtype]}* __restrict__ out{j}" for j, o in enumerate(graph.outputs)]
    params += ["int64_t n", "int64_t cols"] + [f"int64_t {k}" for k in top.ints]
    params += [f"float {f}" for f in top.floats] + ["int vec_ok"]
    out_packs = [f"Pack<{C_TYPES[o.dtype]}> po{j};" for j, o in enumerate(graph.outputs)]
    vec_stores = [
        f"po{j}.v[k] = {STORE[o.dtype].format(vec_vals[j])};" for j, o in enumerate(graph.outputs)
    ]
    vec_writes = [
        f"reinterpret_cast<Pack<{C_TYPES[o.dtype]}>*>(out{j})[vi] = po{j};"
        for j, o in enumerate(graph.outputs)
    ]
    scalar_stores = [
        f"out{j}[i] = {STORE[o.dtype].format(scalar_vals[j])};" for j, o in enumerate(graph.outputs)
    ]
    vec_rows = by_column or _uses(per_pack.lines + vec.lines, "r", "c")
    scalar_rows = _uses(scalar.lines, "r", "c")
    elem_head = ["const int64_t i = i0 + k;"] if _uses(vec.lines, "i") else []
    pack_head = []
    if vec_rows or elem_head or _uses(list(packs.values()), "i0"):
        pack_head.append("const int64_t i0 = vi * VEC;")
    if vec_rows:
        pack_head += [
            "const int64_t r = index_div(i0, cols, narrow);  // one row per pack",
            "const int64_t c0 = i0 - r * cols;",
        ]
        elem_head += ["const int64_t c = c0 + k;"] if _uses(vec.lines, "c") else []
    scalar_head = []
    if scalar_rows:
        scalar_head = [
            "const int64_t r = index_div(i, cols, narrow);",
            "const int64_t c = i - r * cols;",
        ]
    kernel_head = [
        "const int64_t nvec = (vec_ok && cols % VEC == 0) ? n / VEC : 0;"
        if vec_rows
        else "const int64_t nvec = (vec_ok && n % VEC == 0) ? n / VEC : 0;"
    ]
    if vec_rows or scalar_rows:
        kernel_head.append("const bool narrow = n <= INT32_MAX;  // every index fits 32 bits")
    body = f"""
__global__ void __launch_bounds__(BLOCK)
{name}_kernel({", ".join(params)}) {{
    {_join(kernel_head, 4)}
    const int64_t first = static_cast<int64_t>(blockIdx.x) * BLOCK * UNROLL + threadIdx.x;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {{
        const int64_t vi = first + static_cast<int64_t>(u) * BLOCK;
        if (vi < nvec) {{
            {_join(pack_head + list(packs.values()) + per_pack.lines + out_packs, 12)}
#pragma unroll
            for (int k = 0; k < VEC; ++k) {{
                {_join(elem_head + vec.lines + vec_stores, 16)}
            }}
            {_join(vec_writes, 12)}
        }}
    }}
    for (int64_t i = nvec * VEC + static_cast<int64_t>(blockIdx.x) * BLOCK + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * BLOCK) {{
        {_join(scalar_head + scalar.lines + scalar_stores, 8)}
    }}
}}

extern "C" hipError_t {name}({", ".join(params)}, hipStream_t stream) {{
    if (n <= 0) return hipSuccess;
    {kernel_head[0]}
    const int64_t work = nvec > 0 ? nvec : n;
    int64_t blocks = (work + BLOCK * UNROLL - 1) / (BLOCK * UNROLL);
    if (blocks > 2147483647) return hipErrorInvalidValue;
    hipLaunchKernelGGL({name}_kernel, dim3(static_cast<unsigned>(blocks)), dim3(BLOCK), 0, stream,
                       {", ".join(_arg_names(params))});
    return hipGetLastError();
}}
"""
    return body, top


def _ctype(graph: Graph, ph: str) -> str:
    from hipevolve.agents.lowering.ir import FLOAT_DTYPES

    return C_TYPES[FLOAT_DTYPES[graph.case.placeholders[ph].dtype]]


def _arg_names(params: list[str]) -> list[str]:
    return [p.split()[-1] for p in params]


def _uses(lines: list[str], *names: str) -> bool:
    """Whether the emitted lines read any of the loop's index variables (whole words of C)."""
    word = re.compile(r"\b(" + "|".join(names) + r")\b")
    return any(word.search(t) for t in lines)


def _join(lines: list[str], indent: int) -> str:
    return ("\n" + " " * indent).join(lines)
