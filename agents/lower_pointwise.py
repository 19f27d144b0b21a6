"""Pointwise graphs (any composition of elementwise ops, broadcasts, last-dimension slices and
dtype casts) -> one vectorised HIP kernel per dtype variant.

Layout: a 1-D grid; block b owns BLOCK * UNROLL vectors of VEC elements (thread t: vectors t,
t + BLOCK, ...). Inputs read at full shape move VEC elements per load when every pointer is on a
32-byte boundary and the element count is a multiple of VEC (the launcher's vec_ok and n % VEC);
otherwise every element goes through the scalar loop, which strides over the whole grid.
"""

from __future__ import annotations

from hipevolve.agents.lower_ir import C_TYPES, STORE, Ctx, Emitter, Graph, Unsupported, access

TUNABLES = """// Threads per block.
// @tunable BLOCK: 64, 128, 256, 512, 1024
#define BLOCK 256
// Elements per load and store.
// @tunable VEC: 1, 2, 4, 8
#define VEC 4
// Vectors per thread (a block covers BLOCK * VEC * UNROLL elements).
// @tunable UNROLL: 1, 2, 4
#define UNROLL 1
"""


def emit_kernel(graph: Graph, name: str, pointers: dict[str, str]) -> tuple[str, Emitter]:
    """The __global__ kernel and launcher for one variant; the emitter holds its runtime args."""
    shape = graph.outputs[0].shape
    if any(o.shape != shape for o in graph.outputs):
        raise Unsupported("pointwise outputs of different shapes")
    root = Ctx("i", "(i / cols)", "(i % cols)", "cols", shape)
    top = Emitter(graph, pointers)
    packs: set[str] = set()

    def packed(ph: str, ctx: Ctx) -> bool:
        if ctx == root and access(graph.case.placeholders[ph].shape, shape) == "FULL":
            packs.add(ph)
            return True
        return False

    vec = top.scope("a", packed)
    vec_vals = [vec.value(o, root) for o in graph.outputs]
    scalar = top.scope("b")
    scalar_vals = [scalar.value(o, root) for o in graph.outputs]
    ins = [(ph, pointers[ph]) for ph in graph.used]
    params = [f"const {_ctype(graph, ph)}* __restrict__ {p}" for ph, p in ins]
    params += [f"{C_TYPES[o.dtype]}* __restrict__ out{j}" for j, o in enumerate(graph.outputs)]
    params += ["int64_t n", "int64_t cols"] + [f"int64_t {k}" for k in top.ints]
    params += [f"float {f}" for f in top.floats] + ["int vec_ok"]
    pack_loads = [f"const Pack<{_ctype(graph, ph)}> pk_{p} = "
                  f"reinterpret_cast<const Pack<{_ctype(graph, ph)}>*>({p})[vi];"
                  for ph, p in ins if ph in packs]  # fmt: skip
    out_packs = [f"Pack<{C_TYPES[o.dtype]}> po{j};" for j, o in enumerate(graph.outputs)]
    vec_stores = [f"po{j}.v[k] = {STORE[o.dtype].format(vec_vals[j])};"
                  for j, o in enumerate(graph.outputs)]  # fmt: skip
    vec_writes = [f"reinterpret_cast<Pack<{C_TYPES[o.dtype]}>*>(out{j})[vi] = po{j};"
                  for j, o in enumerate(graph.outputs)]  # fmt: skip
    scalar_stores = [f"out{j}[i] = {STORE[o.dtype].format(scalar_vals[j])};"
                     for j, o in enumerate(graph.outputs)]  # fmt: skip
    body = f"""
__global__ void __launch_bounds__(BLOCK)
{name}_kernel({", ".join(params)}) {{
    const int64_t nvec = (vec_ok && n % VEC == 0) ? n / VEC : 0;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * BLOCK * UNROLL + threadIdx.x;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {{
        const int64_t vi = first + static_cast<int64_t>(u) * BLOCK;
        if (vi < nvec) {{
            {_join(pack_loads + out_packs, 12)}
#pragma unroll
            for (int k = 0; k < VEC; ++k) {{
                const int64_t i = vi * VEC + k;
                {_join(vec.lines + vec_stores, 16)}
            }}
            {_join(vec_writes, 12)}
        }}
    }}
    for (int64_t i = nvec * VEC + static_cast<int64_t>(blockIdx.x) * BLOCK + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * BLOCK) {{
        {_join(scalar.lines + scalar_stores, 8)}
    }}
}}

extern "C" hipError_t {name}({", ".join(params)}, hipStream_t stream) {{
    if (n <= 0) return hipSuccess;
    const int64_t nvec = (vec_ok && n % VEC == 0) ? n / VEC : 0;
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
    from hipevolve.agents.lower_ir import FLOAT_DTYPES

    return C_TYPES[FLOAT_DTYPES[graph.case.placeholders[ph].dtype]]


def _arg_names(params: list[str]) -> list[str]:
    return [p.split()[-1] for p in params]


def _join(lines: list[str], indent: int) -> str:
    return ("\n" + " " * indent).join(lines)
