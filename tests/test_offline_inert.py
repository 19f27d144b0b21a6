"""Tunables inert on the run's card (evolution/offline/inert.py): every value of them preprocesses
to the same text, so no offline move changes them there, and a run on that card spends no build
on such a child. The GDN seed's AMD-only tunables on nvcc are the real case (a real compile);
the rest use a small kernel and a digest that reads only what a preprocessor would keep."""

from __future__ import annotations

import hashlib
import random
import re
import tempfile
from pathlib import Path

import pytest

from hipevolve.archive.store import Archive, canonical_json
from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.evolution.child import Child
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.offline.inert import inert_tunables, pinned
from hipevolve.evolution.offline.moves import jumps, mixes, steps
from hipevolve.evolution.offline.mutate import mutate
from hipevolve.evolution.offline.tunables import current_configuration, parse_tunables
from hipevolve.evolution.offline.tuner import propose as tpe_propose
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import get_task
from hipevolve.verifier.build.nvidia import find_nvcc
from hipevolve.verifier.evaluators import BaseEvaluator

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = get_task("softmax")

# C is read only on AMD: on any other platform its three values preprocess alike.
KERNEL = """\
#include <hip/hip_runtime.h>

// @tunable A: 1, 2, 3
#define A 1
// @tunable B: 1, 2
#define B 1
// @tunable C: 8, 16, 32
#define C 8

__global__ void k(float* __restrict__ y) {
#if defined(__HIP_PLATFORM_AMD__)
    y[threadIdx.x] = A * B * C;
#else
    y[threadIdx.x] = A * B;
#endif
}
"""


def nvidia_text(source: str) -> str:
    """What a preprocessor on NVIDIA keeps of KERNEL: the #define values read outside the AMD
    branch, and the code outside it (C's value is read only inside)."""
    defines = dict(re.findall(r"^#define (\w+) (\S+)$", source, re.M))
    body = re.sub(r"#if defined\(__HIP_PLATFORM_AMD__\).*?#else\n", "", source, flags=re.S)
    body = re.sub(r"^(//.*|#define .*)$", "", body, flags=re.M)
    for name in ("A", "B"):
        body = re.sub(rf"\b{name}\b", defines[name], body)
    return body


def nvidia_digests(sources: list[str]) -> list[str | None]:
    return [hashlib.sha256(nvidia_text(s).encode()).hexdigest() for s in sources]


def kernel(**values: str) -> Candidate:
    source = KERNEL
    for name, value in values.items():
        source = re.sub(rf"^#define {name} \S+$", f"#define {name} {value}", source, flags=re.M)
    return Candidate(format="native", hip_source=source, python_source="x = 1\n", name="k")


def moved(parent: Candidate, child: Candidate) -> set[str]:
    was = current_configuration(parse_tunables(parent.hip_source or ""))
    now = current_configuration(parse_tunables(child.hip_source or ""))
    return {name for name in was if was[name] != now[name]}


# ------------------------------------------------------------------- which tunables are inert


def test_a_tunable_read_only_on_another_platform_is_inert_and_the_others_are_not():
    assert inert_tunables([KERNEL, kernel(B="2").hip_source], nvidia_digests) == [
        frozenset({"C"}),
        frozenset({"C"}),
    ]


def test_a_tunable_alike_at_one_value_but_read_at_another_is_live():
    """C reads alike at 8 and 16 and changes the text at 32 (`#if C == 32` on this platform):
    every value is asked, so C stays live."""

    def digests(sources: list[str]) -> list[str | None]:
        out = []
        for source in sources:
            d = dict(re.findall(r"^#define (\w+) (\S+)$", source, re.M))
            out.append(f"{d['A']}-{d['B']}-{d['C'] if d['C'] == '32' else '*'}")
        return out

    assert inert_tunables([KERNEL], digests) == [frozenset()]
    assert inert_tunables([kernel(C="16").hip_source], digests) == [frozenset()]


def test_without_digests_nothing_is_inert():
    assert inert_tunables([KERNEL], lambda sources: [None] * len(sources)) == [frozenset()]
    assert inert_tunables(["__global__ void k() {}"], nvidia_digests) == [frozenset()]


