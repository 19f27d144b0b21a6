"""The tunable sweep's sampler (evolution/offline/tuner.py): Optuna's TPE told the run's history.

Real softmax seed (1,440 configurations), real Optuna; no GPU.
"""

from __future__ import annotations

import functools
import random

from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.evolution.offline import tuner
from hipevolve.evolution.offline.moves import at, tunables_of
from hipevolve.evolution.offline.tunables import (
    configuration_key,
    configurations,
    current_configuration,
    parse_tunables,
)
from hipevolve.problems import get_task


@functools.cache
def softmax_seed() -> Candidate:
    return load_candidate(get_task("softmax").seeds[0])


def config_of(candidate: Candidate) -> dict[str, str]:
    return current_configuration(parse_tunables(candidate.hip_source or ""))


def space() -> list[dict[str, str]]:
    return list(configurations(tunables_of(softmax_seed())))


def landscape(config: dict[str, str]) -> float:
    """A separable landscape with its optimum at every tunable's last declared value."""
    tunables = tunables_of(softmax_seed())
    return sum(t.values.index(config[t.name]) / max(1, len(t.values) - 1) for t in tunables) + 1


def at_config(config: dict[str, str]) -> Candidate:
    seed = softmax_seed()
    return at(seed, tunables_of(seed), config)


def test_every_configuration_of_one_kernel_is_one_family_and_other_code_is_not():
    seed = softmax_seed()
    others = random.Random(0).sample(space(), 5)
    assert {tuner.family(at_config(c)) for c in others} == {tuner.family(seed)}
    edited = seed.model_copy(update={"hip_source": (seed.hip_source or "") + "\n// edited\n"})
    assert tuner.family(edited) != tuner.family(seed)
    no_tunables = seed.model_copy(update={"hip_source": "__global__ void k() {}\n"})
    assert tuner.family(no_tunables) is None


def test_the_tuner_proposes_only_unseen_configurations_of_the_parents_space():
    seed = softmax_seed()
    rng = random.Random(3)
    history = [(at_config(c), landscape(c)) for c in random.Random(1).sample(space(), 40)]
    seen = {c.source_hash for c, _ in history} | {seed.source_hash}
    keys = {configuration_key(c) for c in space()}
    for _ in range(10):
        child = tuner.propose(seed, history, rng, seen)
        assert child is not None and child.source_hash not in seen
        assert configuration_key(config_of(child)) in keys
        assert child.python_source == seed.python_source
        seen.add(child.source_hash)


def test_the_tuner_is_deterministic_for_the_rng():
    seed = softmax_seed()
    history = [(at_config(c), landscape(c)) for c in random.Random(2).sample(space(), 20)]
    seen = {c.source_hash for c, _ in history}
    first = tuner.propose(seed, history, random.Random(7), seen)
    again = tuner.propose(seed, history, random.Random(7), seen)
    assert first is not None and again is not None and first.source_hash == again.source_hash


def test_the_history_steers_the_tuner_toward_the_better_region():
    """Told 60 configurations of a separable landscape (1 to 7), TPE's next 20 proposals score
    clearly higher on average than 20 random unseen configurations (measured: 5.2 against 3.6;
    the same draws on every run of the test)."""
    seed = softmax_seed()
    rng = random.Random(11)
    told = random.Random(5).sample(space(), 60)
    history = [(at_config(c), landscape(c)) for c in told]
    seen = {c.source_hash for c, _ in history}
    proposed = []
    for _ in range(20):
        child = tuner.propose(seed, history, rng, seen)
        assert child is not None
        seen.add(child.source_hash)
        proposed.append(landscape(config_of(child)))
    told_keys = {configuration_key(c) for c in told}
    unseen = [c for c in space() if configuration_key(c) not in told_keys]
    randomly = [landscape(c) for c in random.Random(6).sample(unseen, 20)]
    assert sum(proposed) / 20 > sum(randomly) / 20 + 1.0


def test_candidates_of_another_kernel_in_the_history_are_not_told():
    seed = softmax_seed()
    other = seed.model_copy(update={"hip_source": (seed.hip_source or "") + "\n// other\n"})
    history = [(other, 1.0)]  # another family only: TPE starts from nothing, still proposes
    child = tuner.propose(seed, history, random.Random(0), {seed.source_hash})
    assert child is not None and tuner.family(child) == tuner.family(seed)
