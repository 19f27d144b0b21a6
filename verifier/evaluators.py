"""What scores candidates for the run loop: the Evaluator protocol and the production evaluator
over the verifier pipeline (tests and benches bring their own Evaluators)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol

from hipevolve.core import cpu_share
from hipevolve.core.base import canonical_json
from hipevolve.core.baseline import CaseBaseline, RunBaseline, RunBounds
from hipevolve.core.candidate import Candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import Evaluation
from hipevolve.core.taskspec import TaskSpec
from hipevolve.verifier.build.backends import device_name

if TYPE_CHECKING:
    from hipevolve.verifier.prepared import Prepared


class Evaluator(Protocol):
    """Scores a batch of candidates, results in the order given; callable from several threads
    at once (a run with settings.lag > 0 evaluates generations side by side).

    `settings_key` (canonical JSON naming the task, its cases and the verifier settings) and
    `toolchain` (compiler, runtime and device) make the archive's idempotency key: an
    evaluation with the same key is never run twice, not even by another run. `device` names
    the GPU the numbers come from (None: no device, a stand-in); `parallelism` is how many
    batches it can usefully run at once (its GPUs or workers). `close()` stops what it
    started (judges, Ray workers), once its caller is done with it.
    """

    settings_key: str
    toolchain: str
    device: str | None
    backend: str  # rocm, cuda or static: which platform's code paths the numbers come from

    @property
    def parallelism(self) -> int: ...

    def close(self) -> None: ...

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        """The candidates prepared and run: run(prepare(candidates))."""
        ...

    def prepare(self, candidates: list[Candidate]) -> list[Prepared]:
        """Each candidate's one trip through the CPU stages, in order (verifier/pipeline.py
        prepare: screen, build, digest, and any verdict reached there), handed to `run` after.
        Its `digest` is the build stage's word on what it would run: a digest of its device
        code as built for the target (ids and paths normalised: verifier/build/machine_code.py)
        and of its model.py, equal for two candidates that would run the same machine code the
        same way; None where there is none (it fails the screen or the build, a KernelBench
        file, a stand-in): the run loop then evaluates it."""
        ...

    def run(self, prepared: list[Prepared]) -> list[Evaluation]:
        """The evaluations of candidates `prepare` made ready, in order: what needs the GPU
        runs; a verdict prepare reached is returned as it is."""
        ...

    def preprocessed(self, sources: list[str]) -> list[str | None]:
        """For each kernel source, the digest of what it preprocesses to for the card that runs
        the evaluations (verifier/build/preprocessed.py): two sources with one digest build the
        same machine code. None where there is none (a failed pass, no compiler here)."""
        ...

    def baseline(self, trials: int, target: float = 0.0) -> RunBaseline | str | None:
        """The task's reference timed alone with at most `trials` trials a case (fewer once its
        median is known to `target`), on the device the evaluations run on (hipevolve/core/
        baseline.py), with the strong baselines where they come for free (a cache), the rest
        `pending`; a line saying why it could not be; None where nothing is timed (the static
        backend, stand-ins without a reference)."""
        ...

    def strong_baselines(self, trials: int, target: float = 0.0) -> RunBaseline | str | None:
        """The task's strong baselines timed as `baseline` times the reference (a run asks
        for them beside its first evaluations: RunBaseline.with_strong); None: not timed here."""
        ...

    def head_to_head(self, a: Candidate, b: Candidate, rounds: int) -> list[Evaluation]:
        """a and b evaluated alternately, `rounds` times each, in the order a b b a a b ...,
        on one device one after the other: [a, b, b, a, ...] (evolution/duel.py decides)."""
        ...

    def use_baseline(self, baseline: RunBaseline, check_every: int) -> None:
        """The run's baseline from now on: its strong baselines bound what is believable
        (RunBaseline.bounds: faster is suspect), and the reference is timed inside only every
        `check_every`-th evaluation, as a check of the machine's noise (0: never)."""
        ...


