"""The offline proposal policy: one child per proposal, no model, deterministic for the rng.

For a proposal (a parent and its inspirations) the policy draws one edit: mutate the parent's
declared tunables (most often: the cheapest edit that moves a kernel), cross it with an
inspiration, or apply a catalogue transform. When the drawn edit gives nothing or code already
seen, it walks the parent's whole neighbourhood (each single tunable change, each transform) in
an rng-shuffled order and takes the first unseen child, so a proposal only comes back empty when
everything one step from its parent has been seen. `rescue` then looks around every elite; when
it finds nothing either, the space the offline mutator can reach from the elites is exhausted.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Set

from hipevolve.core.candidate import Candidate
from hipevolve.evolution.child import Child, Proposal
from hipevolve.evolution.islands import Island, ranked
from hipevolve.evolution.offline.mutate import crossover, mutate, transformed
from hipevolve.evolution.offline.transforms import CATALOGUE
from hipevolve.evolution.offline.tunables import (
    TunableError,
    configuration_key,
    current_configuration,
    parse_tunables,
    with_values,
)

# Draw thresholds: mutation below the first, crossover below the second, else a transform.
MUTATE_BELOW = 0.6
CROSSOVER_BELOW = 0.8


def _safe(make: Callable[[], Candidate | None]) -> Candidate | None:
    # A parent with malformed @tunable lines has nothing to tune; the verifier already said so.
    try:
        return make()
    except (TunableError, ValueError):
        return None


def neighbours(parent: Candidate) -> list[Candidate]:
    """Every candidate one edit from `parent`: each tunable set to each other declared value,
    then each catalogue transform that applies. A fixed order; callers shuffle it."""
    if parent.format != "native" or parent.hip_source is None:
        return []
    found: list[Candidate] = []
    try:
        tunables = parse_tunables(parent.hip_source)
    except TunableError:
        tunables = []
    base = parent.name.split("@", 1)[0]
    for tunable in tunables:
        for value in tunable.values:
            if value == tunable.current:
                continue
            config = current_configuration(tunables) | {tunable.name: value}
            found.append(
                parent.model_copy(
                    update={
                        "hip_source": with_values(parent.hip_source, {tunable.name: value}),
                        "name": f"{base}@{configuration_key(config)}",
                        "origin": None,
                    }
                )
            )
    for transform in CATALOGUE:
        child = _safe(lambda t=transform: transformed(parent, t))
        if child is not None:
            found.append(child)
    return found


def _first_unseen(options: Iterable[Candidate], seen: Set[str]) -> Candidate | None:
    return next((c for c in options if c.source_hash not in seen), None)


def propose(
    proposal: Proposal, sources: Mapping[int, Candidate], rng: random.Random, seen: Set[str]
) -> Child | None:
    """One unseen child for the proposal, or None when nothing one step away is unseen.

    A proposal without a parent (an empty island) gets None: the run loop seeds islands itself.
    """
    if proposal.parent is None:
        return None
    parent_id = proposal.parent.candidate_id
    parent = sources[parent_id]
    inspirations = tuple(e.candidate_id for e in proposal.inspirations)
    draw = rng.random()
    parents: tuple[int, ...] = (parent_id,)
    kind = "mutation"
    if draw < MUTATE_BELOW:
        changes = 1 if rng.random() < 0.7 else 2
        child = _safe(lambda: mutate(parent, rng, changes=changes))
    elif draw < CROSSOVER_BELOW and inspirations:
        other = rng.choice(inspirations)
        child = _safe(lambda: crossover(parent, sources[other], rng))
        parents, kind = (parent_id, other), "crossover"
    else:
        transform = rng.choice(CATALOGUE)
        child = _safe(lambda: transformed(parent, transform))
    if child is None or child.source_hash in seen:
        options = neighbours(parent)
        rng.shuffle(options)
        child = _first_unseen(options, seen)
        parents, kind = (parent_id,), "mutation"
    if child is None:
        return None
    return Child(
        candidate=child,
        island=proposal.island,
        parents=parents,
        kind=kind,
        inspirations=tuple(i for i in inspirations if i not in parents),
    )


def rescue(
    islands: Iterable[Island], sources: Mapping[int, Candidate], seen: Set[str]
) -> Child | None:
    """The first unseen neighbour of any elite (islands in order, fittest elite first), or None:
    every kernel one edit from every elite has been seen. No draws, so it is deterministic."""
    for island in islands:
        for elite in ranked(island):
            child = _first_unseen(neighbours(sources[elite.candidate_id]), seen)
            if child is not None:
                return Child(candidate=child, island=island.id, parents=(elite.candidate_id,))
    return None
