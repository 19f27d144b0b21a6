"""The mutator's source transforms: where each applies, that it is idempotent, and that what it
produces still compiles with nvcc (through the HIP-to-CUDA layer) and for gfx942 (AMD static).

Inputs: the softmax example, the two GDN seeds, the same three with their hints stripped (so the
transforms have work to do on real kernels), the decode seed with its block size made a tunable,
and AXPY below, a small kernel written to offer every transform something to do.
"""

from __future__ import annotations

import functools
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hipevolve.evolution.offline.transforms import (
    CATALOGUE,
    Transform,
    blank_comments,
    transform_named,
)
from hipevolve.evolution.offline.tunables import current_configuration, parse_tunables

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = (ROOT / "prompts" / "examples" / "softmax_native" / "kernel.hip").read_text()
CHUNKED = (ROOT / "problems" / "gated_delta_net" / "seeds" / "chunked" / "kernel.hip").read_text()
RECURRENT = (
    ROOT / "problems" / "gated_delta_net_decode" / "seeds" / "recurrent" / "kernel.hip"
).read_text()

AXPY = """// y += alpha * x over packs of VEC floats; fill sets a buffer.
#include <hip/hip_runtime.h>
#include <cstdint>

// @tunable BLOCK: 64, 128, 256, 512
#define BLOCK 256
// @tunable VEC: 1, 2, 4
#define VEC 2
// @tunable ITEMS: 1, 2, 4
#define ITEMS 2

struct alignas(sizeof(float) * VEC) Pack {
  float v[VEC];
};

// Not a kernel: its constant loop and pointer stay as they are.
__device__ float sum4(const float* v) {
  float s = 0.0f;
  for (int i = 0; i < 4; ++i) s += v[i];
  return s;
}

__global__ void axpy_kernel(const Pack* x, Pack* y, float alpha, int64_t packs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * BLOCK * ITEMS;
  const int64_t start = static_cast<int64_t>(blockIdx.x) * BLOCK * ITEMS + threadIdx.x;
  for (int64_t first = start; first < packs; first += stride) {
    for (int i = 0; i < ITEMS; ++i) {
      const int64_t p = first + static_cast<int64_t>(i) * BLOCK;
      if (p < packs) {
        const Pack a = x[p];
        Pack b = y[p];
        for (int j = 0; j < VEC; ++j) b.v[j] += alpha * a.v[j];
        y[p] = b;
      }
    }
  }
}

__global__ void fill_kernel(float* y, const float* value, int n) {
  for (int i = threadIdx.x; i < n; i += BLOCK) y[i] = sum4(value);
}

extern "C" hipError_t axpy(const float* x, float* y, float alpha, int64_t n, hipStream_t stream) {
  if (n < 0 || n % VEC != 0) return hipErrorInvalidValue;
  if (n == 0) return hipSuccess;
  const int64_t packs = n / VEC;
  const int64_t blocks = (packs + BLOCK * ITEMS - 1) / (BLOCK * ITEMS);
  const dim3 grid(static_cast<unsigned int>(blocks < 1024 ? blocks : 1024));
  axpy_kernel<<<grid, BLOCK, 0, stream>>>(reinterpret_cast<const Pack*>(x),
                                          reinterpret_cast<Pack*>(y), alpha, packs);
  return hipGetLastError();
}

extern "C" hipError_t fill4(float* y, const float* value, int n, hipStream_t stream) {
  hipLaunchKernelGGL(fill_kernel, dim3(1), dim3(BLOCK), 0, stream, y, value, n);
  return hipGetLastError();
}
"""


def without_hints(source: str) -> str:
    """The source with plain `#pragma unroll` lines, __restrict__ and __launch_bounds__ removed."""
    source = re.sub(r"^[ \t]*#pragma unroll[ \t]*\n", "", source, flags=re.M)
    source = source.replace("__restrict__ ", "")
    return re.sub(r"__launch_bounds__\(\w+\)\s*", "", source)