class BaseEvaluator(ABC):
    """The protocol's defaults for an evaluator that runs on no device and starts nothing (the
    stand-ins of tests and benches): one batch at a time, nothing to close. A subclass sets
    settings_key and toolchain and scores in __call__ (one without it cannot be built)."""

    settings_key: str
    toolchain: str
    device: str | None = None
    backend: str = "static"
    parallelism: int = 1

    def close(self) -> None:  # noqa: B027 (a default, deliberately empty: nothing to stop)
        """Nothing to stop."""

    @abstractmethod
    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]: ...

    def prepare(self, candidates: list[Candidate]) -> list[Prepared]:
        """Nothing is built: no digests, every candidate is evaluated."""
        from hipevolve.verifier.prepared import Prepared

        return [Prepared(candidate=c) for c in candidates]

    def run(self, prepared: list[Prepared]) -> list[Evaluation]:
        """Their candidates scored by __call__."""
        return self([p.candidate for p in prepared])

    def preprocessed(self, sources: list[str]) -> list[str | None]:
        """Nothing is built: no digests."""
        return [None] * len(sources)

    def baseline(self, trials: int, target: float = 0.0) -> RunBaseline | str | None:
        """No reference is timed: speedups are the evaluations' own."""
        return None

    def strong_baselines(self, trials: int, target: float = 0.0) -> RunBaseline | str | None:
        """Nothing is timed."""
        return None

    def head_to_head(self, a: Candidate, b: Candidate, rounds: int) -> list[Evaluation]:
        """One call per evaluation, in the duel's order."""
        return [self([c])[0] for c in duel_order(a, b, rounds)]

    def use_baseline(self, baseline: RunBaseline, check_every: int) -> None:  # noqa: B027
        """Nothing is timed here: a baseline changes nothing."""