def test_a_tunable_with_one_declared_value_is_never_asked_about():
    one = KERNEL.replace("// @tunable C: 8, 16, 32", "// @tunable C: 8")
    asked: list[str] = []

    def digests(sources: list[str]) -> list[str | None]:
        asked.extend(sources)
        return nvidia_digests(sources)

    assert inert_tunables([one], digests) == [frozenset()]
    assert len(asked) == 1 + 2  # the source, then one other value of A and of B


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed here")
def test_the_gdn_seeds_tunables_no_nvidia_card_runs_are_inert_on_an_nvidia_build(monkeypatch):
    """The real case, through the production evaluator's `preprocessed` (nvcc for sm_90, the
    cuda backend's own command line): MFMA_KSTEP and AMD_STATE_BF16 sit under
    __HIP_PLATFORM_AMD__, and BV sizes only the fused kernel, whose NVIDIA tensor-core build (the
    seed's) is a fallback with a fixed slice that an sm_90 card never launches; every other
    tunable of the seed changes what NVIDIA builds."""
    from hipevolve.core.config import load_settings
    from hipevolve.verifier.build import backends

    monkeypatch.setattr(backends, "_cuda_arch", lambda: "sm_90")
    from hipevolve.verifier.evaluators import PipelineEvaluator

    task = get_task("gated_delta_net")
    seed = load_candidate(ROOT / "problems" / "gated_delta_net" / "seeds" / "chunked")
    evaluator = PipelineEvaluator(task, load_settings().verifier, "cuda")
    (found,) = inert_tunables([seed.hip_source], evaluator.preprocessed)
    assert found == {"MFMA_KSTEP", "AMD_STATE_BF16", "BV"}


# ------------------------------------------------------------------ the moves keep them still


def test_no_move_changes_a_pinned_tunable_and_every_other_move_is_still_made():
    parent, other = kernel(), kernel(A="3", B="2", C="32")
    rng = random.Random(0)
    with pinned({parent.hip_source: frozenset({"C"})}):
        children = [*steps(parent, 1), *steps(parent, 2), *jumps(parent), *mixes(parent, other)]
        children += [mutate(parent, rng, changes=k) for k in (1, 2, 3) for _ in range(20)]
        asked = [tpe_propose(parent, [], rng, set()) for _ in range(10)]
    assert all("C" not in moved(parent, c) for c in children + [a for a in asked if a])
    # A and B: 2 + 1 single steps, 2 x 1 double steps, 3 x 2 - 1 jumps, one mix (A 3, B 1 / A 1, B 2)
    assert len(children) == 3 + 2 + 5 + 2 + 60
    assert {frozenset(moved(parent, c)) for c in children} >= {
        frozenset({"A"}), frozenset({"B"}), frozenset({"A", "B"})
    }  # fmt: skip
    # outside `pinned`, C moves again (another card may read it)
    assert any("C" in moved(parent, c) for c in steps(parent, 1))


def test_the_tuners_nearest_unseen_fallback_keeps_a_pinned_tunable_still():
    """TPE asks only seen configurations here (five of the six of A and B): its fallback, the
    nearest unseen configuration to its last ask, is the sixth, never a move in C."""
    parent = kernel()
    every = [kernel(A=a, B=b) for a in ("1", "2", "3") for b in ("1", "2")]
    for left in range(6):
        seen = {c.source_hash for i, c in enumerate(every) if i != left}
        with pinned({parent.hip_source: frozenset({"C"})}):
            child = tpe_propose(parent, [], random.Random(left), seen)
        assert child is not None and child.source_hash == every[left].source_hash, left


# -------------------------------------------------------------------------------- a whole run


class Preprocessing(BaseEvaluator):
    """A CPU stand-in that builds as a preprocessor on NVIDIA would: a candidate's digest is what
    nvidia_text keeps of it, and its score a fixed hash of that digest."""

    settings_key = canonical_json({"task": "softmax", "stand-in": "preprocessing"})
    toolchain = "stand-in"

    def __init__(self) -> None:
        self.evaluated: list[Candidate] = []

    def preprocessed(self, sources: list[str]) -> list[str | None]:
        return nvidia_digests(sources)

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        out = []
        for candidate in candidates:
            self.evaluated.append(candidate)
            text = nvidia_text(candidate.hip_source or "")
            speedup = 0.5 + hashlib.sha256(text.encode()).digest()[0] / 64
            cases = tuple(CaseResult(case=c.name, correct=True, time_us=100.0 / speedup,
                                     ref_time_us=100.0) for c in SOFTMAX.timed_cases)  # fmt: skip
            out.append(Evaluation(status=Status.ok, task="softmax", backend="stand-in",
                                  cases=cases))  # fmt: skip
        return out


def test_a_run_on_a_card_that_does_not_read_a_tunable_never_evaluates_a_move_in_it():
    """The kernel's six configurations of A and B that NVIDIA builds apart (C adds none there):
    the search evaluates exactly those and calls the space exhausted, never a C move."""
    evaluator = Preprocessing()
    seed = kernel()
    with (
        tempfile.TemporaryDirectory(prefix="hipevolve-inert-") as tmp,
        Archive.open(Path(tmp) / "run.db") as archive,
    ):
        summary = run_evolution(SOFTMAX, archive, EvolutionSettings(), evaluator,
                                first=[Child(candidate=seed, island=0)], budget=30,
                                seed=0)  # fmt: skip
    configs = {frozenset(current_configuration(parse_tunables(c.hip_source)).items())
               for c in evaluator.evaluated}  # fmt: skip
    assert all(dict(c)["C"] == "8" for c in configs), configs
    assert len(configs) == len(evaluator.evaluated) == 6
    assert summary.reason == "exhausted"
