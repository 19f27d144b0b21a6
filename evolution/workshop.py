"""What a proposal policy may ask of a run while it writes one generation (evolution/run.py):
store, admit and evaluate children, and re-check a stored candidate."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation
from hipevolve.evolution.budget import Admission, Budget
from hipevolve.evolution.child import Child

if TYPE_CHECKING:
    from hipevolve.evolution.generations import Search


class Workshop:
    """What a proposal policy may ask of the run while it writes one generation; thread-safe.

    Children are admitted against the run's evaluation budget (the same Budget the loop then
    stages the generation with), stored with their lineage and evaluated one at a time (one
    GPU slot), so agents waiting on a model overlap with the evaluation in progress.
    """

    RECHECK = "audit-recheck"  # settings-key suffix of a failed hidden-seed re-check

    def __init__(self, search: Search, generation: int, budget: Budget) -> None:
        self._search, self.generation, self._budget = search, generation, budget
        self.task, self.archive, self.run = search.task, search.archive, search.run
        self._lock = threading.Lock()  # admission and the sources map
        self._gpu = threading.Lock()  # one evaluation at a time

    @property
    def sources(self) -> Mapping[int, Candidate]:
        return self._search.sources

    def source(self, candidate_id: int) -> Candidate:
        with self._lock:
            return self._search.source(candidate_id)

    def evaluation_of(self, candidate_id: int) -> Evaluation | None:
        return self.archive.evaluation_of(candidate_id)

    def seen(self) -> frozenset[str]:
        """Source hashes admitted so far (earlier generations and this one)."""
        with self._lock:
            return frozenset(self._budget._seen)

    def room(self) -> int:
        with self._lock:
            return self._budget.remaining

    def evaluate(self, child: Child) -> tuple[int, Evaluation] | None:
        """Stores and evaluates a child; (candidate id, evaluation), or None: budget spent."""
        with self._lock:
            if self._budget.admit(child.candidate.source_hash) is Admission.exhausted:
                return None
            cid = self.archive.add_candidate(
                self.run, child.candidate, parents=child.parents, kind=child.kind,
                inspirations=child.inspirations, agent=child.agent, model=child.model,
                prompt_hash=child.prompt_hash, island=child.island, generation=self.generation,
            )  # fmt: skip
            self._search.sources[cid] = child.candidate
        with self._gpu:
            done = self.archive.evaluation_of(cid)
            if done is not None:  # a duplicate of this generation: reuse its result
                return cid, done
            pending = self._search._from_cache([cid], {})
            if not pending:
                return cid, self.archive.evaluation_of(cid)  # type: ignore[return-value]
            self.archive.enqueue(cid)
            self.archive.mark_in_flight(cid)
            (evaluation,) = self._search.evaluate([child.candidate])
            self._search.evaluated_here += 1
            return cid, self._search._record(cid, evaluation)

    def recheck(self, candidate_id: int) -> Evaluation:
        """One more evaluation of a stored candidate, bypassing the archive's cache: the
        verifier draws a fresh hidden check seed for every evaluation. A failed re-check
        becomes the candidate's standing evaluation, so it is never crowned."""
        with self._gpu:
            (evaluation,) = self._search.evaluate([self.source(candidate_id)])
            self._search.evaluated_here += 1
        if not evaluation.ok:
            self.archive.record_evaluation(
                candidate_id, evaluation, f"{self._search.evaluate.settings_key}|{self.RECHECK}",
                self._search.evaluate.toolchain,
            )  # fmt: skip
        return evaluation
