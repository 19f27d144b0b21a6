"""Parent selection, inspirations, and plan(): the step the run loop calls each generation.

Parents mix three draws in configured proportions: elite (uniform over the top-k: exploit),
rank-weighted over the whole grid (weight n - rank: fitter cells more often, every cell
sometimes; ranks rather than a softmax so a 10x outlier does not starve the rest) and uniform
(explore cells the fitness has not yet rewarded). Inspirations are the other kernels a prompt
shows next to the parent: the island's best, grid neighbours of the parent's cell (one axis
different: "the same kernel with LDS", "the same kernel with 128-bit loads"), then random elites;
never the parent's code, never the same code twice.

Everything draws from a random.Random the caller passes, so a run is reproducible from its seed.
"""

from __future__ import annotations

import random

from pydantic import Field

from hipevolve.evolution.child import Proposal
from hipevolve.evolution.descriptors import hamming
from hipevolve.evolution.islands import Elite, EvolutionSettings, Frozen, Island, best, ranked
from hipevolve.evolution.migration import Move, exchange


def select_parent(island: Island, rng: random.Random, settings: EvolutionSettings) -> Elite:
    """One parent from a non-empty island, by the elite / rank-weighted / uniform mix."""
    order = ranked(island)
    if not order:
        raise ValueError(f"island {island.id} is empty: it has no parent to select")
    draw = rng.random()
    if draw < settings.elite_fraction:
        return rng.choice(order[: settings.elite_top_k])
    if draw < settings.elite_fraction + settings.fitness_weighted_fraction:
        weights = range(len(order), 0, -1)
        return rng.choices(order, weights=weights)[0]
    return rng.choice(order)


def choose_inspirations(
    island: Island, parent: Elite, rng: random.Random, count: int
) -> tuple[Elite, ...]:
    """Up to `count` elites: the island best, grid neighbours of the parent, then random ones.

    With count >= 3 one slot is kept for a random elite so prompts do not only ever show the
    parent's surroundings. Fewer are returned only when the island holds fewer other kernels.
    """
    others = [
        e
        for e in ranked(island)
        if e.candidate_id != parent.candidate_id and e.source_hash != parent.source_hash
    ]
    chosen: list[Elite] = []

    def take(elite: Elite) -> None:
        if len(chosen) < count and all(elite.source_hash != c.source_hash for c in chosen):
            chosen.append(elite)

    top = best(island)
    if top is not None and top in others:
        take(top)
    neighbours = [e for e in others if hamming(e.cell, parent.cell) == 1 and e not in chosen]
    neighbour_slots = count - len(chosen) - (1 if count >= 3 else 0)
    for elite in rng.sample(neighbours, min(len(neighbours), max(neighbour_slots, 0))):
        take(elite)
    rest = [e for e in others if e not in chosen]
    rng.shuffle(rest)
    for elite in rest:
        take(elite)
    return tuple(chosen)


class PolicyState(Frozen):
    islands: tuple[Island, ...]
    generation: int = Field(ge=0, description="generations completed so far")


class Plan(Frozen):
    islands: tuple[Island, ...] = Field(description="the islands after this generation's exchange")
    proposals: tuple[Proposal, ...]
    moves: tuple[Move, ...] = Field(default=(), description="migrations and reseeds just made")


def plan(state: PolicyState, settings: EvolutionSettings, rng: random.Random) -> Plan:
    """The next generation: due migration and reseeding, then proposals for every island.

    The run loop replaces its islands with plan.islands, evaluates the proposals' children,
    inserts the ok ones into their islands and calls plan again with generation + 1.
    """
    islands, moves = exchange(state.islands, state.generation, settings)
    proposals = []
    for island in islands:
        for _ in range(settings.proposals_per_island):
            if not island.grid:
                proposals.append(Proposal(island=island.id, parent=None))
                continue
            parent = select_parent(island, rng, settings)
            inspirations = choose_inspirations(island, parent, rng, settings.inspirations)
            top = best(island)
            proposals.append(
                Proposal(
                    island=island.id,
                    parent=parent,
                    inspirations=inspirations,
                    island_best=top.fitness if top else 0.0,
                )
            )
    return Plan(islands=islands, proposals=tuple(proposals), moves=moves)


def empty_islands(settings: EvolutionSettings) -> tuple[Island, ...]:
    """The starting state: settings.islands empty islands, ids 0..K-1."""
    return tuple(Island(id=i) for i in range(settings.islands))
