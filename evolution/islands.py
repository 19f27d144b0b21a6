"""Islands: each a MAP-Elites grid (cell -> best candidate seen there), and the policy settings.

An island is immutable: insert returns a new island. Two invariants hold after any sequence of
inserts, and the property tests check them:
- the island never loses its best: its best fitness is the maximum ever inserted;
- one elite per cell, and one cell per source_hash (the same code is never held twice, so
  migration and inspirations never show an agent the same kernel as two entries).
Fitness is the geometric-mean speedup (Evaluation.fitness); correctness is a gate the caller
applies before inserting, not a term here. The policy settings, EvolutionSettings, are the
[evolution] section of the settings tree (hipevolve/core/config.py), re-exported here.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import (
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from hipevolve.core.base import Frozen
from hipevolve.core.config import EvolutionSettings
from hipevolve.evolution.descriptors import Cell

__all__ = [
    "Elite",
    "EvolutionSettings",
    "Frozen",
    "Island",
    "best",
    "best_fitness",
    "holders",
    "insert",
    "own_elites",
    "ranked",
]


class Elite(Frozen):
    """A candidate as an island holds it: enough to select, compare and deduplicate."""

    candidate_id: int = Field(description="the archive's candidate id")
    fitness: float = Field(ge=0, allow_inf_nan=False, description="geometric-mean speedup")
    source_hash: str = Field(description="normalised source hash: equal hashes are the same code")
    cell: Cell = Field(description="MAP-Elites cell, from descriptors.cell_of")


class Island(Frozen):
    id: int = Field(ge=0)
    grid: dict[Cell, Elite] = Field(default_factory=dict, description="cell -> its elite")

    @field_validator("grid", mode="before")
    @classmethod
    def _from_list(cls, value: Any) -> Any:
        # JSON cannot key an object by a tuple: the grid travels as a list of elites.
        if isinstance(value, list):
            elites = [Elite.model_validate(e) for e in value]
            return {e.cell: e for e in elites}
        return value

    @field_serializer("grid", when_used="json")
    def _to_list(self, grid: dict[Cell, Elite]) -> list[dict[str, Any]]:
        return [e.model_dump(mode="json") for e in grid.values()]

    @model_validator(mode="after")
    def _keys_are_cells(self) -> Island:
        for cell, elite in self.grid.items():
            if elite.cell != cell:
                raise ValueError(
                    f"elite {elite.candidate_id} is filed under {cell}, not {elite.cell}"
                )
        return self

    @property
    def elites(self) -> tuple[Elite, ...]:
        return tuple(self.grid.values())

    def holds(self, source_hash: str) -> bool:
        return any(e.source_hash == source_hash for e in self.grid.values())


def insert(island: Island, elite: Elite) -> Island:
    """The island with elite added: it takes its cell if strictly fitter (ties keep the incumbent).

    The same source_hash already held elsewhere is the same code re-measured: the entry with the
    higher fitness stays. Removing the weaker copy never lowers the island's best, because the
    new one is fitter than it and either takes its cell or loses to a fitter incumbent.
    """
    grid = dict(island.grid)
    for cell, held in island.grid.items():
        if held.source_hash == elite.source_hash:
            if held.fitness >= elite.fitness:
                return island
            del grid[cell]
    incumbent = grid.get(elite.cell)
    if incumbent is None or elite.fitness > incumbent.fitness:
        grid[elite.cell] = elite
    elif len(grid) == len(island.grid):
        return island  # nothing removed, nothing placed
    return island.model_copy(update={"grid": grid})


def ranked(island: Island) -> list[Elite]:
    """Elites, fittest first; equal fitness in candidate_id order so draws are reproducible."""
    return sorted(island.grid.values(), key=lambda e: (-e.fitness, e.candidate_id))


def best(island: Island) -> Elite | None:
    """The island's fittest elite, or None if it is empty."""
    order = ranked(island)
    return order[0] if order else None


def best_fitness(island: Island) -> float:
    top = best(island)
    return top.fitness if top else -math.inf


def holders(islands: Sequence[Island]) -> Counter[str]:
    """source_hash -> how many of the islands hold that code."""
    return Counter(h for island in islands for h in {e.source_hash for e in island.elites})


def own_elites(islands: Sequence[Island]) -> tuple[int, ...]:
    """Per island, its elites that no other island holds (by source_hash): how distinct the
    islands are. Equal to the grid sizes when no code is shared; 0 for an island that is a copy."""
    held = holders(islands)
    return tuple(sum(held[e.source_hash] == 1 for e in island.elites) for island in islands)
