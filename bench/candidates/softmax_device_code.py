"""The device code of make_softmax_variants.py's softmax candidates: one row softmax per variant
(block size, rows per block, vector width, reduction style, online or three-pass, and the bug a
wrong one carries), written as HIP for the native format and as plain CUDA for KernelBench's
load_inline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from make_softmax_variants import Platform, Variant

def _prelude(p: Platform) -> str:
    if p == "hip":
        return """#include <hip/hip_runtime.h>
#include <cstdint>
#include <cmath>
"""
    return """#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cmath>
"""


def _conversions(p: Platform) -> str:
    if p == "hip":
        # bf16 travels as raw 16-bit patterns: no bf16 header needed on either platform.
        return """__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(uint16_t bits) {
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ uint16_t from_float<uint16_t>(float v) {
    uint32_t bits = __float_as_uint(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>(bits >> 16);
}
"""
    return """__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16(v);
}
"""


def _row_access(v: Variant) -> str:
    if not v.vec_bytes:
        return """// f(value) over this thread's share of one row.
template <typename T, typename F>
__device__ __forceinline__ void for_row(const T* xr, int64_t cols, int lane, F f) {
    for (int64_t c = lane; c < cols; c += kGroup) f(to_float(xr[c]));
}

// yr[c] = g(xr[c]) over this thread's share of one row.
template <typename T, typename G>
__device__ __forceinline__ void map_row(const T* xr, T* yr, int64_t cols, int lane, G g) {
    for (int64_t c = lane; c < cols; c += kGroup) yr[c] = from_float<T>(g(to_float(xr[c])));
}
"""
    return f"""constexpr int kVecBytes = {v.vec_bytes};

template <typename T>
struct alignas(kVecBytes) Pack {{
    T v[kVecBytes / sizeof(T)];
}};

__device__ __forceinline__ bool aligned(const void* p) {{
    return reinterpret_cast<uintptr_t>(p) % kVecBytes == 0;
}}

// f(value) over this thread's share of one row: whole packs where the row is aligned, then
// the tail one element at a time (any cols, any offset).
template <typename T, typename F>
__device__ __forceinline__ void for_row(const T* xr, int64_t cols, int lane, F f) {{
    constexpr int kVec = kVecBytes / sizeof(T);
    int64_t done = 0;
    if (aligned(xr)) {{
        const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(xr);
        const int64_t packs = cols / kVec;
        for (int64_t p = lane; p < packs; p += kGroup) {{
            const Pack<T> in = xp[p];
#pragma unroll
            for (int k = 0; k < kVec; ++k) f(to_float(in.v[k]));
        }}
        done = packs * kVec;
    }}
    for (int64_t c = done + lane; c < cols; c += kGroup) f(to_float(xr[c]));
}}

// yr[c] = g(xr[c]) over this thread's share of one row, vectorised like for_row.
template <typename T, typename G>
__device__ __forceinline__ void map_row(const T* xr, T* yr, int64_t cols, int lane, G g) {{
    constexpr int kVec = kVecBytes / sizeof(T);
    int64_t done = 0;
    if (aligned(xr) && aligned(yr)) {{
        const Pack<T>* xp = reinterpret_cast<const Pack<T>*>(xr);
        Pack<T>* yp = reinterpret_cast<Pack<T>*>(yr);
        const int64_t packs = cols / kVec;
        for (int64_t p = lane; p < packs; p += kGroup) {{
            const Pack<T> in = xp[p];
            Pack<T> out;
#pragma unroll
            for (int k = 0; k < kVec; ++k) out.v[k] = from_float<T>(g(to_float(in.v[k])));
            yp[p] = out;
        }}
        done = packs * kVec;
    }}
    for (int64_t c = done + lane; c < cols; c += kGroup) yr[c] = from_float<T>(g(to_float(xr[c])));
}}
"""


def _reduction(v: Variant, p: Platform) -> str:
    if v.reduce == "smem":
        return """// Tree reduction over the kGroup threads of one row through shared memory: the same on
// 32- and 64-lane hardware.
template <bool kMax>
__device__ float group_reduce(float v, float* scratch) {
    const int lane = threadIdx.x % kGroup;
    float* mine = scratch + (threadIdx.x - lane);
    mine[lane] = v;
    __syncthreads();
    for (int stride = kGroup / 2; stride > 0; stride /= 2) {
        if (lane < stride) {
            const float other = mine[lane + stride];
            mine[lane] = kMax ? fmaxf(mine[lane], other) : mine[lane] + other;
        }
        __syncthreads();
    }
    const float result = mine[0];
    __syncthreads();
    return result;
}
"""
    shfl = (
        "__shfl_xor(v, offset, width)"
        if p == "hip"
        else "__shfl_xor_sync(0xffffffffu, v, offset, width)"
    )
    cross = (
        """    if (kGroup <= warpSize) return v;
    // The group spans several warps: lane 0 of each publishes its partial, then every thread
    // of the group combines its group's partials.
    const int warps = kGroup / warpSize;
    if (threadIdx.x % warpSize == 0) scratch[threadIdx.x / warpSize] = v;
    __syncthreads();
    const int first = (threadIdx.x / kGroup) * warps;
    float result = scratch[first];
    for (int w = 1; w < warps; ++w) {
        result = kMax ? fmaxf(result, scratch[first + w]) : result + scratch[first + w];
    }
    __syncthreads();
    return result;
"""
        if v.bug != "warp_only"
        else """    (void)scratch;
    return v;
"""
    )
    return f"""// Butterfly over each warp (or over the group when it is narrower than a warp); warpSize is
// read at run time, 32 on NVIDIA and 64 on CDNA.
template <bool kMax>
__device__ float group_reduce(float v, float* scratch) {{
    const int width = kGroup < warpSize ? kGroup : warpSize;
    for (int offset = width / 2; offset > 0; offset /= 2) {{
        const float other = {shfl};
        v = kMax ? fmaxf(v, other) : v + other;
    }}
{cross}}}
"""


def _kernel(v: Variant) -> str:
    exp = "__expf" if v.fast_exp else "expf"
    shared = (
        "__shared__ float scratch[blockDim.x];"
        if v.bug == "vla_shared"
        else "__shared__ float scratch[kThreads];"
    )
    lane = (
        "const int lane = threadIdx.x % kGroup"
        if v.bug == "semicolon"
        else "const int lane = threadIdx.x % kGroup;"
    )
    xr_type = "T*" if v.bug == "const_drop" else "const T*"
    norm = {"mul_sum": "row_sum", "typo": "inv_summ"}.get(v.bug, "inv_sum")
    keep = (
        "    (void)inv_sum;  // unused once the bug multiplies by row_sum\n"
        if v.bug == "mul_sum"
        else ""
    )
    sign = "+" if v.bug == "exp_plus_max" else "-"
    out_row = "(row + 1)" if v.bug == "row_shift" else "row"
    write_guard = "active && row + 1 < rows" if v.bug == "row_shift" else "active"
    if v.online:
        stats = f"""    // One pass: running max m and a sum s rescaled whenever m grows.
    float m = -INFINITY;
    float s = 0.0f;
    if (active) {{
        for_row(xr, cols, lane, [&](float v) {{
            if (v > m) {{
                s = s * {exp}(m - v) + 1.0f;
                m = v;
            }} else {{
                s += {exp}(v - m);
            }}
        }});
    }}
    const float row_max = group_reduce<true>(m, scratch);
    const float rescaled = m == -INFINITY ? 0.0f : s * {exp}(m - row_max);
    const float row_sum = group_reduce<false>(rescaled, scratch);
"""
    else:
        term = "v" if v.bug == "sum_inputs" else f"{exp}(v - row_max)"
        stats = f"""    float local_max = -INFINITY;
    if (active) for_row(xr, cols, lane, [&](float v) {{ local_max = fmaxf(local_max, v); }});
    const float row_max = group_reduce<true>(local_max, scratch);
    float local_sum = 0.0f;
    if (active) for_row(xr, cols, lane, [&](float v) {{ local_sum += {term}; }});
    const float row_sum = group_reduce<false>(local_sum, scratch);
"""
    return f"""template <typename T>
__global__ void __launch_bounds__(kThreads)
softmax_rows(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t cols) {{
    {shared}
    {lane}
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kGroup;
    // Groups past the last row still join the reductions, which synchronise the whole block.
    const bool active = row < rows;
    {xr_type} xr = x + (active ? row : 0) * cols;
{stats}    const float inv_sum = 1.0f / row_sum;
{keep}    if ({write_guard}) {{
        map_row(xr, y + {out_row} * cols, cols, lane,
                [&](float v) {{ return {exp}(v {sign} row_max) * {norm}; }});
    }}
}}
"""


def _header(v: Variant, p: Platform) -> str:
    lang = "HIP (native candidate)" if p == "hip" else "CUDA (KernelBench-format twin)"
    lines = [
        f"// Row softmax, bench variant {v.name}, {lang}.",
        f"// {v.describe()}.",
    ]
    if v.note:
        lines.append(f"// {v.note}.")
    if v.bug:
        lines.append(f"// Planted for the throughput bench ({v.expect}): {v.bug_text}.")
    return "\n".join(lines) + "\n"


def _device_code(v: Variant, p: Platform) -> str:
    return f"""{_header(v, p)}{_prelude(p)}
namespace {{

constexpr int kThreads = {v.threads};
constexpr int kRowsPerBlock = {v.rows};
constexpr int kGroup = kThreads / kRowsPerBlock;  // threads that share one row

{_conversions(p)}
{_row_access(v)}
{_reduction(v, p)}
{_kernel(v)}"""


def _launch_args(v: Variant, x: str, y: str) -> str:
    return f"{x}, {y}, rows" if v.bug == "launch_args" else f"{x}, {y}, rows, cols"


def hip_source(v: Variant) -> str:
    return f"""{_device_code(v, "hip")}
template <typename T>
hipError_t launch(const T* x, T* y, int64_t rows, int64_t cols, hipStream_t stream) {{
    if (rows == 0 || cols == 0) return hipSuccess;
    const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    softmax_rows<T><<<dim3(blocks), dim3(kThreads), 0, stream>>>({_launch_args(v, "x", "y")});
    return hipGetLastError();
}}

}}  // namespace

extern "C" hipError_t softmax_f32(const float* x, float* y, int64_t rows, int64_t cols,
                                  hipStream_t stream) {{
    return launch(x, y, rows, cols, stream);
}}

extern "C" hipError_t softmax_bf16(const uint16_t* x, uint16_t* y, int64_t rows, int64_t cols,
                                   hipStream_t stream) {{
    return launch(x, y, rows, cols, stream);
}}
"""


def cuda_source(v: Variant) -> str:
    f32 = _launch_args(v, "xc.data_ptr<float>()", "y.data_ptr<float>()")
    bf16 = _launch_args(
        v,
        "reinterpret_cast<const __nv_bfloat16*>(xc.data_ptr<at::BFloat16>())",
        "reinterpret_cast<__nv_bfloat16*>(y.data_ptr<at::BFloat16>())",
    )
    return f"""{_device_code(v, "cuda")}
}}  // namespace

torch::Tensor softmax_forward(torch::Tensor x) {{
    TORCH_CHECK(x.is_cuda(), "softmax_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.dim() >= 1, "softmax_forward: x needs at least one dimension");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t cols = xc.size(-1);
    const int64_t rows = cols ? xc.numel() / cols : 0;
    if (rows == 0 || cols == 0) return y;
    const dim3 blocks(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
    if (xc.scalar_type() == torch::kFloat32) {{
        softmax_rows<float><<<blocks, kThreads>>>({f32});
    }} else if (xc.scalar_type() == torch::kBFloat16) {{
        softmax_rows<__nv_bfloat16><<<blocks, kThreads>>>(
            {bf16});
    }} else {{
        TORCH_CHECK(false, "softmax_forward supports float32 and bfloat16, got ", xc.scalar_type());
    }}
    const cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, "softmax_forward launch failed: ", cudaGetErrorString(err));
    return y;
}}
"""