class PipelineEvaluator:
    """The production evaluator: hipevolve.verifier.pipeline.evaluate_many for one task, on one
    worker slot per visible GPU (verifier/slots.py), kept for the evaluator's life so judges
    started during one batch serve the next. `close()` stops them."""

    def __init__(self, task: TaskSpec, settings: VerifierSettings, backend: str) -> None:
        self.task, self.settings, self.backend = task, settings, backend
        self.settings_key = settings_key(task, settings, backend)
        self.toolchain = toolchain_of(backend)
        self.device = device_name(backend)
        self._slots = None
        self._starting = threading.Lock()  # generations in flight call from several threads
        from hipevolve.verifier.pipeline import hidden_seed

        # Until the run's baseline is in: the reference timed inside. The run's hidden check
        # seed from the start (RunBounds.hidden_seed).
        self._bounds = RunBounds(hidden_seed=hidden_seed())
        # case -> the lowest bound a re-check's side-by-side baselines gave (timed_side_by_side)
        self._side_by_side: dict[str, tuple[float, str]] = {}
        self._check_every = 0
        self._started_jobs = 0
        self._warming = None  # the strong baselines' compiles (baseline_warm.Warming)

    def start(self) -> None:
        """Starts the slots' judges now rather than at the first evaluation: a run's first
        evaluation waits for a judge to be ready (torch, the device context, its sandbox: the
        first candidate of the throughput bench's warm phases waited 5-7 s on an H200), so the
        run's set-up, its baseline and the seeds' builds should come meanwhile. `close()`
        stops them."""
        self._started()

    def use_baseline(self, baseline: RunBaseline, check_every: int) -> None:
        """The run's bounds from `baseline` (RunBaseline.bounds at the settings' margins), and
        the reference timed inside every `check_every`-th evaluation only."""
        roofline = frozenset(c.name for c in self.task.cases if c.roofline)
        fastest = baseline.bounds(
            self.settings.suspect_margin, self.settings.suspect_speedup, roofline
        )
        with self._starting:
            hidden = self._bounds.hidden_seed
            fastest = _lowered(fastest, self._side_by_side)
            self._bounds = RunBounds(fastest=fastest, time_reference=False, hidden_seed=hidden)
            self._check_every = check_every

    def bounds(self) -> RunBounds:
        """The next evaluation's bounds: with its reference timed when its turn has come."""
        with self._starting:
            self._started_jobs += 1
            due = self._check_every > 0 and self._started_jobs % self._check_every == 0
            return (
                self._bounds
                if not due
                else self._bounds.model_copy(update={"time_reference": True})
            )

    @property
    def gpus(self) -> tuple[str, ...]:
        """The GPUs it runs on (ids as CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES take them)."""
        from hipevolve.verifier.slots import visible_gpus

        return visible_gpus(self.backend)

    @property
    def parallelism(self) -> int:
        """Evaluations it runs at once: one per GPU."""
        return max(1, len(self.gpus))

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        """Each candidate prepared on the CPU stages' threads and run in a slot as soon as it
        is ready, while the others compile."""
        return self._evaluate_many(list(candidates))

    def prepare(self, candidates: list[Candidate]) -> list[Prepared]:
        """pipeline.prepare on the CPU stages' threads: each candidate screened, built (its
        digest on the cuda and rocm backends) and analysed once; `run` takes it from there."""
        from hipevolve.verifier.pipeline import cpu_pool, prepare

        pool = cpu_pool(self.settings.compile_jobs or None)
        return list(
            pool.map(lambda c: prepare(c, self.task, self.settings, self.backend), candidates)
        )

    def preprocessed(self, sources: list[str]) -> list[str | None]:
        """Each source preprocessed by the backend's compiler on the CPU stages' threads (about
        0.2 s each); all None on the static backend, which builds no library."""
        from hipevolve.verifier.build.backends import compiler_for
        from hipevolve.verifier.build.compile import preprocessed_digest
        from hipevolve.verifier.pipeline import cpu_pool

        if self.backend not in ("cuda", "rocm"):
            return [None] * len(sources)
        compiler = compiler_for(self.backend)
        pool = cpu_pool(self.settings.compile_jobs or None)
        timeout_s, most = self.settings.compile_timeout_s, self.settings.max_object_bytes
        return list(pool.map(lambda s: preprocessed_digest(s, compiler, timeout_s, most), sources))

    def run(self, prepared: list[Prepared]) -> list[Evaluation]:
        """The GPU stage of each, in a slot; the verdicts prepare reached, as they are."""
        return self._evaluate_many(list(prepared))

    def _evaluate_many(self, items: list) -> list[Evaluation]:
        from hipevolve.verifier.pipeline import evaluate_many

        self._started()
        # Slots queue the jobs of concurrent calls in the order they come, one at a time a slot.
        return evaluate_many(
            items,
            self.task,
            self.settings,
            self.backend,
            slots=self._slots,
            bounds=self.bounds,
            side_by_side=self.timed_side_by_side,
        )

    def timed_side_by_side(self, timed: dict[str, dict[str, CaseBaseline]]) -> None:
        """A re-check's strong baselines, timed right after a suspect candidate on its clock and
        inputs: where one ran faster than the run's figure for a case, that case's bound comes
        from the faster time from now on. The run's figures are timed while the run starts,
        beside its compiles: on an H200, FLA's host-bound launches on the 4096-token case took
        860 us there and 360-440 us side by side, so every kernel at the seed's 250 us was
        suspect and re-checked (6 s of FLA timing and a fresh judge each, 3 s evaluations
        became 10-12 s). A bound only comes down, to the baseline's best time over the margin:
        a candidate faster than that is still suspect and re-checked."""
        margin = self.settings.suspect_margin
        with self._starting:
            side = self._side_by_side
            for name, cases in timed.items():
                for case, found in cases.items():
                    us = found.time_us / margin
                    if case not in side or us < side[case][0]:
                        why = f"{margin:g}x {name}'s {found.time_us:.1f} us side by side"
                        side[case] = (us, f"{why} in this run")
            fastest = _lowered(self._bounds.fastest, side)
            self._bounds = self._bounds.model_copy(update={"fastest": fastest})

    def _started(self):
        from hipevolve.verifier.slots import Slots

        with self._starting:
            if self._slots is None and self.backend != "static":
                cpu_share.install(self.settings.cpu_policy())  # the slots split the cores by it
                self._slots = Slots(self.backend, self.gpus)
        return self._slots

    def baseline(self, trials: int, target: float = 0.0) -> RunBaseline | str | None:
        """The stored baseline of this card, task and toolchain (verifier/baseline_cache.py),
        else the reference alone, timed in a judge of the first free slot
        (pipeline.time_baseline), its strong baselines `pending`."""
        from hipevolve.verifier import baseline_cache

        stored = baseline_cache.load(self.settings, self._cache_key())
        if stored is not None:
            self._started()  # its judges (started with the evaluator on a GPU) are needed next
            return stored
        measured = self._time(trials, target, strong=False)
        if isinstance(measured, RunBaseline):
            baseline_cache.store(self.settings, self._cache_key(), measured)
        return measured

    def strong_baselines(self, trials: int, target: float = 0.0) -> RunBaseline | str | None:
        """The strong baselines timed one case a job, each job in a judge of the first free
        slot, queued behind the evaluations already waiting: a cold FLA or FlashQLA (minutes of
        Triton and TileLang compiles and autotuning) holds the slot a case at a time, with the
        run's evaluations in between, never for minutes on end. Their kernels are compiled
        first, off the slot, while the evaluations go on (baseline_warm.Warming; on an H200
        about 40 s of each cold FLA job's 45 s), so each job then only autotunes and times.
        One unavailable in a case (not installed, outside the tolerance) is not asked for
        again. Stored with the cached reference (with_strong)."""
        from hipevolve.verifier import baseline_cache
        from hipevolve.verifier.baseline_warm import Warming

        names = tuple(b.name for b in self.task.baselines)
        compiled_s = None
        if self._started() is not None:  # their kernels compiled first, beside the evaluations
            self._warming = Warming.start(self.task, self.settings, self.backend, self.gpus)
            if self._warming is not None:
                self._warming.wait()
                compiled_s = round(self._warming.seconds(), 1)
        pieces: list[RunBaseline] = []
        for case in (c.name for c in self.task.cases if c.timed and not c.globals):
            piece = self._time(trials, target, strong=True, cases=(case,), baselines=names)
            if not isinstance(piece, RunBaseline):
                return piece  # the reference itself could not be timed: one line why
            pieces.append(piece)
            names = tuple(n for n in names if n not in piece.unavailable)
            if not names:
                break
        measured = RunBaseline.joined(pieces) if pieces else None
        if isinstance(measured, RunBaseline):
            measured = measured.model_copy(update={"compiled_s": compiled_s})
            stored = baseline_cache.load(self.settings, self._cache_key())
            kept = stored.with_strong(measured) if stored is not None else measured
            baseline_cache.store(self.settings, self._cache_key(), kept)
        return measured

    def _cache_key(self) -> str:
        from hipevolve.verifier import baseline_cache

        return baseline_cache.cache_key(self.task, self.settings, self.device or "", self.toolchain)

    def _time(
        self,
        trials: int,
        target: float,
        *,
        strong: bool,
        cases: tuple[str, ...] | None = None,
        baselines: tuple[str, ...] | None = None,
    ) -> RunBaseline | str | None:
        from hipevolve.verifier.pipeline import time_baseline

        slots = self._started()
        if slots is None:
            return None
        return slots.submit(
            lambda slot: time_baseline(
                self.task,
                self.settings,
                self.backend,
                slot.judges,
                trials=trials,
                device=self.device or "",
                toolchain=self.toolchain,
                strong=strong,
                target=target,
                cases=cases,
                baselines=baselines,
            )
        ).result()

    def head_to_head(self, a: Candidate, b: Candidate, rounds: int) -> list[Evaluation]:
        """Every evaluation of the duel on one slot (one GPU), one after the other."""
        from hipevolve.verifier.pipeline import prepare, run_prepared

        slots = self._started()
        order = duel_order(a, b, rounds)
        if slots is None:
            return self(order)
        ready = {c.source_hash: prepare(c, self.task, self.settings, self.backend) for c in (a, b)}

        def duel(slot) -> list[Evaluation]:
            bounds = self._bounds  # no noise checks inside a head-to-head
            return [
                ready[c.source_hash].done
                or run_prepared(
                    ready[c.source_hash],
                    self.task,
                    self.settings,
                    self.backend,
                    slot.judges,
                    bounds=bounds,
                )
                for c in order
            ]

        return slots.submit(duel).result()

    def close(self) -> None:
        if self._warming is not None:
            self._warming.stop()
        if self._slots is not None:
            self._slots.close()
            self._slots = None