SEEDS = {"softmax": SOFTMAX, "chunked": CHUNKED, "recurrent": RECURRENT}
SOURCES = {
    **SEEDS,
    **{f"{name}-bare": without_hints(text) for name, text in SEEDS.items()},
    "axpy": AXPY,
}


def apply_all(source: str) -> str:
    for transform in CATALOGUE:
        source = transform.apply(source) or source
    return source


@functools.cache
def produced() -> dict[str, str]:
    """Every distinct source a transform (or all of them in turn) makes from SOURCES."""
    out: dict[str, str] = {}
    for name, source in SOURCES.items():
        for transform in CATALOGUE:
            result = transform.apply(source)
            if result is not None and result not in out.values():
                out[f"{name}+{transform.name}"] = result
    out["axpy+all"] = apply_all(AXPY)
    out["axpy-1024+launch_bounds"] = transform_named("launch_bounds_from_block").apply(
        AXPY.replace("void axpy_kernel", "void __launch_bounds__(1024) axpy_kernel")
    )
    return out


# ----------------------------------------------------------------------------- where they apply


def test_kernels_that_already_carry_the_hints_are_left_alone():
    for name, source in SEEDS.items():
        for transform in CATALOGUE:
            assert transform.apply(source) is None, f"{transform.name} changed {name}"


def test_every_transform_applies_to_some_test_source():
    applied = {key.split("+", 1)[1] for key in produced()}
    assert {t.name for t in CATALOGUE} <= applied


@pytest.mark.parametrize("transform", CATALOGUE, ids=lambda t: t.name)
def test_transforms_are_idempotent(transform: Transform):
    for name, source in SOURCES.items():
        once = transform.apply(source)
        if once is not None:
            assert transform.apply(once) is None, name


def test_every_transform_has_a_name_and_a_one_line_rationale():
    names = [t.name for t in CATALOGUE]
    assert len(set(names)) == len(names)
    for t in CATALOGUE:
        assert re.fullmatch(r"[a-z_]+", t.name) and "\n" not in t.rationale
        assert len(t.rationale) > 40


def test_unroll_restores_the_seeds_hints_on_innermost_constant_loops():
    unroll = transform_named("unroll_constant_loops")
    for name in SEEDS:
        restored = unroll.apply(SOURCES[f"{name}-bare"])
        hinted = re.findall(r"#pragma unroll\n\s*(for \([^)]*\))", restored)
        original = set(re.findall(r"#pragma unroll\n\s*(for \([^)]*\))", SEEDS[name]))
        assert hinted and set(hinted) <= original, name


def test_unroll_marks_only_innermost_constant_trip_loops_in_kernels():
    result = transform_named("unroll_constant_loops").apply(AXPY)
    hinted = re.findall(r"#pragma unroll\n\s*(for \([^;]*;)", result)
    assert hinted == ["for (int j = 0;"]  # not ITEMS (has a loop inside), not runtime n, not sum4
    assert "        #pragma unroll\n        for (int j" in result  # indented like its loop


def test_restrict_goes_on_kernel_pointer_parameters_only():
    result = transform_named("restrict_pointers").apply(AXPY)
    assert "axpy_kernel(const Pack* __restrict__ x, Pack* __restrict__ y, float alpha" in result
    assert "fill_kernel(float* __restrict__ y, const float* __restrict__ value, int n)" in result
    assert "sum4(const float* v)" in result
    assert "axpy(const float* x, float* y, float alpha" in result


def test_launch_bounds_follow_the_tunable_block_size_of_the_launches():
    bounds = transform_named("launch_bounds_from_block")
    result = bounds.apply(AXPY)
    assert "__global__ void __launch_bounds__(BLOCK) axpy_kernel(" in result
    assert "__global__ void __launch_bounds__(BLOCK) fill_kernel(" in result
    assert "__launch_bounds__(BLOCK) axpy_kernel" in produced()["axpy-1024+launch_bounds"]


