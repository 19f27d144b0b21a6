"""Every shipped seed's declared tunable space builds, and a sample of it is correct on a GPU.

The offline search may propose any configuration a seed declares (`// @tunable`), so each one must
compile and stay correct on every case of the task. Spaces of at most FULL configurations are
built whole; larger ones as a fixed sample: the seed's own configuration, the two corners (every
tunable at its first value, every tunable at its last), a covering set (configuration i sets
each tunable to its value i, wrapping around: every declared value is built at least once) and
SAMPLE others drawn with a seeded rng for the values' interactions.

- nvcc for sm_90 through the HIP-to-CUDA layer, the command the cuda backend runs (marker slow);
- hipcc for gfx942, host and device, the rocm backend's own command (marker rocm_build: skipped
  without scripts/install_amd_toolchain.sh's toolchain, a failure under CI=true, as in
  tests/test_rocm_build.py);
- on a GPU (marker gpu): the seed, the corners, the covering set and GPU_SAMPLE - 3 random
  configurations per seed through verifier.pipeline.evaluate_many, every case of the task, must
  be ok.

problems/gated_delta_net/seeds/chunked is left to tests/test_gdn_seeds.py (its owner's tests):
a 1,300-line source that takes half a minute per nvcc build.
"""

from __future__ import annotations

import functools
import os
import random
from pathlib import Path

import pytest

from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.evolution.offline.tunables import (
    Configuration,
    configuration_key,
    configurations,
    current_configuration,
    parse_tunables,
    space_size,
    with_values,
)

ROOT = Path(__file__).resolve().parents[1]
SEEDS = tuple(
    sorted(
        p.parent
        for p in ROOT.glob("problems/*/seeds/*/kernel.hip")
        if p.parent != ROOT / "problems" / "gated_delta_net" / "seeds" / "chunked"
    )
)
FULL = 48  # spaces up to this size are built whole
SAMPLE = 6  # random configurations beyond the seed's own, the corners and the covering set
GPU_SAMPLE = 6  # configurations per seed through the whole pipeline on a GPU


def label(seed: Path) -> str:
    return f"{seed.parent.parent.name}/{seed.name}"


@functools.cache
def seed_candidate(seed: Path) -> Candidate:
    return load_candidate(seed)


def chosen(seed: Path, k: int = SAMPLE) -> list[Configuration]:
    """The whole space when small, else the seed's own configuration, the two corners, the
    covering set and k others drawn with an rng seeded by the seed's name (the same sample
    every run)."""
    tunables = parse_tunables(seed_candidate(seed).hip_source or "")
    every = list(configurations(tunables))
    if len(every) <= FULL and k >= SAMPLE:
        return every
    widest = max(len(t.values) for t in tunables)
    covering = [{t.name: t.values[i % len(t.values)] for t in tunables} for i in range(widest)]
    first = {t.name: t.values[0] for t in tunables}
    last = {t.name: t.values[-1] for t in tunables}
    picked: list[Configuration] = []
    for config in [current_configuration(tunables), first, last, *covering]:
        if config not in picked:
            picked.append(config)
    rest = [c for c in every if c not in picked]
    return picked + random.Random(label(seed)).sample(rest, min(k, len(rest)))


def sources(seed: Path, k: int = SAMPLE) -> dict[str, str]:
    source = seed_candidate(seed).hip_source or ""
    return {
        f"{label(seed)}@{configuration_key(c)}": with_values(source, c) for c in chosen(seed, k)
    }


def assert_all_build(built: dict[str, object]) -> None:
    failed = {name: r.log[-1500:] for name, r in built.items() if not r.ok}
    assert not failed, failed


# ----------------------------------------------------------------------------- the spaces


def test_every_seed_but_the_chunked_prefill_is_covered():
    names = {label(s) for s in SEEDS}
    assert {"softmax/tunable", "rmsnorm/tunable", "silu_and_mul/tunable",
            "gated_delta_net_decode/recurrent"} <= names  # fmt: skip


@pytest.mark.parametrize("seed", SEEDS, ids=label)
def test_seed_declares_a_space_a_200_evaluation_search_cannot_spend(seed):
    """The search's budget is 200 evaluations; a space smaller than that ends a run early."""
    tunables = parse_tunables(seed_candidate(seed).hip_source or "")
    assert space_size(tunables) >= 96, [(t.name, t.values) for t in tunables]


@pytest.mark.parametrize("seed", SEEDS, ids=label)
def test_sample_holds_the_seed_the_corners_every_declared_value_and_distinct_configurations(seed):
    tunables = parse_tunables(seed_candidate(seed).hip_source or "")
    picked = chosen(seed)
    keys = [configuration_key(c) for c in picked]
    assert len(set(keys)) == len(keys) >= min(SAMPLE + 3, space_size(tunables))
    assert current_configuration(tunables) in picked
    assert {t.name: t.values[0] for t in tunables} in picked
    assert {t.name: t.values[-1] for t in tunables} in picked
    for t in tunables:
        assert {c[t.name] for c in picked} == set(t.values), f"{t.name} not built at every value"
    assert picked == chosen(seed), "the sample must be the same every run"


# ----------------------------------------------------------------------------- CPU threads

