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

Machine-code copies (issue 33). Code that differs from an evaluated candidate's only where the
target's compiler does not look (an AMD-only `#define` on NVIDIA) builds to the same machine
code: the evaluator's `prepare` says so from the build stage (each candidate's one trip through
the CPU stages, whose result the evaluator's `run` takes on), and such a candidate is answered
from the first one's evaluation, marked as a copy (COPY_FLAG), with no GPU evaluation. A copy
costs no budget unit (evolution/budget.py: the caller hands it back), and saves the GPU time and
the noise of a second timing that could crown a copy over its original. The digest of each
candidate sent to the evaluator is logged when it is sent (event `machine_code`), and each copy
when it is found (event `machine_copy`, before its result is recorded), so a resumed run knows
both, and its budget counts the copies of generations still in flight as the run did.

The offline mutator's children are screened before they are stored (`screen`, Search.children):
a child whose build matches machine code the run has sent, or an earlier child of its
generation, is not stored, only logged (event `screened_copy`), and its proposal is made again.
The builds are kept (`prepare` takes them up) so nothing is compiled twice.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from hipevolve.archive.store import Archive, evaluation_key
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation
from hipevolve.evolution.budget import COPY
from hipevolve.evolution.child import Child
from hipevolve.evolution.clock import EvaluationClock
from hipevolve.evolution.pace import Pace
from hipevolve.verifier.evaluators import Evaluator
from hipevolve.verifier.prepared import Prepared

COPY_FLAG = "machine-code copy of candidate "  # + the original's id: not run, its result reused


def copy_of(evaluation: Evaluation) -> int | None:
    """The candidate whose evaluation this one copies (a machine-code copy), else None."""
    for flag in evaluation.flags:
        if flag.startswith(COPY_FLAG):
            return int(flag[len(COPY_FLAG) :].split()[0])
    return None


