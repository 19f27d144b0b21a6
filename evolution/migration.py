"""Exchange between islands: ring migration and reseeding of the weaker half.

Islands evolve apart so the search keeps several lines of attack; now and then good code must
still spread. Ring migration (every migration_every generations) sends each island's top elites
to the next island; a migrant whose source_hash the target already holds is skipped, so no island
ever holds the same code twice. Reseeding (every reseed_every generations) resets the weaker half
of the islands, by best fitness, to a copy of the best island's grid (or only its best elite):
stagnant islands restart from the best known code, and the best island itself is never reset, so
the global best survives. Both are deterministic: no draws, ties broken by island position.

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

    Migrants are chosen before any island changes, so the order of the ring does not matter.
    A migrant lands through insert: it takes its cell only if fitter than the incumbent.
    """
    k = len(islands)
    if k < 2 or migrants == 0:
        return tuple(islands), ()
    outgoing = [ranked(island)[:migrants] for island in islands]
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
    """Reset the weaker half to a copy of the best island's grid ("elites") or its best ("best")."""
    if len(islands) < 2:
        return tuple(islands), ()
    donor_at = max(range(len(islands)), key=lambda i: (best_fitness(islands[i]), -i))
    donor = islands[donor_at]
    if not donor.grid:
        return tuple(islands), ()
    copied = ranked(donor) if mode == "elites" else ranked(donor)[:1]
    result = list(islands)
    moves: list[Move] = []
    for i in weaker_half(islands):
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