# The decode seed's new launch choices on CPU threads (tests/test_gdn_seeds.py's HIP shim: one OS
# thread per GPU thread, 16 "SMs"), B = 2, HV = 4: 8 * 128 / BV blocks. Each row picks a path:
# NT_MANY = 512 at BV = 32 (512 threads a block); NT_MANY = 512 capped to 256 at BV = 16 (2 rows
# of the state per thread), past FEW_WAVES = 2 waves; NT_FEW = 256 within 2 waves at BV = 64.
DECODE_ON_CPU = [
    (32, {"BV": "32", "NT_MANY": "512", "FEW_WAVES": "1", "FAST_EXP": "1"}),
    (64, {"BV": "16", "NT_MANY": "512", "NT_FEW": "256", "FEW_WAVES": "2", "FAST_EXP": "0"}),
    (64, {"BV": "64", "NT_MANY": "128", "NT_FEW": "256", "FEW_WAVES": "2", "FAST_EXP": "1"}),
]


def test_decode_launch_choices_match_the_reference_on_cpu_threads(tmp_path):
    import torch
    from gdn_cpu_threads import cpu_library, launcher
    from gdn_seed_support import DECODE_SEED, GDN_DECODE, rel_rms

    torch.manual_seed(0)
    inputs = GDN_DECODE.get_inputs(B=2, H=2, HV=4)
    want_o, want_state = GDN_DECODE.Model()(*inputs)
    for i, (warp, config) in enumerate(DECODE_ON_CPU):
        source = with_values((DECODE_SEED / "kernel.hip").read_text(), config)
        # The shim has no __expf: the CPU build computes it exactly.
        source = source.replace(
            "#include <cstdint>",
            "#include <cstdint>\n#include <cmath>\n"
            "inline float __expf(float x) { return expf(x); }",
            1,
        )
        run = launcher(cpu_library(source, tmp_path / str(i), warp), "gdn_decode", 8, 3)
        o = torch.full((2, 1, 4, 128), float("nan"), dtype=torch.bfloat16)
        new_state = torch.full((2, 4, 128, 128), float("nan"))
        assert run(*(x.data_ptr() for x in (*inputs, o, new_state)), 2, 2, 4, None) == 0
        assert rel_rms(o, want_o) < 1e-4, config
        assert rel_rms(new_state, want_state) < 1e-6, config


# ----------------------------------------------------------------------------- builds


def nvcc_sm90():
    from hipevolve.verifier.build import nvidia
    from hipevolve.verifier.build.compile import Compiler

    nvcc = nvidia.find_nvcc()
    if nvcc is None or not (nvidia.include_dir() / "hip" / "hip_runtime.h").exists():
        pytest.skip("nvcc or the HIP-to-CUDA layer is missing")
    argv = nvidia.nvcc_command(nvcc, Path("kernel.hip"), Path("lib.so"), arch="sm_90")
    return Compiler(name="cuda", argv=tuple(argv), toolchain=nvidia.nvcc_version(nvcc))


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS, ids=label)
def test_sampled_configurations_build_with_nvcc_for_sm_90(seed, tmp_path):
    from hipevolve.verifier.build.compile import build_many

    wanted = sources(seed)
    built = build_many(list(wanted.values()), nvcc_sm90(), tmp_path)
    assert_all_build(dict(zip(wanted, built, strict=True)))


def hipcc_gfx942():
    from hipevolve.verifier.build.amd_static import find_toolchain
    from hipevolve.verifier.build.backends import rocm_command
    from hipevolve.verifier.build.compile import Compiler
    from hipevolve.verifier.build.rocm_build import find_hipcc

    toolchain, hipcc = find_toolchain(), find_hipcc()
    if toolchain is None or hipcc is None or "gfx942" not in toolchain.targets:
        message = ("the ROCm build toolchain is missing (hipcc and a clang for gfx942): run "
                   "scripts/install_amd_toolchain.sh")  # fmt: skip
        if os.environ.get("CI"):
            pytest.fail(message + " (CI ran setup.sh, which should have installed it)")
        pytest.skip(message)
    return Compiler(name="rocm", argv=tuple(rocm_command(hipcc, ("gfx942",))),
                    toolchain=f"{toolchain.version} rocm-build")  # fmt: skip


@pytest.mark.rocm_build
@pytest.mark.parametrize("seed", SEEDS, ids=label)
def test_sampled_configurations_build_with_hipcc_for_gfx942(seed, tmp_path):
    from hipevolve.verifier.build.compile import build_many

    wanted = sources(seed)
    built = build_many(list(wanted.values()), hipcc_gfx942(), tmp_path, timeout_s=900)
    assert_all_build(dict(zip(wanted, built, strict=True)))


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("seed", SEEDS, ids=label)
def test_sampled_configurations_are_ok_through_the_verifier_pipeline(seed, tmp_path):
    from hipevolve.core.config import VerifierSettings
    from hipevolve.problems import get_task
    from hipevolve.verifier.build.backends import gpu_backend
    from hipevolve.verifier.pipeline import evaluate_many

    task = get_task(seed.parent.parent.name)
    base = seed_candidate(seed)
    picked = chosen(seed, k=GPU_SAMPLE - 3)
    candidates = [
        base.model_copy(update={"hip_source": with_values(base.hip_source or "", c),
                                "name": configuration_key(c), "origin": None})
        for c in picked
    ]  # fmt: skip
    settings = VerifierSettings(cache_dir=tmp_path, trials=10)
    results = evaluate_many(candidates, task, settings, gpu_backend())
    for config, evaluation in zip(picked, results, strict=True):
        assert evaluation.ok, (configuration_key(config), evaluation.status, evaluation.message,
                               evaluation.mismatch, evaluation.compile_log)  # fmt: skip
        assert evaluation.fitness > 0