class Recorder:
    """A run's archive writes for its candidates, and the code of those it has seen."""

    def __init__(
        self, archive: Archive, run: int, evaluate: Evaluator, pace: Pace | None = None
    ) -> None:
        self.archive, self.run, self.evaluate = archive, run, evaluate
        self.sources: dict[int, Candidate] = {}  # candidate id -> its code, read or written here
        self.evaluated_here = 0  # evaluations the evaluator ran in this session
        # the run's baseline as the denominator of every speedup (evolution/referee.py)
        self.rebase: Callable[[Evaluation], Evaluation] = lambda evaluation: evaluation
        # machine-code digest -> the candidate first sent to the evaluator with it
        self.twins: dict[str, int] = {
            e.data["digest"]: int(e.data["candidate"])
            for e in reversed(archive.events(run, "machine_code"))
        }
        # candidates already found to be copies (a resumed run's too): each is logged once
        self.copied = {int(e.data["candidate"]) for e in archive.events(run, COPY)}
        self._screened: dict[str, Prepared] = {}  # source hash -> a build `screen` made
        self.pace = pace or Pace(evaluate.parallelism)
        self.slots = threading.BoundedSemaphore(self.pace.slots)  # shared by every generation
        self.clock = EvaluationClock(self.pace.slots)  # slot-seconds an evaluation takes

    def on_slot(self, prepared: Prepared) -> Evaluation:
        """One evaluation of a prepared candidate holding one of the run's slots (a policy's
        child or re-check), timed for the pace."""
        with self.pace.on_slot(self.slots), self.clock.timing(1):
            (evaluation,) = self.evaluate.run([prepared])
        return evaluation

    def prepare(self, ids: Sequence[int]) -> dict[int, Prepared]:
        """The evaluator's one trip through the CPU stages for each candidate (screen, build,
        digest, a verdict reached there), by id, for `copies` and then the evaluator's `run`.
        A candidate `screen` already built is taken from there."""
        kept = {cid: self._screened.pop(self.sources[cid].source_hash, None) for cid in ids}
        rest = [cid for cid in ids if kept[cid] is None]
        ready = self.evaluate.prepare([self.sources[cid] for cid in rest]) if rest else []
        kept.update(zip(rest, ready, strict=True))
        return kept  # type: ignore[return-value]

    def screen(self, candidates: Sequence[Candidate], built: dict[str, str]) -> list[str | None]:
        """Builds each candidate (kept for `prepare`) and says what it copies: the source hash
        of the candidate the run sent with its machine code, or of one in `built` (digest ->
        source hash: the new machine code screened before in this generation, which this call
        adds to); None for new machine code, or for no digest (the build failed, or the
        evaluator gives none). A candidate is never a copy of itself (a resumed run builds
        again what it had stored)."""
        ready = self.evaluate.prepare(list(candidates)) if candidates else []
        found: list[str | None] = []
        for candidate, prepared in zip(candidates, ready, strict=True):
            self._screened[candidate.source_hash] = prepared
            digest = prepared.digest
            sent = self.twins.get(digest) if digest is not None else None
            twin = self.source(sent).source_hash if sent is not None else None
            if twin is None and digest is not None:
                twin = built.get(digest)
            if twin == candidate.source_hash:
                twin = None
            found.append(twin)
            if twin is None and digest is not None:
                built.setdefault(digest, candidate.source_hash)
        return found

    def drop_screened(self, source_hashes: Sequence[str]) -> None:
        """Forgets the builds of screened copies (never stored, so never prepared)."""
        for source_hash in source_hashes:
            self._screened.pop(source_hash, None)

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
        return [
            (self.source(o.candidate_id), o.fitness if o.status == "ok" else 0.0)
            for o in self.archive.outcomes(self.run)
            if o.generation < before
        ]

    def remember(self, candidate_id: int, candidate: Candidate) -> None:
        """Keeps the code of a candidate the caller already read (a resumed run's queue)."""
        self.sources[candidate_id] = candidate

    def store(self, child: Child, generation: int) -> int:
        """Stores an admitted child with its lineage; its id (an existing one for code the run
        already holds)."""
        cid = self.archive.add_candidate(
            self.run,
            child.candidate,
            parents=child.parents,
            kind=child.kind,
            inspirations=child.inspirations,
            agent=child.agent,
            model=child.model,
            prompt_hash=child.prompt_hash,
            island=child.island,
            generation=generation,
            attempt=child.attempt,
        )
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

    def copies(
        self, prepared: dict[int, Prepared], *, ordered: bool
    ) -> tuple[list[int], dict[int, int]]:
        """Splits the candidates `prepared` (to be evaluated, in order) into those the evaluator
        must run and the machine-code copies of earlier ones: (ids to run, {copy: original}).
        ordered: every original staged before is recorded before these ids complete (the
        offline loop, one thread, generations completed in order); otherwise an original counts
        only once its evaluation is recorded or when it is among these ids itself."""
        run, copies = [], {}
        for cid, digest in ((cid, p.digest) for cid, p in prepared.items()):
            original = self.twins.get(digest) if digest is not None else None
            usable = original is not None and (
                ordered or original in run or self.archive.evaluation_of(original) is not None
            )
            if usable and original != cid:
                copies[cid] = original  # type: ignore[assignment]
                if cid not in self.copied:  # found now: the budget counts it from here on
                    self.copied.add(cid)
                    self.archive.log_event(self.run, COPY, {"candidate": cid, "original": original})
                continue
            if digest is not None and original is None:
                self.twins[digest] = cid
                self.archive.log_event(
                    self.run, "machine_code", {"candidate": cid, "digest": digest}
                )
            run.append(cid)
        return run, copies

    def record_copy(self, cid: int, original: int) -> Evaluation:
        """Records the original's evaluation as the copy's, flagged as a copy (never run)."""
        found = self.archive.evaluation_of(original)
        if found is None:
            raise RuntimeError(f"candidate {original} has no evaluation to copy for {cid}")
        note = (
            f"{COPY_FLAG}{original} (the same machine code on this target and the same "
            "model.py): not run, its result reused"
        )
        return self.record(cid, found.model_copy(update={"flags": (*found.flags, note)}))

    def dispatch(self, ids: Sequence[int]) -> None:
        """Queues the candidates and marks them in flight: a run stopped before their results
        are recorded evaluates them first when resumed."""
        for cid in ids:
            self.archive.enqueue(cid)
        for cid in ids:
            self.archive.mark_in_flight(cid)

    def record(
        self, cid: int, evaluation: Evaluation, *, suffix: str = "", scores: bool = True
    ) -> Evaluation:
        """Records the evaluation, measured against the run's baseline, under the evaluator's
        key (`suffix`: a variant of it, such as a re-check); the evaluation that scores the
        candidate (a stored one wins, rebased too). scores: False keeps the candidate's score
        (a head-to-head's rounds)."""
        settings_key = self.evaluate.settings_key
        if suffix:
            settings_key = f"{settings_key}|{suffix}"
        return self.rebase(
            self.archive.record_evaluation(
                cid, self.rebase(evaluation), settings_key, self.evaluate.toolchain, scores=scores
            )
        )

    def add_evaluated(self, count: int) -> None:
        """Counts evaluations the evaluator ran for this session (the progress line's rate)."""
        self.evaluated_here += count
