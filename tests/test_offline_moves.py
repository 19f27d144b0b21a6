"""The offline mutator's moves (evolution/offline/moves.py) and the policy that draws them
(evolution/offline/policy.py): steps in 1 to 3 tunables, crossover of distinct configurations,
restarts from other elites, and an honest "exhausted".

Real seeds (softmax's tunable seed, the GDN decode seed) and a tiny two-tunable kernel whose whole
space is known; real run_evolution with a temporary SQLite archive and a CPU stand-in evaluator
that scores any configuration (a fixed hash of its values) for the run-level checks.
"""

from __future__ import annotations

import functools
import hashlib
import random
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive, canonical_json
from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.evolution.child import Proposal
from hipevolve.evolution.islands import Elite, EvolutionSettings, Island
from hipevolve.evolution.offline.moves import mixes, neighbourhood, steps
from hipevolve.evolution.offline.policy import propose, rescue
from hipevolve.evolution.offline.transforms import CATALOGUE
from hipevolve.evolution.offline.tunables import (
    configuration_key,
    configurations,
    current_configuration,
    parse_tunables,
    space_size,
)
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import get_task
from hipevolve.verifier.evaluators import BaseEvaluator

SOFTMAX = get_task("softmax")


@functools.cache
def softmax_seed() -> Candidate:
    return load_candidate(SOFTMAX.seeds[0])


def config_of(candidate: Candidate) -> dict[str, str]:
    return current_configuration(parse_tunables(candidate.hip_source or ""))


def differing(a: dict[str, str], b: dict[str, str]) -> set[str]:
    return {name for name in a if a[name] != b[name]}


# A kernel no catalogue transform applies to (no loops, no vector loads, no restrict to add):
# its whole reachable space is the 3 x 2 = 6 configurations of its tunables.
TINY = """\
#include <hip/hip_runtime.h>

// @tunable A: 1, 2, 3
#define A 1
// @tunable B: 1, 2
#define B 1

__global__ void tiny_kernel(float* __restrict__ y) { y[threadIdx.x] = A * B; }

extern "C" hipError_t tiny(float* y, hipStream_t stream) {
    hipLaunchKernelGGL(tiny_kernel, dim3(1), dim3(64), 0, stream, y);
    return hipGetLastError();
}
"""


def tiny_seed() -> Candidate:
    return Candidate(format="native", hip_source=TINY, python_source="x = 1\n", name="tiny")


# ----------------------------------------------------------------------------- moves


def test_a_step_of_k_changes_exactly_k_tunables_to_declared_values():
    seed = softmax_seed()
    own = config_of(seed)
    declared = {t.name: t.values for t in parse_tunables(seed.hip_source)}
    for k in (1, 2, 3):
        children = list(steps(seed, k, random.Random(k)))
        assert children
        for child in children[:200]:
            config = config_of(child)
            assert len(differing(config, own)) == k
            assert all(config[n] in declared[n] for n in config)
            assert child.python_source == seed.python_source


def test_steps_of_one_cover_every_other_value_of_every_tunable():
    seed = softmax_seed()
    tunables = parse_tunables(seed.hip_source)
    want = sum(len(t.values) - 1 for t in tunables)
    assert len({child.source_hash for child in steps(seed, 1)}) == want


def test_a_mix_takes_each_tunable_from_a_parent_and_copies_neither():
    seed = softmax_seed()
    own = config_of(seed)
    other = next(c for c in steps(seed, 3, random.Random(0)))
    theirs = config_of(other)
    children = list(mixes(seed, other))
    assert len(children) == 2**3 - 2
    for child in children:
        config = config_of(child)
        assert config not in (own, theirs)
        assert all(config[n] in (own[n], theirs[n]) for n in config)


def test_parents_one_tunable_apart_have_no_mix():
    seed = softmax_seed()
    assert list(mixes(seed, next(steps(seed, 1)))) == []


def test_the_neighbourhood_reaches_every_configuration_within_three_steps():
    seed = softmax_seed()
    own = config_of(seed)
    reached = {configuration_key(config_of(c)) for c in neighbourhood(seed)}
    within = {configuration_key(c) for c in configurations(parse_tunables(seed.hip_source))
              if 1 <= len(differing(c, own)) <= 3}  # fmt: skip
    assert within <= reached


# ----------------------------------------------------------------------------- the policy


def elite(cid: int, candidate: Candidate, fitness: float) -> Elite:
    return Elite(candidate_id=cid, fitness=fitness, source_hash=candidate.source_hash,
                 cell=(str(cid),))  # fmt: skip


def island_of(sources: dict[int, Candidate]) -> Island:
    elites = [elite(cid, c, 1.0 + cid / 10) for cid, c in sources.items()]
    return Island(id=0, grid={e.cell: e for e in elites})


def proposal_for(island: Island, parent: int) -> Proposal:
    elites = {e.candidate_id: e for e in island.grid.values()}
    others = tuple(e for cid, e in sorted(elites.items()) if cid != parent)
    return Proposal(island=0, parent=elites[parent], inspirations=others[:3])


