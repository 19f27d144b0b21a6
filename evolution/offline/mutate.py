"""The offline mutator's edits: mutate a candidate's declared tunables, cross two parents'
tunables, apply a catalogue transform. Each returns a new native Candidate (kernel.hip edited,
model.py the first parent's) or None when the edit has nothing to change.

Randomness comes only from the `random.Random` passed in, so an offline run is deterministic for
its seed. Parents with malformed `@tunable` declarations raise TunableError (the verifier turns
that into a parse_error, so such a parent never reaches the archive's elites).
"""

from __future__ import annotations

import random
import re

from hipevolve.core.candidate import Candidate
from hipevolve.evolution.offline.inert import pin
from hipevolve.evolution.offline.transforms import Transform
from hipevolve.evolution.offline.tunables import (
    Configuration,
    Tunable,
    configuration_key,
    current_configuration,
    parse_tunables,
    with_values,
)


def _tunables(candidate: Candidate) -> list[Tunable]:
    if candidate.format != "native" or candidate.hip_source is None:
        raise ValueError(f"{candidate.name}: only native candidates have kernel.hip tunables")
    return pin(candidate.hip_source, parse_tunables(candidate.hip_source))


def _child(parent: Candidate, source: str, tag: str) -> Candidate:
    # One suffix, replaced each generation, so names stay short however deep the lineage
    # (the lineage itself lives in the archive).
    base = parent.name.split("@", 1)[0]
    return Candidate(
        format="native",
        hip_source=source,
        python_source=parent.python_source,
        name=f"{base}@{re.sub(r'[^A-Za-z0-9_.=-]', '_', tag)}",
    )


def _new_value(tunable: Tunable, rng: random.Random, neighbour_p: float) -> str:
    index = tunable.values.index(tunable.current)
    if rng.random() < neighbour_p:
        steps = [s for s in (index - 1, index + 1) if 0 <= s < len(tunable.values)]
        return tunable.values[rng.choice(steps)]
    return rng.choice([v for v in tunable.values if v != tunable.current])


def mutate(
    parent: Candidate, rng: random.Random, changes: int = 1, neighbour_p: float = 0.5
) -> Candidate | None:
    """`parent` with `changes` of its tunables (fewer if it has fewer) set to another declared
    value: a neighbour in the declared order with probability `neighbour_p` (small steps refine a
    good parent), else any other declared value (jumps leave a local optimum).

    None when no tunable has a second value to take.
    """
    if changes < 1:
        raise ValueError(f"changes must be at least 1, got {changes}")
    tunables = _tunables(parent)
    movable = [t for t in tunables if len(t.values) > 1]
    if not movable:
        return None
    chosen = rng.sample(movable, min(changes, len(movable)))
    values = {t.name: _new_value(t, rng, neighbour_p) for t in chosen}
    source = with_values(parent.hip_source or "", values)
    return _child(parent, source, configuration_key(current_configuration(tunables) | values))


def crossover(first: Candidate, second: Candidate, rng: random.Random) -> Candidate | None:
    """A child of `first`'s source whose tunables shared with `second` each take either parent's
    value with equal odds (uniform crossover); the rest keep `first`'s values. A value of
    `second`'s that `first` does not declare is never taken (the child must stay in `first`'s
    declared space). The child may equal a parent: the search's duplicate check drops it.

    None when the two share no tunable name.
    """
    declared = _tunables(first)
    mine = {t.name: t for t in declared}
    theirs = current_configuration(_tunables(second))
    shared = [name for name in mine if name in theirs]
    if not shared:
        return None
    values: Configuration = {}
    for name in shared:
        other = theirs[name]
        take_other = rng.random() < 0.5 and other in mine[name].values
        values[name] = other if take_other else mine[name].current
    source = with_values(first.hip_source or "", values)
    child = current_configuration(declared) | values
    return _child(first, source, "x" + configuration_key(child))


def transformed(parent: Candidate, transform: Transform) -> Candidate | None:
    """`parent` with `transform` applied to its kernel.hip; None where it does not apply."""
    if parent.format != "native" or parent.hip_source is None:
        return None
    source = transform.apply(parent.hip_source)
    return None if source is None else _child(parent, source, transform.name)
