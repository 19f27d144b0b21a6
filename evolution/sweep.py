"""The offline tunable sweep on each new elite a model wrote, and on the seeds.

A model's child that becomes its island's best is a new kernel; if its files declare
`@tunable`s, its best configuration is still unknown, and a model is a slow and costly way to
find it. The same holds for the seeds (generation 0's kernels) while they are their islands'
best, and their sweep has a second use: the first generation's model calls take tens of seconds
before any model-written child exists, and the seeds' configurations are what keeps the GPU
slots busy meanwhile. A seed gets at most a tenth of the run's budget (SEED_SHARE), so a small
budget still goes to the models. So in the generations after, the offline tuner
(evolution/offline/tuner.py: Optuna's TPE told the run's history of that kernel's
configurations) proposes configurations of it, at most PER_GENERATION a generation and
`configurations` in all per elite (agents.sweep_configurations), admitted against the run's
budget like any child. They are written on the CPU in milliseconds and evaluated on the run's
slots while the models write the generation's other children.

Each child records what was tried as its idea (its Attempt): the tunables it moved from the
elite, so the run's notes, the prompts' earlier attempts, `evolve report` and the datasets say
what the tuner tried, not "no idea recorded".

What was swept is counted here, for this session: a resumed run may sweep an elite again, and
the tuner, told the history, then proposes configurations not yet seen.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable, Set

from hipevolve.archive.records import Attempt
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate
from hipevolve.evolution.budget import TUNER
from hipevolve.evolution.child import Child
from hipevolve.evolution.islands import Island, best
from hipevolve.evolution.offline import tuner
from hipevolve.evolution.offline.moves import described
from hipevolve.evolution.recorder import Recorder

AGENT = TUNER  # the agent label of a sweep's children
PER_GENERATION = 2  # configurations of one elite a generation
SEED_SHARE = 10  # a seed's configurations: at most the budget over this


def seed_configurations(configurations: int, budget: int) -> int:
    """How many configurations of each seed a run of `budget` evaluations sweeps."""
    return min(configurations, budget // SEED_SHARE)


class Sweep:
    """Which island bests (model-written, or seeds) are swept, and their children for one
    generation."""

    def __init__(
        self, archive: Archive, recorder: Recorder, configurations: int, seed_configurations: int
    ) -> None:
        """`configurations` of each model-written elite, `seed_configurations` of each seed."""
        self.archive, self.recorder = archive, recorder
        self.configurations, self.seed_configurations = configurations, seed_configurations
        self.written: dict[int, int] = {}  # elite -> configurations written for it
        self._limits: dict[int, int] = {}  # candidate -> configurations it gets (_limit)
        self._lock = threading.Lock()

    def due(self, islands: Iterable[Island]) -> list[tuple[int, int]]:
        """(island, elite) of each island whose best a model wrote or is a seed, declares
        tunables and has configurations left to sweep."""
        found = []
        for island in islands:
            top = best(island)
            if top is None or not self._limit(top.candidate_id):
                continue
            with self._lock:
                left = self.written.get(top.candidate_id, 0) < self._limits[top.candidate_id]
            if left and tuner.family(self.recorder.source(top.candidate_id)) is not None:
                found.append((island.id, top.candidate_id))
        return found

    def children(
        self,
        islands: Iterable[Island],
        rng: random.Random,
        seen: Set[str],
        history: list,
        room: int,
    ) -> list[Child]:
        """This generation's sweep children: unseen configurations TPE asks for, at most `room`
        (what the tuner's share of the budget has left)."""
        taken, out = set(seen), []
        for island_id, elite in self.due(islands):
            parent, limit = self.recorder.source(elite), self._limit(elite)
            for _ in range(min(PER_GENERATION, room - len(out))):
                with self._lock:
                    if self.written.get(elite, 0) >= limit:
                        break
                    self.written[elite] = self.written.get(elite, 0) + 1
                candidate = tuner.propose(parent, history, rng, taken)
                if candidate is None:
                    with self._lock:  # nothing unseen is near: this elite is swept
                        self.written[elite] = limit
                    break
                taken.add(candidate.source_hash)
                tried = Attempt(idea=idea(parent, candidate, elite))
                out.append(
                    Child(
                        candidate=candidate,
                        island=island_id,
                        parents=(elite,),
                        agent=AGENT,
                        attempt=tried,
                    )
                )
        return out

    def _limit(self, candidate_id: int) -> int:
        """Configurations it gets: a model wrote it, or it is one of generation 0's kernels;
        none for the tuner's own children."""
        with self._lock:
            known = self._limits.get(candidate_id)
        if known is None:
            record = self.archive.candidate(candidate_id)
            known = (
                self.configurations
                if record.model
                else self.seed_configurations
                if record.generation == 0
                else 0
            )
            with self._lock:
                self._limits[candidate_id] = known
        return known


def idea(parent: Candidate, child: Candidate, elite: int) -> str:
    """What a configuration tried, as its idea: the tunables it moved from the elite's."""
    moved = described(parent, child).removeprefix("tunables ")
    return (
        f"offline tuner (TPE over the declared @tunables) on candidate {elite}: "
        f"{moved or 'its own configuration'}"
    )
