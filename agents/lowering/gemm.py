"""A matrix product with a pointwise epilogue -> one tiled HIP GEMM kernel per dtype variant.

C = A @ B with A [M, K] row-major (leading dimensions of a batched input flattened into M) and B
either [K, N] row-major (mm, matmul) or the transpose of an [N, K] row-major matrix (linear:
x @ W^T). Each block computes a BM x BN tile of C (blocks in grouped order, for L2 reuse),
stepping through K: the tiles are staged in shared memory (zero outside the matrix, so M, N
and K need not be multiples of the tile), then multiplied by one of four paths, chosen at
compile time in the same source:
- NVIDIA (sm_80+), bf16 x bf16 or f16 x f16: a GEMM_STAGES-deep pipeline of 16-byte
  cp.async copies into XOR-swizzled dynamic shared memory, fragments by ldmatrix (.trans for a
  [K, N] B), tensor cores by mma.sync m16n8k16, all inline PTX under the NVIDIA guard (the HIP
  layer offers no <mma.h>; the static screen allows only hip/ and standard headers); operands
  no 16-byte copy may move (unaligned, K or N no multiple of 8) are staged element by element;
- AMD gfx942 / gfx950, the same dtypes: MFMA v_mfma_f32_16x16x16 (bf16_1k / f16);
- NVIDIA (sm_80+), fp32 x fp32 with B transposed in memory (nn.Linear's weight): the same
  pipeline and fragments on 32-bit elements, multiplied as 3xTF32 by mma.sync m16n8k8 (each
  operand split into two TF32 parts, three products kept: products to fp32 precision; the
  tensor cores' fp32 sums truncate, so each k8 step's products are summed in a fresh fragment
  and added to the accumulator in fp32: chained over K in the accumulator, the truncation's
  bias grew linearly with K and failed KernelBench's rtol 1e-4 at K = 8192-32768);
- anything else (other fp32 or mixed inputs, other targets, the host pass): FMA on a TM x TN
  micro-tile per thread; from K = GEMM_LONG_K (65,536) on, each K tile's products are summed
  apart and then added to the accumulator (one in-order fp32 sum over K = 1,048,576 failed
  KernelBench's tolerance on 4_Matrix_vector_multiplication_). The kernel is a template on that
  choice (LONG_K), the launcher picks the instantiation from K: each has one K loop, and the
  short-K one is the one-level code as it was.
All accumulate in fp32. The epilogue (bias, activation, scale, residual, casts: any expression
ir.py can emit) is applied to each accumulator in registers before the single store, with the
output rounded to its dtype as PyTorch rounds it.
"""

from __future__ import annotations

from pathlib import Path

from hipevolve.agents.lowering.emit import STORE, Ctx, Emitter
from hipevolve.agents.lowering.ir import C_TYPES, FLOAT_DTYPES, Graph, Unsupported, V, _walk, numel

TUNABLES = """// Rows of C per block tile.
// @tunable BM: 32, 64, 128
#define BM 128
// Columns of C per block tile.
// @tunable BN: 32, 64, 128
#define BN 128
// K step: the depth of the A and B tiles staged in LDS per iteration (the fp32 FMA path
// caps its own step at 32).
// @tunable BK: 16, 32, 64
#define BK 32
// Threads per block: 4 or 8 NVIDIA warps (4: 64 x 64 warp tiles at 128 x 128, the fewest
// shared-memory reads per mma), 2 or 4 CDNA waves; the FMA path's micro-tile is
// (BM * BN / GEMM_THREADS) accumulators per thread.
// @tunable GEMM_THREADS: 128, 256
#define GEMM_THREADS 128
// Shared-memory stages of the NVIDIA tensor-core path's cp.async pipeline: GEMM_STAGES - 1 K
// tiles load while the warps multiply one; (BM + BN) * BK * 2 bytes each for 16-bit operands,
// * 4 for fp32 (dynamic shared memory). The AMD and FMA paths stage one tile at a time and
// ignore it.
// @tunable GEMM_STAGES: 2, 3, 4
#define GEMM_STAGES 4
"""


def tunables(kernels: str) -> str:
    """TUNABLES with the defaults for these kernels. Where an fp32 GEMM takes the tensor cores
    (3xTF32): GEMM_STAGES 3, not 4 (four 128 x 128 x 32 fp32 stages are 128 KB, one block per
    SM; three let two share one: 1.20-1.21x faster on the fp32 test tasks' large cases, a
    one-off measurement on the H200: docs/OFFLINE_SUITE.md), and GEMM_THREADS 256: each k8
    step's products go to a fresh fragment before an fp32 add (gemm_template.hip, 3xTF32);
    beside the 128 accumulators a thread holds in 4 warps those pass sm_90's 255 registers
    (ptxas spills at BK 16-32), while 8 warps hold 64 each (216 registers; 8 warps per SM
    either way)."""
    if "gemm_block<DT_F32, DT_F32, true," in kernels:
        stages = TUNABLES.replace("#define GEMM_STAGES 4", "#define GEMM_STAGES 3")
        return stages.replace("#define GEMM_THREADS 128", "#define GEMM_THREADS 256")
    return TUNABLES


_DT = {"float32": "DT_F32", "bfloat16": "DT_BF16", "float16": "DT_F16"}

# The template itself (the mma.sync, MFMA and FMA paths) is C++; it lives beside this module.
HELPERS = (Path(__file__).with_name("gemm_template.hip")).read_text()