def test_launch_bounds_stay_off_where_the_block_size_is_not_one_tunable():
    bounds = transform_named("launch_bounds_from_block")
    assert bounds.apply(SOURCES["softmax-bare"]) is None  # threads computed at run time
    assert bounds.apply(SOURCES["chunked-bare"]) is None  # NT is a constexpr, not a tunable
    twice = AXPY.replace(
        "  return hipGetLastError();\n}\n\nextern",
        "  axpy_kernel<<<grid, 128, 0, stream>>>(nullptr, nullptr, alpha, 0);\n"
        "  return hipGetLastError();\n}\n\nextern",
        1,
    )
    result = bounds.apply(twice)  # axpy_kernel launched with two sizes: only fill_kernel bounded
    assert "__launch_bounds__(BLOCK) fill_kernel" in result
    assert "__global__ void axpy_kernel(" in result


def test_vector_width_moves_to_the_widest_or_narrowest_declared_value_only():
    widen, narrow = transform_named("widen_vector"), transform_named("narrow_vector")
    wide = current_configuration(parse_tunables(widen.apply(AXPY)))
    slim = current_configuration(parse_tunables(narrow.apply(AXPY)))
    assert wide == {"BLOCK": "256", "VEC": "4", "ITEMS": "2"}
    assert slim == {"BLOCK": "256", "VEC": "1", "ITEMS": "2"}
    for seed in SEEDS.values():  # BV is a slice width, not a vector width
        assert widen.apply(seed) is None and narrow.apply(seed) is None


def test_blanking_comments_and_literals_keeps_every_offset():
    source = 'a /* x\n y */ "s//t" // c\nchar q = \'"\';\n'
    blank = blank_comments(source)
    assert len(blank) == len(source) and blank.count("\n") == source.count("\n")
    assert blank == "a     \n      \"    \"     \nchar q = ' ';\n"


def test_transforms_edit_only_code_outside_comments():
    commented = "// __global__ void k(float* x) { for (int i = 0; i < 4; ++i) x[i] = 0; }\n"
    for transform in CATALOGUE:
        assert transform.apply(commented) is None


# ----------------------------------------------------------------------------- they compile


def test_transformed_sources_compile_with_nvcc_through_the_hip_layer(tmp_path):
    from hipevolve.verifier.build import nvidia as nvidia_layer
    from hipevolve.verifier.build.compile import Compiler, build_many

    nvcc = nvidia_layer.find_nvcc()
    if nvcc is None or not (nvidia_layer.include_dir() / "hip" / "hip_runtime.h").exists():
        pytest.skip("nvcc or the HIP-to-CUDA layer is missing")
    argv = nvidia_layer.nvcc_command(nvcc, Path("kernel.hip"), Path("lib.so"), arch="sm_90")
    compiler = Compiler(name="cuda", argv=tuple(argv), toolchain=nvidia_layer.nvcc_version(nvcc))
    sources = produced()
    results = build_many(list(sources.values()), compiler, tmp_path, jobs=2)
    failed = {name: r.log for name, r in zip(sources, results, strict=True) if not r.ok}
    assert not failed, failed


@pytest.mark.amd_static
def test_transformed_sources_compile_for_gfx942(tmp_path):
    from hipevolve.verifier.build import amd_static

    toolchain = amd_static.find_toolchain()
    if toolchain is None or "gfx942" not in toolchain.targets:
        pytest.skip("no AMD static toolchain for gfx942 (scripts/install_amd_toolchain.sh)")
    sources = produced()

    def compile_one(index_name: tuple[int, str]) -> list:  # raises AmdCompileError if it fails
        index, name = index_name
        return amd_static.analyze(sources[name], "gfx942", tmp_path / str(index), timeout_s=300)

    with ThreadPoolExecutor(max_workers=2) as pool:
        facts = dict(zip(sources, pool.map(compile_one, enumerate(sources)), strict=True))
    for name, kernels in facts.items():
        assert kernels, f"{name}: no kernels in the code object"