def duel_order(a: Candidate, b: Candidate, rounds: int) -> list[Candidate]:
    """a b b a a b b a ...: each round both, the first of a pair alternating, so a steady drift
    of the machine favours neither."""
    order: list[Candidate] = []
    for r in range(rounds):
        order += [a, b] if r % 2 == 0 else [b, a]
    return order


NOT_IN_KEY = {
    "cache_dir",
    "compile_jobs",
    "ray",
    "quiet_judge",
    "cpu_work_nice",
    "judge_cores_per_slot",
}


def settings_key(task: TaskSpec, settings: VerifierSettings, backend: str) -> str:
    """Canonical JSON of what decides an evaluation's result: the task, its cases, the settings."""
    # Where the cache lives, how many cores compile, where the work runs and how the CPU is
    # shared with the judges (cpu_share) do not change one.
    verifier = settings.model_dump(mode="json", exclude=NOT_IN_KEY)
    return canonical_json(
        {
            "task": task.name,
            "cases": [c.model_dump(mode="json") for c in task.cases],
            "tolerance": task.tolerance.model_dump(mode="json"),
            "verifier": verifier | {"backend": backend},
        }
        # eager or CUDA-graph trials (TaskSpec.timing); absent when eager, so the keys of
        # evaluations archived before the field existed stay the same
        | ({"timing": task.timing} if task.timing != "eager" else {})
    )


