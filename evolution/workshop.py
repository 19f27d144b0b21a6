"""What a proposal policy may ask of a run while it writes one generation (evolution/run.py):
store, admit and evaluate children, and re-check a stored candidate."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from hipevolve.archive.records import Tried
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.budget import Admission, RunBudget
from hipevolve.evolution.child import Child
from hipevolve.evolution.recorder import Recorder


class Workshop:
    """What a proposal policy may ask of the run while it writes one generation; thread-safe.

    Children are admitted against the run's one budget (evolution/budget.py: everything spent so
    far, since a policy's generations are written side by side; the loop stages the generation
    against it too), stored with their lineage and evaluated on every slot the
    evaluator has at once (its `parallelism`: one per GPU; the slots are the run's, shared with
    the other generations in flight), so agents waiting on a model overlap with the evaluations
    in progress. Two callers holding the same new code share one
    evaluation. Storing, the evaluation cache and recording go through the run's Recorder, as
    the loop's own do.
    """

    RECHECK = "audit-recheck"  # settings-key suffix of a failed hidden-seed re-check

    def __init__(
        self, task: TaskSpec, recorder: Recorder, generation: int, budget: RunBudget
    ) -> None:
        self._recorder, self.generation, self._budget = recorder, generation, budget
        self.task, self.archive, self.run = task, recorder.archive, recorder.run
        self._lock = threading.Lock()  # admission, the sources map, the in-flight table
        self.slots = recorder.pace.slots
        self.pace = recorder.pace  # the run's slots and latencies (evolution/pace.py)
        self._inflight: dict[int, threading.Event] = {}  # candidate -> set once it is recorded
        self.evaluations = 0  # new evaluations the evaluator ran for this generation

    @property
    def sources(self) -> Mapping[int, Candidate]:
        return self._recorder.sources

    def source(self, candidate_id: int) -> Candidate:
        with self._lock:
            return self._recorder.source(candidate_id)

    def evaluation_of(self, candidate_id: int) -> Evaluation | None:
        return self.archive.evaluation_of(candidate_id)

    def tried_near(self, parent: int | None, island: int, limit: int = 6) -> list[Tried]:
        """The latest attempts from `parent` and on `island`, with their outcomes."""
        return self.archive.tried_near(self.run, parent, island, limit)

    def seen(self) -> frozenset[str]:
        """Source hashes admitted so far (earlier generations and this one)."""
        with self._lock:
            return self._budget.admitted()

    def room(self) -> int:
        with self._lock:
            return self._budget.remaining

    def evaluate(self, child: Child) -> tuple[int, Evaluation] | None:
        """Stores and evaluates a child; (candidate id, evaluation), or None: budget spent."""
        with self._lock:
            admission = self._budget.admit(
                child.candidate.source_hash, self.generation, by=child.agent
            )
            if admission is Admission.exhausted:
                return None
            cid = self._recorder.store(child, self.generation)
            running = self._inflight.get(cid)
            if running is None:
                self._inflight[cid] = threading.Event()
        if running is not None:  # the same code, in flight for another caller: share its result
            running.wait()
            return cid, self.archive.evaluation_of(cid)  # type: ignore[return-value]
        try:
            return cid, self._evaluate_stored(cid, child.candidate)
        finally:
            with self._lock:
                self._inflight.pop(cid).set()

    def _evaluate_stored(self, cid: int, candidate: Candidate) -> Evaluation:
        done = self.archive.evaluation_of(cid)
        if done is not None:  # a duplicate of this generation: reuse its result
            return done
        if not self._recorder.from_cache([cid], {}):
            return self.archive.evaluation_of(cid)  # type: ignore[return-value]
        prepared = self._recorder.prepare([cid])  # builds: outside the lock
        with self._lock:  # a machine-code copy of an evaluated candidate: its result, no GPU
            _, copies = self._recorder.copies(prepared, ordered=False)
        if copies:
            self._budget.copied(candidate.source_hash)  # and no unit of the budget
            return self._recorder.record_copy(cid, copies[cid])
        self._recorder.dispatch([cid])
        evaluation = self._recorder.on_slot(prepared[cid])
        with self._lock:
            self._recorder.add_evaluated(1)
            self.evaluations += 1
        return self._recorder.record(cid, evaluation)

    def recheck(self, candidate_id: int) -> Evaluation | None:
        """One more evaluation of a stored candidate, bypassing the archive's cache: the
        verifier draws a fresh hidden check seed for every evaluation. It spends one unit of
        the budget (None: none is left). A failed re-check becomes the candidate's standing
        evaluation, so it is never crowned."""
        with self._lock:
            if not self._budget.recheck():
                return None
        (prepared,) = self._recorder.evaluate.prepare([self.source(candidate_id)])
        evaluation = self._recorder.on_slot(prepared)
        with self._lock:
            self._recorder.add_evaluated(1)
        if not evaluation.ok:
            self._recorder.record(candidate_id, evaluation, suffix=self.RECHECK)
        return evaluation
