"""The offline proposal policy: one child per proposal, no model, deterministic for the rng.

For a proposal (a parent and its inspirations) the policy draws one move (evolution/offline/moves.py):
a tunable move, which asks Optuna's TPE sampler first (evolution/offline/tuner.py, told the run's
history of the parent's kernel at other configurations) and otherwise takes a step in one tunable
(small steps refine a good parent) or in 2 or 3 tunables at once (leaves a local optimum that
single steps cannot); a crossover with an inspiration (a mix of two distinct
configurations, never a copy of either; lineage kind "crossover" with both parents), or a catalogue
transform. When the drawn move gives nothing or code already seen, the policy walks, in rng order:
1. the parent's whole neighbourhood (every single step and transform, then every 2- and 3-step);
2. every crossover of the parent with each inspiration;
3. a restart: the same walk from each inspiration, an elite other than the parent (the island's
   best first), the child recorded as that elite's;
4. a jump: any unseen configuration of the parent's, then each inspiration's, declared space.
A proposal only comes back empty when every move from its parent and its inspirations is spent.
`rescue` then walks every elite of every island (its neighbourhood, its crossover with every
other elite of its island, then its whole declared space) in a fixed order; when it finds nothing
either, nothing unseen is reachable by any move the offline mutator offers (every configuration
of every elite's declared space, every transform of every elite, every crossover of two elites
of an island has been seen), and the run may say the space is exhausted.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set

from hipevolve.archive.records import Attempt
from hipevolve.core.candidate import Candidate
from hipevolve.evolution.child import Child, Proposal
from hipevolve.evolution.islands import Island, ranked
from hipevolve.evolution.offline import tuner
from hipevolve.evolution.offline.moves import (
    described,
    edits,
    first_unseen,
    jumps,
    mixes,
    neighbourhood,
    steps,
)
from hipevolve.evolution.offline.mutate import mutate
from hipevolve.evolution.offline.tunables import TunableError

# Draw thresholds: one-tunable step below the first, a 2-3 tunable step below the second,
# crossover below the third, else a transform.
STEP_BELOW = 0.55
MULTI_STEP_BELOW = 0.7
CROSSOVER_BELOW = 0.85


def neighbours(parent: Candidate) -> list[Candidate]:
    """Every candidate one single-tunable step or one transform from `parent`, a fixed order."""
    return list(steps(parent, 1)) + list(edits(parent))


def _drawn(
    parent: Candidate,
    others: list[tuple[int, Candidate]],
    rng: random.Random,
    seen: Set[str],
    history: Sequence[tuple[Candidate, float]],
) -> tuple[Candidate | None, int | None]:
    """The child of the drawn move (and the other parent of a crossover), or None. A tunable
    move asks the sampler first (evolution/offline/tuner.py: TPE told the run's history of the
    parent's kernel); without a history, or when it only asks for seen code, a step: each
    changed tunable to a neighbouring declared value half the time (mutate's neighbour_p), small
    steps refining a good parent; when that child is seen, any unseen step of the same size."""
    draw = rng.random()
    if draw < MULTI_STEP_BELOW:
        tuned = tuner.propose(parent, history, rng, seen) if history else None
        if tuned is not None:
            return tuned, None
        k = 1 if draw < STEP_BELOW else rng.choice((2, 3))
        try:
            child = mutate(parent, rng, changes=k)
        except (TunableError, ValueError):
            return None, None
        if child is None or child.source_hash in seen:
            child = first_unseen(steps(parent, k, rng), seen)
        return child, None
    if draw < CROSSOVER_BELOW and others:
        other_id, other = rng.choice(others)
        return first_unseen(mixes(parent, other, rng), seen), other_id
    return first_unseen(edits(parent, rng), seen), None


def _walk(
    parent_id: int,
    others: list[tuple[int, Candidate]],
    sources: Mapping[int, Candidate],
    rng: random.Random | None,
    seen: Set[str],
) -> Iterator[tuple[Candidate | None, tuple[int, ...], str]]:
    """Lazily, each fallback in order: (child or None, parents, kind)."""
    parent = sources[parent_id]
    yield first_unseen(neighbourhood(parent, rng), seen), (parent_id,), "mutation"
    for other_id, other in others:
        yield first_unseen(mixes(parent, other, rng), seen), (parent_id, other_id), "crossover"


def _jump(
    elite_ids: Iterable[int],
    sources: Mapping[int, Candidate],
    rng: random.Random | None,
    seen: Set[str],
) -> tuple[Candidate, int] | None:
    """The first unseen configuration of any of these elites' declared spaces."""
    for elite_id in elite_ids:
        child = first_unseen(jumps(sources[elite_id], rng), seen)
        if child is not None:
            return child, elite_id
    return None


def propose(
    proposal: Proposal,
    sources: Mapping[int, Candidate],
    rng: random.Random,
    seen: Set[str],
    history: Sequence[tuple[Candidate, float]] = (),
) -> Child | None:
    """One unseen child for the proposal, or None when no move from the parent or its
    inspirations reaches unseen code. `history`: the run's candidates with a verdict and their
    fitness, for the tunable sampler.

    A proposal without a parent (an empty island) gets None: the run loop seeds islands itself.
    """
    if proposal.parent is None:
        return None
    parent_id = proposal.parent.candidate_id
    inspirations = tuple(e.candidate_id for e in proposal.inspirations)
    others = [(i, sources[i]) for i in inspirations if i != parent_id]
    child, other_id = _drawn(sources[parent_id], others, rng, seen, history)
    if child is not None:
        parents = (parent_id,) if other_id is None else (parent_id, other_id)
        kind = "mutation" if other_id is None else "crossover"
        return _child(child, proposal.island, parents, kind, inspirations, sources)
    walks = [_walk(parent_id, others, sources, rng, seen)]
    # Restarts: the inspirations' own walks, each crossed with the rest of the proposal's elites.
    everyone = [(parent_id, sources[parent_id]), *others]
    for restart_id, _ in others:
        rest = [(i, c) for i, c in everyone if i != restart_id]
        walks.append(_walk(restart_id, rest, sources, rng, seen))
    for child, parents, kind in itertools.chain.from_iterable(walks):
        if child is not None:
            return _child(child, proposal.island, parents, kind, inspirations, sources)
    jumped = _jump([parent_id, *(i for i, _ in others)], sources, rng, seen)
    if jumped is not None:
        return _child(jumped[0], proposal.island, (jumped[1],), "mutation", inspirations, sources)
    return None


def _child(
    candidate: Candidate,
    island: int,
    parents: tuple[int, ...],
    kind: str,
    inspirations: Iterable[int],
    sources: Mapping[int, Candidate],
) -> Child:
    return Child(
        candidate=candidate,
        island=island,
        parents=parents,
        kind=kind,
        inspirations=tuple(i for i in inspirations if i not in parents),
        attempt=Attempt(idea=idea(candidate, parents, kind, sources)),
    )


def idea(
    child: Candidate, parents: tuple[int, ...], kind: str, sources: Mapping[int, Candidate]
) -> str:
    """What the offline mutator tried, as the child's idea: the move, from which candidates."""
    moved = described(sources[parents[0]], child) or "another configuration"
    if kind == "crossover":
        return f"offline mutator: crossover of candidates {parents[0]} and {parents[1]}: {moved}"
    return f"offline mutator on candidate {parents[0]}: {moved}"


def rescue(
    islands: Iterable[Island], sources: Mapping[int, Candidate], seen: Set[str]
) -> Child | None:
    """The first unseen child of any move from any elite (islands in order, fittest elite
    first: its neighbourhood, then its crossovers with the island's other elites), or None:
    every move the offline mutator offers from every elite reaches only seen code. No draws,
    so it is deterministic."""
    for island in islands:
        order = ranked(island)
        elites = [(e.candidate_id, sources[e.candidate_id]) for e in order]
        for elite_id, _ in elites:
            others = [(i, c) for i, c in elites if i != elite_id]
            for child, parents, kind in _walk(elite_id, others, sources, None, seen):
                if child is not None:
                    return _child(child, island.id, parents, kind, (), sources)
    for island in islands:
        jumped = _jump((e.candidate_id for e in ranked(island)), sources, None, seen)
        if jumped is not None:
            return _child(jumped[0], island.id, (jumped[1],), "mutation", (), sources)
    return None
