"""Exchange between islands: ring migration and reseeding of the weaker half.

Islands evolve apart so the search keeps several lines of attack; now and then good code must
still spread, without turning the islands into copies of each other (a softmax run whose grids
had one axis ended with four islands holding the same three elites).
Ring migration (every migration_every generations) sends each island's top elites to the next
island. A migrant must be held by its sender alone: code that already lives on two islands is
not relayed further round the ring, so one kernel spreads one hop per migration instead of
reaching every island. A migrant the target already holds, in any cell, is skipped, and it
lands through insert: it takes its cell only from a weaker incumbent, so the target keeps its
own elites unless the migrant beats them. Reseeding (every reseed_every generations) resets the
weaker half of the islands, by best fitness, from the best island: each reset island takes its
best elite and ("elites") a share of its other elites, dealt in turn, so no two reset islands
are copies of each other or of the donor ("best": the best elite alone). Stagnant islands
restart from the best known code, and the best island itself is never reset, so the global best
survives. Both are deterministic: no draws, ties broken by island position. islands.own_elites
is the measure: per island, the elites no other island holds.

Each step returns the new islands and the moves it made, for the archive to record membership.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from hipevolve.evolution.islands import (
    EvolutionSettings,
    Frozen,
    Island,
    best_fitness,
    holders,
    insert,
    ranked,
)


class Move(Frozen):
    """One elite copied from one island to another."""

    kind: Literal["migrate", "reseed"]
    source: int = Field(description="island id the elite came from")
    target: int = Field(description="island id it was copied to")
    candidate_id: int


def migrate(
    islands: Sequence[Island], migrants: int
) -> tuple[tuple[Island, ...], tuple[Move, ...]]:
    """Island at position i sends its top `migrants` elites to position (i + 1) % K.

    Migrants are chosen before any island changes, so the order of the ring does not matter:
    of the sender's top `migrants`, those no other island holds (nothing is relayed). A
    migrant lands through insert: it takes its cell only if fitter than the incumbent.
    """
    k = len(islands)
    if k < 2 or migrants == 0:
        return tuple(islands), ()
    held = holders(islands)
    outgoing = [
        [e for e in ranked(island)[:migrants] if held[e.source_hash] == 1] for island in islands
    ]
    result = list(islands)
    moves: list[Move] = []
    for i, sent in enumerate(outgoing):
        j = (i + 1) % k
        for elite in sent:
            if result[j].holds(elite.source_hash):
                continue
            after = insert(result[j], elite)
            if after is not result[j]:
                moves.append(
                    Move(
                        kind="migrate",
                        source=islands[i].id,
                        target=islands[j].id,
                        candidate_id=elite.candidate_id,
                    )
                )
            result[j] = after
    return tuple(result), tuple(moves)


def weaker_half(islands: Sequence[Island]) -> list[int]:
    """Positions of the K // 2 islands with the lowest best fitness (empty islands first).

    Ties: the later position counts as weaker, so the earliest of equally good islands is kept.
    """
    order = sorted(range(len(islands)), key=lambda i: (best_fitness(islands[i]), -i))
    return sorted(order[: len(islands) // 2])


def reseed(
    islands: Sequence[Island], mode: Literal["elites", "best"] = "elites"
) -> tuple[tuple[Island, ...], tuple[Move, ...]]:
    """Reset the weaker half from the best island: each takes its best elite and ("elites") a
    share of the others, dealt in turn in fitness order (the first reset island the 2nd, 4th,
    ... the second the 3rd, 5th, ...), or ("best") the best elite alone."""
    if len(islands) < 2:
        return tuple(islands), ()
    donor_at = max(range(len(islands)), key=lambda i: (best_fitness(islands[i]), -i))
    donor = islands[donor_at]
    if not donor.grid:
        return tuple(islands), ()
    top, *rest = ranked(donor)
    reset = weaker_half(islands)
    result = list(islands)
    moves: list[Move] = []
    for n, i in enumerate(reset):
        copied = [top, *rest[n :: len(reset)]] if mode == "elites" else [top]
        result[i] = Island(id=islands[i].id, grid={e.cell: e for e in copied})
        moves.extend(
            Move(kind="reseed", source=donor.id, target=islands[i].id, candidate_id=e.candidate_id)
            for e in copied
        )
    return tuple(result), tuple(moves)


def exchange(
    islands: Sequence[Island], generation: int, settings: EvolutionSettings
) -> tuple[tuple[Island, ...], tuple[Move, ...]]:
    """The exchanges due at the start of `generation` (none at generation 0).

    Reseeding runs before migration so the reset islands pass their new code on at once.
    """
    result, moves = tuple(islands), ()
    if generation <= 0:
        return result, moves
    if settings.reseed_every and generation % settings.reseed_every == 0:
        result, moves = reseed(result, settings.reseed_from)
    if settings.migration_every and generation % settings.migration_every == 0:
        result, migrated = migrate(result, settings.migrants)
        moves = moves + migrated
    return result, moves