F16_ELEM = r"""
template <> struct GemmElem<DT_F16> {
    typedef uint16_t T;
    static __device__ __forceinline__ float get(uint16_t v) { return f16_to_float(v); }
};
"""


def _strip_views(v: V) -> V:
    while v.op == "view":
        v = v.args[0]
    return v


def product(graph: Graph) -> V:
    """The graph's one matrix product (Unsupported when there is none or more than one)."""
    found = {id(x): x for o in graph.outputs for x in _walk(o) if x.op == "mm"}
    if len(found) != 1:
        raise Unsupported(f"{len(found)} matrix products in one GEMM kernel")
    return next(iter(found.values()))


def operands(mm: V) -> tuple[V, V, bool]:
    """(A's load, B's load, whether B is stored transposed): the product's operands must be
    tensors in memory (a placeholder or a buffer, through views and one transpose of B)."""
    a, b = _strip_views(mm.args[0]), _strip_views(mm.args[1])
    transposed = b.op == "t"
    if transposed:
        b = _strip_views(b.args[0])
    if a.op == "t":
        raise Unsupported("a transposed left operand of a matrix product")
    if a.op != "load" or b.op != "load":
        raise Unsupported("a matrix product of computed operands (materialise them first)")
    return a, b, transposed


def emit_kernel(graph: Graph, name: str, pointers: dict[str, str]) -> tuple[str, Emitter]:
    """The __global__ kernel (a template on LONG_K, the FMA path's two-level sum) and its
    launcher for one variant (sizes M, N, K, then the epilogue's runtime arguments), which
    runs the LONG_K instantiation from K = GEMM_LONG_K on."""
    mm = product(graph)
    a, b, transposed = operands(mm)
    m, n = mm.shape
    for o in graph.outputs:
        if numel(o.shape) != m * n or o.shape[-1:] != (n,):
            raise Unsupported(f"a GEMM output of shape {o.shape} from a product of {mm.shape}")
    top = Emitter(graph, pointers, bound={mm: "acc"})
    root = Ctx("i", "r", "c", "cols", graph.outputs[0].shape)
    epi = top.scope("e")
    values = [epi.value(o, root) for o in graph.outputs]
    stores = [
        f"out{j}[i] = {STORE[o.dtype].format(values[j])};" for j, o in enumerate(graph.outputs)
    ]
    ins = [(ph, pointers[ph]) for ph in graph.used]
    params = [f"const {_ctype(graph, ph)}* __restrict__ {p}" for ph, p in ins]
    params += [f"{C_TYPES[o.dtype]}* __restrict__ out{j}" for j, o in enumerate(graph.outputs)]
    params += ["int64_t M", "int64_t N", "int64_t K"] + [f"int64_t {k}" for k in top.ints]
    params += [f"float {f}" for f in top.floats]
    names = [p.split()[-1] for p in params]
    da, db, bt = _DT[a.dtype], _DT[b.dtype], "true" if transposed else "false"
    body = "\n            ".join(epi.lines + stores)
    launch = (
        f"hipLaunchKernelGGL({name}_kernel<{{}}>, grid, dim3(GEMM_THREADS), smem, stream, "
        f"{', '.join(names)}, gemm_vec);"
    )
    return (
        f"""
template <bool LONG_K>
__global__ void __launch_bounds__(GEMM_THREADS)
{name}_kernel({", ".join(params)}, int gemm_vec) {{
    const int64_t cols = N;
    gemm_block<{da}, {db}, {bt}, LONG_K>(
        {pointers[a.args[0]]}, {pointers[b.args[0]]}, M, N, K, gemm_vec != 0,
        [&](int64_t r, int64_t c, float acc) {{
            const int64_t i = r * cols + c;
            {body}
        }});
}}

extern "C" hipError_t {name}({", ".join(params)}, hipStream_t stream) {{
    if (M <= 0 || N <= 0) return hipSuccess;
    const int64_t tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    if (tiles_m > 65535 || tiles_n > 2147483647) return hipErrorInvalidValue;
    const int gemm_vec = gemm_vector_ok<{da}, {db}, {bt}>({pointers[a.args[0]]}, {pointers[b.args[0]]}, N, K);
    constexpr int smem = gemm_dynamic_smem<{da}, {db}, {bt}>();
    const bool long_k = K >= GEMM_LONG_K;
#if defined(__HIP_PLATFORM_NVIDIA__)
    if (smem > 48 * 1024) {{  // above 48 KB only once the kernel's limit is raised
        const hipError_t raised = hipFuncSetAttribute(
            long_k ? reinterpret_cast<const void*>(&{name}_kernel<true>)
                   : reinterpret_cast<const void*>(&{name}_kernel<false>),
            hipFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (raised != hipSuccess) return raised;
    }}
#endif
    const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m));
    if (long_k) {{
        {launch.format("true")}
    }} else {{
        {launch.format("false")}
    }}
    return hipGetLastError();
}}
""",
        top,
    )


def size_factors(graph: Graph) -> list[list[int]]:
    """M (as the factors of A's leading dimensions), N and K, for the launcher's int64 sizes."""
    mm = product(graph)
    a, _, _ = operands(mm)
    return [list(a.shape[:-1]) or [1], [mm.shape[1]], [a.shape[-1]]]


def _ctype(graph: Graph, ph: str) -> str:
    return C_TYPES[FLOAT_DTYPES[graph.case.placeholders[ph].dtype]]
