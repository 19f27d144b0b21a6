"""The AMD static gate (verifier/build/rocm_limits.py): what the hardware cannot do is refused
before any GPU time, each with its reason in the verdict.

The parsing tests run everywhere; the hostile candidate goes through the verifier's own
pipeline.prepare (screen, static AMD compile, gate) with the static toolchain (marker
amd_static), as every backend's evaluation does before a GPU worker is asked for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hipevolve.core.candidate import load_candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import StaticFacts, Status
from hipevolve.problems import get_task
from hipevolve.verifier.build.amd_static import find_toolchain
from hipevolve.verifier.build.rocm_limits import (
    LDS_LIMIT,
    REGISTER_BUDGET,
    SCRATCH_LIMIT,
    constants,
    dynamic_lds,
    gate,
)

HOSTILE = Path(__file__).parent / "hostile" / "gate_lds_over_limit"
ROOT = Path(__file__).resolve().parents[1]


def facts(kernel="k(float*)", target="gfx942", **fields) -> StaticFacts:
    base = dict(vgprs=32, sgprs=16, occupancy=8, lds_bytes=0, scratch_bytes=0)
    return StaticFacts(kernel=kernel, target=target, **(base | fields))


def test_target_limits_are_the_documented_lds_sizes():
    assert LDS_LIMIT == {"gfx90a": 65536, "gfx942": 65536, "gfx950": 163840}


def test_dynamic_lds_is_read_from_constexpr_define_and_sizeof():
    source = """
#define ROWS 64
constexpr int kCols = 128;
constexpr size_t kBytes = ROWS * kCols * sizeof(float) + 256;
void f(hipStream_t s) {
    k<<<dim3(1), dim3(256), kBytes, s>>>(x);
    hipLaunchKernelGGL(HIP_KERNEL_NAME(k2<float, 4>), dim3(1), dim3(64), ROWS * sizeof(__half), s, x);
    k3<<<1, 64, n * sizeof(float), s>>>(x);
}
"""
    assert constants(source)["kBytes"] == 64 * 128 * 4 + 256
    got = [(d.kernel, d.bytes) for d in dynamic_lds(source)]
    assert got == [("k", 32768 + 256), ("k3", None), ("k2", 128)]


def test_a_local_size_assigned_once_is_computable_and_one_assigned_twice_is_not():
    source = """
void f(hipStream_t s, int n) {
    size_t once = 4u << 20;
    int twice = 1024;
    if (n > 4) twice = 1 << 20;
    k<<<1, 64, once, s>>>(x);
    k<<<1, 64, twice, s>>>(x);
}
"""
    assert [d.bytes for d in dynamic_lds(source)] == [4 << 20, None]


def test_the_gpu_lds_overflow_attack_is_now_refused_statically():
    """tests/hostile/dyn_gpu_lds_overflow asks 4 MiB through a local it never reassigns."""
    source = (HOSTILE.parent / "dyn_gpu_lds_overflow" / "kernel.hip").read_text()
    verdict = gate(source, [facts(kernel="needs_lds(unsigned short const*, unsigned short*, long)")])
    assert not verdict.passed and "4194304 bytes of dynamic LDS (too_much)" in verdict.reasons[0]


def test_launches_in_nvidia_only_branches_are_not_amd_launches():
    source = """
#if defined(__HIP_PLATFORM_NVIDIA__)
    big<<<1, 64, 200000, s>>>(x);
#else
    small<<<1, 64, 1024, s>>>(x);
#endif
"""
    assert [(d.kernel, d.bytes) for d in dynamic_lds(source)] == [("small", 1024)]


def test_dynamic_plus_static_lds_over_the_limit_is_refused_with_its_reason():
    source = "void f(hipStream_t s) {\n  k<<<1, 64, 65536 - 1024 + 1, s>>>(x);\n}\n"
    verdict = gate(source, [facts(lds_bytes=1024), facts(target="gfx950", lds_bytes=1024)])
    assert not verdict.passed
    assert verdict.reasons == (
        "k on gfx942: launched at kernel.hip:2 with 64513 bytes of dynamic LDS "
        "(65536 - 1024 + 1) + 1024 static = 65537, over the target's 65536 per workgroup",
    )  # gfx950 has 160 KiB: the same launch fits there


def test_registers_scratch_and_static_lds_over_budget_are_each_a_reason():
    too_much = facts(vgprs=512, agprs=8, scratch_bytes=SCRATCH_LIMIT + 4, spills_vgpr=90,
                     lds_bytes=(64 << 10) + 4)  # fmt: skip
    reasons = gate("", [too_much]).reasons
    assert len(reasons) == 3
    assert f"520, over the {REGISTER_BUDGET}-register budget" in reasons[0]
    assert "4100 bytes of scratch per lane (spills 90)" in reasons[1]
    assert "65540 bytes of static LDS per workgroup, over the target's 65536" in reasons[2]


def test_a_dynamic_size_not_computable_here_is_noted_not_refused():
    verdict = gate("void f(int n, hipStream_t s) { k<<<1, 64, n * 4, s>>>(x); }", [facts()])
    assert verdict.passed
    assert verdict.notes == ("dynamic LDS of k (kernel.hip:1: n * 4) is not computable "
                             "statically: unchecked",)  # fmt: skip


def test_shipped_sources_pass_the_gate_dynamic_part():
    for path in [*ROOT.glob("problems/*/seeds/*/kernel.hip"),
                 *ROOT.glob("prompts/examples/*/kernel.hip")]:  # fmt: skip
        verdict = gate(path.read_text(), [facts()])
        assert verdict.passed and not verdict.notes, (path, verdict)


@pytest.mark.amd_static
def test_lds_overflow_candidate_is_rejected_before_the_gpu_with_its_reason(tmp_path, capsys):
    """tests/hostile/gate_lds_over_limit: 256 bytes of dynamic LDS over gfx942's 64 KiB."""
    if find_toolchain() is None:
        pytest.skip("needs the AMD static toolchain (scripts/install_amd_toolchain.sh)")
    from hipevolve.verifier.pipeline import prepare

    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    prepared = prepare(load_candidate(HOSTILE), get_task("softmax"), settings, "static")
    verdict = prepared.done
    assert verdict is not None and prepared.library is None  # never handed to a GPU worker
    with capsys.disabled():
        print(f"\n{verdict.status}: {verdict.message}")
    assert verdict.status is Status.rejected
    assert verdict.message.startswith("over the AMD target's limits: needs_lds on gfx942: "
                                      "launched at kernel.hip:23 with 65792 bytes")  # fmt: skip
    assert "over the target's 65536 per workgroup" in verdict.message
    assert verdict.static  # the facts that back the reason are kept


@pytest.mark.gpu
@pytest.mark.amd_static
def test_on_a_gpu_backend_the_overflow_is_rejected_before_a_worker_is_asked_for(tmp_path):
    """The same candidate through the GPU backend this machine has (cuda or rocm): compiled for
    it, then refused by the gate; no library reaches a judge."""
    if find_toolchain() is None:
        pytest.skip("needs the AMD static toolchain (scripts/install_amd_toolchain.sh)")
    from hipevolve.verifier.build.backends import gpu_backend
    from hipevolve.verifier.pipeline import prepare

    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    prepared = prepare(load_candidate(HOSTILE), get_task("softmax"), settings, gpu_backend())
    assert prepared.done is not None and prepared.done.status is Status.rejected
    assert "65792 bytes of dynamic LDS" in prepared.done.message
