"""The GDN seeds on a GPU (marked gpu): each built the way the verifier builds it, bound, and
checked against the task's reference on every small case, the timed cases, a long ragged
grouped-heads case, and at every value of every tunable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gdn_seed_support import (
    DECODE,
    PREFILL,
    PREFILL_SEED,
    SEEDS,
    import_model,
    rel_rms,
    source_of,
    tunables,
    with_define,
)

from hipevolve.core.reference import as_outputs, build_inputs, build_model, load_module


@pytest.fixture(scope="module")
def gpu_compiler():
    from hipevolve.verifier.build.backends import compiler_for, gpu_backend

    return compiler_for(gpu_backend())


@pytest.fixture(scope="module")
def gpu_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gdn-seed-builds")  # one build per distinct source


def bound_model(seed: Path, source: str, compiler, cache: Path):
    """ModelNew of `seed` with `source` built the way the verifier builds it, and bound."""
    from hipevolve.runtime import kernels
    from hipevolve.verifier.build.compile import build

    result = build(source, compiler, cache)
    assert result.ok, result.log
    kernels.bind(result.library, source)
    return import_model(seed, "gpu").ModelNew()


def check_case(task, model, inputs: dict, seed: int) -> None:
    reference = load_module(task.reference)
    args = build_inputs(reference, inputs, "cuda", seed)
    kept = [a.clone() for a in args]
    with torch.no_grad():
        want = as_outputs(build_model(reference, {}, "cuda", seed)(*args))
        got = as_outputs(model(*args))
    torch.cuda.synchronize()
    limit = task.tolerance.max_rel_rms
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype and g.device == w.device
        assert torch.isfinite(g).all()
        assert rel_rms(g, w) <= limit, f"rel RMS {rel_rms(g, w):.2e} > {limit:g}"
    for a, k in zip(args, kept, strict=True):
        assert torch.equal(a, k), "an input was modified"


def _cases(task, timed: bool):
    return [c for c in task.cases if (c.timed if timed else c.small)]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["prefill", "decode"])
def test_seed_matches_reference_on_every_small_case(kind, gpu_compiler, gpu_cache):
    task, seed = SEEDS[kind]
    model = bound_model(seed, source_of(seed), gpu_compiler, gpu_cache)
    for case in _cases(task, timed=False):
        for s in range(task.check_seeds):
            check_case(task, model, case.inputs, seed=s)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kind,case",
    [("prefill", c.name) for c in _cases(PREFILL, True)]
    + [("decode", c.name) for c in _cases(DECODE, True)],
)
def test_seed_matches_reference_on_timed_case(kind, case, gpu_compiler, gpu_cache):
    task, seed = SEEDS[kind]
    model = bound_model(seed, source_of(seed), gpu_compiler, gpu_cache)
    check_case(task, model, task.case(case).inputs, seed=0)


@pytest.mark.gpu
def test_prefill_seed_matches_reference_on_long_ragged_grouped_heads(gpu_compiler, gpu_cache):
    model = bound_model(PREFILL_SEED, source_of(PREFILL_SEED), gpu_compiler, gpu_cache)
    inputs = {"B": 2, "T": 1000, "H": 4, "HV": 8, "initial_state": "random"}  # T % 64 = 40
    check_case(PREFILL, model, inputs, seed=5)


# A prefill tunable that only one code path reads is varied with that path chosen.
PREFILL_PATH_OF_TUNABLE = {
    "BV": ("MATRIX_CORES", 0),
    "TC_BV": ("MATRIX_CORES", 1),
    "U_BF16": ("MATRIX_CORES", 1),
    "TC_STAGES": ("MATRIX_CORES", 1),
    "TC_PREP_RUN": ("MATRIX_CORES", 1),
    "TC_RS": ("MATRIX_CORES", 1),
    "TC_SOLVE": ("MATRIX_CORES", 1),
}


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["prefill", "decode"])
def test_seed_is_correct_at_every_tunable_value(kind, gpu_compiler, gpu_cache):
    task, seed = SEEDS[kind]
    source = source_of(seed)
    for name, values in tunables(source).items():
        for value in values:
            variant = with_define(source, name, value)
            if kind == "prefill" and name in PREFILL_PATH_OF_TUNABLE:
                variant = with_define(variant, *PREFILL_PATH_OF_TUNABLE[name])
            model = bound_model(seed, variant, gpu_compiler, gpu_cache)
            for case in _cases(task, timed=False):
                check_case(task, model, case.inputs, seed=1)