def pipeline_evaluator(
    task: TaskSpec, verifier_settings: VerifierSettings, backend: str
) -> PipelineEvaluator:
    """An Evaluator over the verifier pipeline; backend "auto" resolves to rocm, cuda or static."""
    from hipevolve.verifier.build.backends import resolve_backend

    return PipelineEvaluator(task, verifier_settings, resolve_backend(backend))


def toolchain_of(backend: str) -> str:
    """Compiler, runtime and PyTorch of a backend on this machine, for the idempotency key."""
    import torch

    if backend in ("cuda", "rocm"):
        from hipevolve.verifier.build.backends import compiler_for

        # The compiler command names the device architecture (sm_90, gfx942) without
        # creating a GPU context in the controller.
        compiler = compiler_for(backend)
        compiler_id = f"{compiler.toolchain.strip()} | {' '.join(compiler.argv)}"
    elif backend == "static":
        from hipevolve.verifier.build.amd_static import find_toolchain

        tc = find_toolchain()
        compiler_id = f"{tc.version} {','.join(tc.targets)}" if tc else "no AMD toolchain"
    else:
        compiler_id = "no compiler"
    return f"{backend} | {compiler_id} | torch {torch.__version__}"


def _lowered(
    fastest: dict[str, tuple[float, str]], side: dict[str, tuple[float, str]]
) -> dict[str, tuple[float, str]]:
    """Each case's bound, or the side-by-side one where that is lower (a case without a bound
    gets none: its roofline decides)."""
    return {
        case: side[case] if case in side and side[case][0] < bound[0] else bound
        for case, bound in fastest.items()
    }
