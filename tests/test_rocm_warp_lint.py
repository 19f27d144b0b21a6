"""The warp-32 lint (verifier/screen/warp_width.py): HIP that assumes a 32-lane warp is recorded
as a warning with its fix (warpSize is 64 on CDNA), never in NVIDIA-only branches, and never on
the shipped seeds, prompt examples or lowered candidates."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipevolve.agents.lowering.lower import lower
from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.problems import get_task
from hipevolve.verifier.screen.platform_guards import condition_on_amd, nvidia_only_lines
from hipevolve.verifier.screen.screening import CHECKS, screen

ROOT = Path(__file__).resolve().parents[1]
MODEL = """\
import torch
import torch.nn as nn

from hipevolve.runtime import kernels


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        kernels.reduce(x, y, x.numel())
        return y
"""
HEAD = "#include <hip/hip_runtime.h>\n#include <cstdint>\n"
LAUNCHER = """
extern "C" hipError_t reduce(const float* x, float* y, int64_t n, hipStream_t stream) {
    k<<<1, 256, 0, stream>>>(x, y);
    return hipGetLastError();
}
"""


def warp_hits(body: str) -> list[str]:
    candidate = Candidate(format="native", hip_source=HEAD + body + LAUNCHER, python_source=MODEL,
                          name="warp")
    screening = screen(candidate)
    assert screening.passed  # a warning, never a rejection
    return [f for f in screening.flags if f.startswith("warning:warp-32")]


def test_warp_lint_is_a_registered_warning():
    assert [c.tier for c in CHECKS if c.name == "warp-32"] == ["warning"]


@pytest.mark.parametrize(
    ("code", "what"),
    [
        ("v += __shfl_xor_sync(__activemask(), v, 1, 32);", "width 32"),
        ("v += __shfl_down(v, 1, 32);", "width 32"),
        ("v += __shfl_xor_sync(0xffffffff, v, 1);", "0xffffffff as a full-warp mask"),
        ("int c = __popc(__ballot(v > 0));", "a ballot is 64 bits"),
        ("unsigned m = __ballot(v > 0);", "a ballot is 64 bits"),
        ("int lane = threadIdx.x & 31;", "a lane index over 32 lanes"),
        ("int lane = threadIdx.x % 32;", "a lane index over 32 lanes"),
        ("int warp = threadIdx.x / 32;", "a warp index for 32-lane warps"),
        ("int warp = tid >> 5;", "a warp index for 32-lane warps"),
        ("for (int o = 16; o > 0; o >>= 1) v += __shfl_xor(v, o);", "starting at offset 16"),
    ],
)
def test_each_32_lane_idiom_is_flagged_with_the_fix(code, what):
    body = f"__global__ void k(const float* x, float* y) {{\n    float v = x[threadIdx.x];\n" \
           f"    int tid = threadIdx.x;\n    {code}\n    y[0] = v;\n}}\n"  # fmt: skip
    hits = warp_hits(body)
    assert len(hits) == 1, hits
    assert what in hits[0] and "warpSize is 64 on CDNA" in hits[0]
    assert "(kernel.hip:6)" in hits[0]  # the line of the idiom itself


def test_warp_size_define_of_32_is_flagged_but_a_minimum_is_not():
    assert warp_hits("#define WARP_SIZE 32\n__global__ void k(const float* x, float* y) {}\n")
    assert not warp_hits("constexpr int kMinWarp = 32;\n__global__ void k(const float*, float*) {}\n")


def test_portable_code_reading_warpsize_is_clean():
    body = """__global__ void k(const float* x, float* y) {
    float v = x[threadIdx.x];
    for (int o = warpSize / 2; o > 0; o >>= 1) v += __shfl_xor(v, o);
    int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
    if (lane == 0) y[warp] = v;
}
"""
    assert warp_hits(body) == []


def test_nvidia_only_branches_may_assume_32_lanes():
    body = """__global__ void k(const float* x, float* y) {
    float v = x[threadIdx.x];
#if defined(__HIP_PLATFORM_NVIDIA__)
    v += __shfl_xor_sync(0xffffffff, v, 16, 32);
#elif defined(__HIP_PLATFORM_AMD__)
    v += __shfl_xor(v, 32);
#else
    int lane = threadIdx.x & 31;
#endif
#ifdef __CUDA_ARCH__
    int w = threadIdx.x / 32;
#endif
    y[0] = v;
}
"""
    assert warp_hits(body) == []


def test_an_amd_branch_that_assumes_32_lanes_is_flagged():
    body = """__global__ void k(const float* x, float* y) {
    float v = x[threadIdx.x];
#ifndef __HIP_PLATFORM_NVIDIA__
    int lane = threadIdx.x & 31;
#endif
    y[lane] = v;
}
"""
    assert len(warp_hits(body)) == 1


def test_platform_conditions_evaluate_in_three_values():
    assert condition_on_amd("defined(__HIP_PLATFORM_NVIDIA__) && MATRIX_CORES") is False
    assert condition_on_amd("!defined(__HIP_PLATFORM_AMD__)") is False
    assert condition_on_amd("defined(__HIP_PLATFORM_AMD__) || X") is True
    assert condition_on_amd("defined(__gfx942__)") is None  # per device pass: both kept
    assert condition_on_amd("X == 1", {"X": {0, 2}}) is False
    assert condition_on_amd("X == 2", {"X": {0, 2}}) is None


def test_a_macro_defined_only_for_nvidia_decides_later_branches():
    source = """#if defined(__HIP_PLATFORM_NVIDIA__)
#define MC 1
#elif defined(__gfx942__)
#define MC 2
#else
#define MC 0
#endif
#if MC == 1
int nvidia_only;
#else
int everywhere;
#endif
"""
    assert 9 in nvidia_only_lines(source) and 11 not in nvidia_only_lines(source)


def test_shipped_seeds_examples_and_lowered_candidates_do_not_trip_it():
    paths = [*ROOT.glob("problems/*/seeds/*"), *ROOT.glob("prompts/examples/*")]
    candidates = {str(p): load_candidate(p) for p in paths}
    for name in ("softmax", "layernorm", "gelu", "silu_and_mul", "gemm_bf16", "rmsnorm"):
        candidates[f"lowered {name}"] = lower(get_task(name))
    flagged = {n: [f for f in screen(c).flags if "warp-32" in f] for n, c in candidates.items()}
    assert {n: f for n, f in flagged.items() if f} == {}
    assert len(candidates) >= 12
