"""What scores candidates for the run loop: the Evaluator protocol and the production evaluator
over the verifier pipeline (tests and benches bring their own Evaluators)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Protocol

from hipevolve.core import cpu_share
from hipevolve.core.base import canonical_json
from hipevolve.core.baseline import RunBaseline
from hipevolve.core.candidate import Candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import Evaluation
from hipevolve.core.taskspec import TaskSpec
from hipevolve.verifier.build.backends import device_name


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

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]: ...

    def digests(self, candidates: list[Candidate]) -> list[str | None]:
        """The build stage's word on what each candidate would run, in order: a digest of its
        device code as built for the target (ids and paths normalised: verifier/build/
        machine_code.py) and of its model.py, equal for two candidates that would run the same
        machine code the same way; None where there is none (it fails the screen or the build,
        a KernelBench file, a stand-in): the run loop then evaluates it."""
        ...

    def baseline(self, trials: int) -> RunBaseline | str | None:
        """The task's reference timed alone with `trials` trials a case, on the device the
        evaluations run on (hipevolve/core/baseline.py); a line saying why it could not be;
        None where nothing is timed (the static backend, stand-ins without a reference)."""
        ...

    def head_to_head(self, a: Candidate, b: Candidate, rounds: int) -> list[Evaluation]:
        """a and b evaluated alternately, `rounds` times each, in the order a b b a a b ...,
        on one device one after the other: [a, b, b, a, ...] (evolution/duel.py decides)."""
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

    def digests(self, candidates: list[Candidate]) -> list[str | None]:
        """Nothing is built: no digests, every candidate is evaluated."""
        return [None] * len(candidates)

    def baseline(self, trials: int) -> RunBaseline | str | None:
        """No reference is timed: speedups are the evaluations' own."""
        return None

    def head_to_head(self, a: Candidate, b: Candidate, rounds: int) -> list[Evaluation]:
        """One call per evaluation, in the duel's order."""
        return [self([c])[0] for c in duel_order(a, b, rounds)]


class PipelineEvaluator:
    """The production evaluator: hipevolve.verifier.pipeline.evaluate_many for one task, on one
    worker slot per visible GPU (verifier/gpu/slots.py), kept for the evaluator's life so judges
    started during one batch serve the next. `close()` stops them."""

    def __init__(self, task: TaskSpec, settings: VerifierSettings, backend: str) -> None:
        self.task, self.settings, self.backend = task, settings, backend
        self.settings_key = settings_key(task, settings, backend)
        self.toolchain = toolchain_of(backend)
        self.device = device_name(backend)
        self._slots = None
        self._starting = threading.Lock()  # generations in flight call from several threads

    @property
    def gpus(self) -> tuple[str, ...]:
        """The GPUs it runs on (ids as CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES take them)."""
        from hipevolve.verifier.gpu.slots import visible_gpus

        return visible_gpus(self.backend)

    @property
    def parallelism(self) -> int:
        """Evaluations it runs at once: one per GPU."""
        return max(1, len(self.gpus))

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        from hipevolve.verifier.pipeline import evaluate_many

        self._started()
        # Slots queue the jobs of concurrent calls in the order they come, one at a time a slot.
        return evaluate_many(list(candidates), self.task, self.settings, self.backend,
                             slots=self._slots)  # fmt: skip

    def digests(self, candidates: list[Candidate]) -> list[str | None]:
        """Built on the CPU stages' threads (the compile cache keeps each library for the
        evaluation that may follow): pipeline.machine_digest; None for each on the static
        backend, which runs nothing."""
        from hipevolve.verifier.build.backends import compiler_for
        from hipevolve.verifier.pipeline import cpu_pool, machine_digest

        if self.backend not in ("cuda", "rocm"):
            return [None] * len(candidates)
        compiler = compiler_for(self.backend)
        pool = cpu_pool(self.settings.compile_jobs or None)
        return list(pool.map(lambda c: machine_digest(c, self.settings, compiler), candidates))

    def _started(self):
        from hipevolve.verifier.gpu.slots import Slots

        with self._starting:
            if self._slots is None and self.backend != "static":
                cpu_share.install(self.settings.cpu_policy())  # the slots split the cores by it
                self._slots = Slots(self.backend, self.gpus)
        return self._slots

    def baseline(self, trials: int) -> RunBaseline | str | None:
        """The reference alone in a judge of the first free slot (pipeline.time_baseline)."""
        from hipevolve.verifier.pipeline import time_baseline

        slots = self._started()
        if slots is None:
            return None
        return slots.submit(lambda slot: time_baseline(
            self.task, self.settings, self.backend, slot.judges, trials=trials,
            device=self.device or "", toolchain=self.toolchain)).result()  # fmt: skip

    def head_to_head(self, a: Candidate, b: Candidate, rounds: int) -> list[Evaluation]:
        """Every evaluation of the duel on one slot (one GPU), one after the other."""
        from hipevolve.verifier.pipeline import prepare, run_prepared

        slots = self._started()
        order = duel_order(a, b, rounds)
        if slots is None:
            return self(order)
        ready = {c.source_hash: prepare(c, self.task, self.settings, self.backend)
                 for c in (a, b)}  # fmt: skip

        def duel(slot) -> list[Evaluation]:
            return [ready[c.source_hash].done or run_prepared(
                ready[c.source_hash], self.task, self.settings, self.backend, slot.judges)
                for c in order]  # fmt: skip

        return slots.submit(duel).result()

    def close(self) -> None:
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


NOT_IN_KEY = {"cache_dir", "compile_jobs", "ray", "quiet_judge", "cpu_work_nice",
              "judge_cores_per_slot"}


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