def two_elites() -> dict[int, Candidate]:
    seed = softmax_seed()
    return {1: seed, 2: next(steps(seed, 3, random.Random(7)))}


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 30))
def test_proposals_never_repeat_seen_code(seed, count):
    sources = two_elites()
    island = island_of(sources)
    seen = {c.source_hash for c in sources.values()}
    rng = random.Random(seed)
    for i in range(count):
        child = propose(proposal_for(island, 1 + i % 2), sources, rng, seen)
        assert child is not None
        assert child.candidate.source_hash not in seen
        seen.add(child.candidate.source_hash)


def proposal_stream(seed: int, count: int) -> list[tuple[str, tuple[int, ...], str]]:
    sources = two_elites()
    island = island_of(sources)
    seen = {c.source_hash for c in sources.values()}
    rng = random.Random(seed)
    out = []
    for i in range(count):
        child = propose(proposal_for(island, 1 + i % 2), sources, rng, seen)
        seen.add(child.candidate.source_hash)
        out.append((child.candidate.source_hash, child.parents, child.kind))
    return out


def test_proposals_are_deterministic_for_a_seed():
    assert proposal_stream(11, 40) == proposal_stream(11, 40)
    assert proposal_stream(11, 40) != proposal_stream(12, 40)


def test_the_policy_draws_multi_tunable_steps_and_crossovers():
    sources = two_elites()
    configs = {cid: config_of(c) for cid, c in sources.items()}
    island = island_of(sources)
    seen = {c.source_hash for c in sources.values()}
    rng = random.Random(3)
    kinds, widest = set(), 0
    for i in range(60):
        child = propose(proposal_for(island, 1 + i % 2), sources, rng, seen)
        seen.add(child.candidate.source_hash)
        kinds.add(child.kind)
        if child.kind == "mutation":
            moved = differing(config_of(child.candidate), configs[child.parents[0]])
            widest = max(widest, len(moved))
    assert kinds == {"mutation", "crossover"}
    assert widest >= 2


def test_a_crossover_child_records_both_parents_and_mixes_their_values():
    sources = two_elites()
    configs = {cid: config_of(c) for cid, c in sources.items()}
    island = island_of(sources)
    seen = {c.source_hash for c in sources.values()}
    rng = random.Random(5)
    found = 0
    for i in range(80):
        child = propose(proposal_for(island, 1 + i % 2), sources, rng, seen)
        seen.add(child.candidate.source_hash)
        if child.kind != "crossover":
            continue
        found += 1
        first, second = child.parents
        assert {first, second} == {1, 2}
        config = config_of(child.candidate)
        assert config not in (configs[1], configs[2])
        assert all(config[n] in (configs[1][n], configs[2][n]) for n in config)
        assert first not in child.inspirations and second not in child.inspirations
    assert found >= 3  # two parents 3 tunables apart have 6 mixes in all


def test_every_offline_child_records_the_move_it_made_as_its_idea():
    """The idea names the parent (both, for a crossover) and exactly the tunables that moved,
    with their old and new values, or the catalogue transform applied: never "no idea"."""
    sources = two_elites()
    island = island_of(sources)
    seen = {c.source_hash for c in sources.values()}
    rng = random.Random(11)
    said = {"tunables": 0, "transform": 0, "crossover": 0}
    for i in range(80):
        child = propose(proposal_for(island, 1 + i % 2), sources, rng, seen)
        seen.add(child.candidate.source_hash)
        idea, first = child.attempt.idea, child.parents[0]
        if child.kind == "crossover":
            said["crossover"] += 1
            assert idea.startswith(f"offline mutator: crossover of candidates {first} and "
                                   f"{child.parents[1]}: tunables ")  # fmt: skip
        else:
            assert idea.startswith(f"offline mutator on candidate {first}: "), idea
        move = idea.split(": ")[-1]
        if move.startswith("transform "):
            said["transform"] += 1
            name = move.removeprefix("transform ")
            assert name in {t.name for t in CATALOGUE}
            assert child.candidate.name.endswith(f"@{name}")
            continue
        said["tunables"] += 1
        was, now = config_of(sources[first]), config_of(child.candidate)
        told = dict(m.rsplit(" ", 1) for m in move.removeprefix("tunables ").split(", "))
        assert set(told) == differing(now, was)
        assert all(told[k] == f"{was[k]}->{now[k]}" for k in told)
    assert all(said.values()), said


