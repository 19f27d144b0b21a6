"""Where a run's children meet the archive: stored with their lineage, scored from the archive's
evaluation cache when the same code was already evaluated with the same key (by another run, or
this one), queued for the evaluator, and their results recorded as they land.

The run loop (evolution/generations.py Search, a whole generation at a time) and a proposal
policy (evolution/workshop.py Workshop, one child at a time) both go through one Recorder, so a
child reaches the archive one way, whoever wrote it, and the session's evaluations are counted
in one place. It decides nothing (admission is the Budget's, order the loop's) and locks nothing
(the Workshop serialises its callers; the loop calls it from its own thread only), except the
run's evaluator slots: one semaphore for every generation in flight, each hold timed for the
run's Pace (evolution/pace.py), which decides how many graph runs keep the slots fed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from hipevolve.archive.store import Archive, evaluation_key
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation
from hipevolve.evolution.child import Child
from hipevolve.evolution.pace import Pace
from hipevolve.verifier.evaluators import Evaluator


class Recorder:
    """A run's archive writes for its candidates, and the code of those it has seen."""

    def __init__(self, archive: Archive, run: int, evaluate: Evaluator,
                 pace: Pace | None = None) -> None:  # fmt: skip
        self.archive, self.run, self.evaluate = archive, run, evaluate
        self.sources: dict[int, Candidate] = {}  # candidate id -> its code, read or written here
        self.evaluated_here = 0  # evaluations the evaluator ran in this session
        # the run's baseline as the denominator of every speedup (evolution/referee.py)
        self.rebase: Callable[[Evaluation], Evaluation] = lambda evaluation: evaluation
        self.pace = pace or Pace(evaluate.parallelism)
        self.slots = threading.BoundedSemaphore(self.pace.slots)  # shared by every generation

    def on_slot(self, candidate: Candidate) -> Evaluation:
        """One evaluation holding one of the run's slots (a policy's child or re-check), timed
        for the pace."""
        with self.pace.on_slot(self.slots):
            (evaluation,) = self.evaluate([candidate])
        return evaluation

    def source(self, candidate_id: int) -> Candidate:
        """The candidate's code, read from the archive once."""
        if candidate_id not in self.sources:
            self.sources[candidate_id] = self.archive.candidate(candidate_id).candidate
        return self.sources[candidate_id]

    def history(self, before: int) -> list[tuple[Candidate, float]]:
        """Every candidate of the run's generations before `before` with a verdict, by id, and
        its fitness (0 when it failed): what the tunable sampler is told
        (evolution/offline/tuner.py). The caller passes a generation whose results are all in,
        so a resumed run's replay is told what the uninterrupted run was."""
        return [(self.source(o.candidate_id), o.fitness if o.status == "ok" else 0.0)
                for o in self.archive.outcomes(self.run) if o.generation < before]  # fmt: skip

    def remember(self, candidate_id: int, candidate: Candidate) -> None:
        """Keeps the code of a candidate the caller already read (a resumed run's queue)."""
        self.sources[candidate_id] = candidate

    def store(self, child: Child, generation: int) -> int:
        """Stores an admitted child with its lineage; its id (an existing one for code the run
        already holds)."""
        cid = self.archive.add_candidate(
            self.run, child.candidate, parents=child.parents, kind=child.kind,
            inspirations=child.inspirations, agent=child.agent, model=child.model,
            prompt_hash=child.prompt_hash, island=child.island, generation=generation,
            attempt=child.attempt,
        )  # fmt: skip
        self.sources[cid] = child.candidate
        return cid

    def from_cache(self, ids: Sequence[int], done: dict[int, Evaluation | None]) -> list[int]:
        """Records evaluations the archive already holds with the same key (into `done` too);
        returns the ids still to evaluate, in order."""
        rest = []
        for cid in ids:
            key = evaluation_key(
                self.sources[cid].source_hash, self.evaluate.settings_key, self.evaluate.toolchain
            )
            cached = self.archive.evaluated(key)
            if cached is None:
                rest.append(cid)
            else:
                done[cid] = self.record(cid, cached)
        return rest

    def dispatch(self, ids: Sequence[int]) -> None:
        """Queues the candidates and marks them in flight: a run stopped before their results
        are recorded evaluates them first when resumed."""
        for cid in ids:
            self.archive.enqueue(cid)
        for cid in ids:
            self.archive.mark_in_flight(cid)

    def record(self, cid: int, evaluation: Evaluation, *, suffix: str = "",
               scores: bool = True) -> Evaluation:
        """Records the evaluation, measured against the run's baseline, under the evaluator's
        key (`suffix`: a variant of it, such as a re-check); the evaluation that scores the
        candidate (a stored one wins, rebased too). scores: False keeps the candidate's score
        (a head-to-head's rounds)."""
        settings_key = self.evaluate.settings_key
        if suffix:
            settings_key = f"{settings_key}|{suffix}"
        return self.rebase(self.archive.record_evaluation(
            cid, self.rebase(evaluation), settings_key, self.evaluate.toolchain, scores=scores))

    def add_evaluated(self, count: int) -> None:
        """Counts evaluations the evaluator ran for this session (the progress line's rate)."""
        self.evaluated_here += count