def test_a_spent_parent_restarts_from_another_elite():
    """Everything one move from the parent is seen: the child comes from the inspiration."""
    seed = tiny_seed()
    other = next(steps(seed, 1))  # A=2
    sources = {1: seed, 2: other}
    island = island_of(sources)
    # Seen: everything reachable from the parent alone (its neighbourhood: the whole space).
    seen = {c.source_hash for c in neighbourhood(seed)} | {seed.source_hash}
    assert propose(proposal_for(island, 1), sources, random.Random(0), seen) is None
    unseen_from_other = Candidate(format="native", python_source="x = 1\n", name="t",
                                  hip_source=TINY.replace("#define B 1", "#define B 2")
                                  .replace("#define A 1", "#define A 2"))  # fmt: skip
    seen.discard(unseen_from_other.source_hash)
    child = propose(proposal_for(island, 1), sources, random.Random(0), seen)
    assert child is not None and child.candidate.source_hash == unseen_from_other.source_hash
    assert child.parents[0] in (1, 2) and child.candidate.source_hash not in seen


def test_rescue_finds_nothing_only_when_every_configuration_is_seen():
    seed = tiny_seed()
    every = [c for c in configurations(parse_tunables(TINY))]
    assert space_size(parse_tunables(TINY)) == len(every) == 6
    sources = {1: seed}
    island = island_of(sources)
    seen = {seed.source_hash}
    rng = random.Random(0)
    for _ in range(5):
        child = propose(proposal_for(island, 1), sources, rng, seen) or rescue(
            [island], sources, seen
        )
        assert child is not None
        seen.add(child.candidate.source_hash)
    assert propose(proposal_for(island, 1), sources, rng, seen) is None
    assert rescue([island], sources, seen) is None


# ----------------------------------------------------------------------------- whole runs


class ConfigScore(BaseEvaluator):
    """A CPU stand-in for the GPU evaluator: any native candidate is ok, its speedup a fixed
    function of its tunable values (a hash, so the landscape is rugged), two timed cases."""

    settings_key = canonical_json({"task": "softmax", "stand-in": "config-score"})
    toolchain = "stand-in"

    def __init__(self) -> None:
        self.evaluated: list[str] = []

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        out = []
        for candidate in candidates:
            self.evaluated.append(candidate.source_hash)
            digest = hashlib.sha256(candidate.source_hash.encode()).digest()
            speedup = 0.5 + digest[0] / 64
            cases = tuple(CaseResult(case=c.name, correct=True, time_us=100.0 / speedup,
                                     ref_time_us=100.0) for c in SOFTMAX.timed_cases)  # fmt: skip
            out.append(Evaluation(status=Status.ok, task="softmax", backend="stand-in",
                                  cases=cases))  # fmt: skip
        return out


def softmax_run(seed: int, budget: int):
    """(stop reason, source hashes evaluated in order, the run's lineage edges)."""
    evaluator = ConfigScore()
    with (
        tempfile.TemporaryDirectory(prefix="hipevolve-moves-") as tmp,
        Archive.open(Path(tmp) / "run.db") as archive,
    ):
        summary = run_evolution(SOFTMAX, archive, EvolutionSettings(), evaluator,
                                first=first_candidates(SOFTMAX), budget=budget, seed=seed)  # fmt: skip
        edges = archive.lineage_edges(summary.run)
    return summary.reason, evaluator.evaluated, edges


def test_a_200_evaluation_run_on_the_softmax_seed_spends_its_budget():
    reason, evaluated, edges = softmax_run(seed=0, budget=200)
    assert len(evaluated) >= 190, (reason, len(evaluated))
    assert len(set(evaluated)) == len(evaluated), "an evaluation was spent on seen code"
    assert reason == "budget"
    crossed = {}
    for edge in edges:
        if edge.kind == "crossover":
            crossed.setdefault(edge.child, set()).add(edge.parent)
    assert crossed and all(len(parents) == 2 for parents in crossed.values()), crossed


def test_an_offline_run_is_deterministic_for_its_seed():
    first = softmax_run(seed=4, budget=40)
    assert first[:2] == softmax_run(seed=4, budget=40)[:2]


FOUR = """\
#include <hip/hip_runtime.h>

// @tunable A: 1, 2
#define A 1
// @tunable B: 1, 2
#define B 1
// @tunable C: 1, 2
#define C 1
// @tunable D: 1, 2
#define D 1

__global__ void four_kernel(float* __restrict__ y) { y[threadIdx.x] = A * B * C * D; }
"""


def test_rescue_jumps_to_a_configuration_no_step_or_crossover_reaches():
    """Everything within three steps of the only elite is seen; the far corner (all four
    tunables changed) is found by the last resort, a jump into the declared space."""
    seed = Candidate(format="native", hip_source=FOUR, python_source="x = 1\n", name="four")
    sources = {1: seed}
    island = island_of(sources)
    seen = {c.source_hash for c in neighbourhood(seed)} | {seed.source_hash}
    assert len(seen) == 2**4 - 1
    child = rescue([island], sources, seen)
    assert child is not None and child.parents == (1,)
    assert config_of(child.candidate) == {"A": "2", "B": "2", "C": "2", "D": "2"}
    seen.add(child.candidate.source_hash)
    assert rescue([island], sources, seen) is None
    assert propose(proposal_for(island, 1), sources, random.Random(0), seen) is None
