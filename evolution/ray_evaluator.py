"""Evaluations on a Ray cluster: compiles as CPU tasks, GPU stages in one actor per GPU.

`evolve ... --ray auto|ADDRESS` scores candidates here instead of on this machine alone. Per batch:

1. each candidate's CPU stages (pipeline.prepare: static screen, compile, AMD analysis) run as a
   Ray task (num_cpus=1) on any machine of the cluster. A compiled library travels back as
   bytes, since the actor that runs it may be on another machine;
2. each prepared candidate goes to a free worker actor. A worker holds one GPU (num_gpus=1:
   Ray sets the GPU visibility variable of its process, so its judges see that GPU alone) and
   runs pipeline.run_prepared in its own warm judges;
3. the evaluations come back in the order of the batch, whatever order the actors finish in.
   Batches called from several threads at once (a run's generations in flight) take turns.

The controller (this process) stays the archive's only writer: tasks and actors return
Evaluations and write nothing, so a run's semantics are those of a local run. An actor that
dies (its machine lost, its process killed) loses only the evaluation it was running: that
evaluation is queued again, first, a replacement actor is started, and the batch goes on with
the actors that are left. A candidate whose evaluation is lost LOST_LIMIT times is recorded as a
runtime_error (a crash) rather than retried forever.

Every machine of the cluster needs hipevolve installed (the same version) and, for a GPU
backend, its compiler; `Stages` says what runs where, so tests can run the scheduling over
CPU actors with stages of their own.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from hipevolve.config import VerifierSettings
from hipevolve.errors import UserError
from hipevolve.evolution.evaluators import settings_key, toolchain_of
from hipevolve.taskspec import TaskSpec
from hipevolve.verifier.candidate import Candidate
from hipevolve.verifier.evaluation import Evaluation, Status

LOST_LIMIT = 3  # evaluations of one candidate lost with their actor before it counts as a crash
START_LIMIT_S = 600.0  # how long a batch waits for a worker when none is alive


class Stages(Protocol):
    """What the cluster runs: `prepare` in a CPU task, `open` and `run` in a worker actor."""

    def prepare(self, candidate: Candidate) -> Any:
        """The CPU stages; the result's `done` is the Evaluation when nothing is left to run."""
        ...

    def open(self) -> Any:
        """A worker's state, made once when the actor starts (its warm judges)."""
        ...

    def run(self, prepared: Any, state: Any) -> Evaluation: ...

    def describe(self) -> dict[str, str]:
        """backend, toolchain and device as this worker sees them."""
        ...


class Shipment(BaseModel):
    """A prepared candidate as it travels to a worker: the compiled library's bytes with it."""

    model_config = ConfigDict(frozen=True)

    prepared: Any  # hipevolve.verifier.pipeline.Prepared
    library: bytes | None = None

    @property
    def done(self) -> Evaluation | None:
        return self.prepared.done


class PipelineStages:
    """The verifier pipeline split at the GPU: production's Stages."""

    def __init__(self, task: TaskSpec, settings: VerifierSettings, backend: str) -> None:
        self.task, self.settings, self.backend = task, settings, backend

    def prepare(self, candidate: Candidate) -> Shipment:
        from hipevolve.verifier.pipeline import prepare

        prepared = prepare(candidate, self.task, self.settings, self.backend)
        library = prepared.library.read_bytes() if prepared.library is not None else None
        return Shipment(prepared=prepared, library=library)

    def open(self):
        from hipevolve.verifier.slots import Slots

        # One slot: Ray has already pinned this process to its GPU.
        return Slots(self.backend, ())

    def run(self, shipment: Shipment, slots) -> Evaluation:
        from hipevolve.verifier.pipeline import run_prepared

        prepared = shipment.prepared
        with tempfile.TemporaryDirectory(prefix="hipevolve-ray-") as folder:
            if shipment.library is not None:
                library = Path(folder) / "lib.so"
                library.write_bytes(shipment.library)
                prepared = prepared.model_copy(update={"library": library})
            return slots.submit(lambda slot: run_prepared(
                prepared, self.task, self.settings, self.backend, slot.judges)).result()

    def describe(self) -> dict[str, str]:
        from hipevolve.verifier.backends import device_name
        from hipevolve.verifier.slots import visibility_variable

        return {
            "backend": self.backend,
            "toolchain": toolchain_of(self.backend),
            "device": device_name(self.backend),
            "gpu": os.environ.get(visibility_variable(self.backend), ""),
        }


class _Worker:
    """The actor: one GPU (or one CPU for the cpu and static backends), its warm judges."""

    def __init__(self, stages: Stages) -> None:
        self.stages = stages
        self.state = stages.open()

    def describe(self) -> dict[str, str]:
        return self.stages.describe() | {"pid": str(os.getpid())}

    def evaluate(self, prepared: Any) -> Evaluation:
        return self.stages.run(prepared, self.state)

    def close(self) -> None:
        close = getattr(self.state, "close", None)
        if close is not None:
            close()


def _prepare(stages: Stages, candidate: Candidate) -> Any:
    return stages.prepare(candidate)


def connect(address: str) -> bool:
    """Joins the cluster at `address`; "auto": the one this machine belongs to, else a new one
    on this machine alone. False when this process had already joined one (a test's cluster).
    One-line UserError when the cluster cannot be reached."""
    import ray

    if ray.is_initialized():
        return False
    quiet = {"log_to_driver": False, "logging_level": "ERROR"}
    if address == "auto":
        try:
            ray.init(address="auto", **quiet)
        except ConnectionError:  # no cluster here: start one on this machine's CPUs and GPUs
            ray.init(include_dashboard=False, **quiet)
        return True
    fix = "start one with `ray start --head` and pass the address it prints, or --ray auto"
    # Ray retries an unreachable address for minutes: ask the port first.
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not HOST:PORT"
        raise UserError(f"--ray {address}: no Ray cluster there ({why})", fix) from None
    try:
        ray.init(address=address, **quiet)
    except (ConnectionError, ValueError) as e:
        raise UserError(
            f"--ray {address}: no Ray cluster there ({str(e).splitlines()[0]})", fix
        ) from None
    return True


class RayEvaluator:
    """An Evaluator (evolution/evaluators.py) whose work runs on a Ray cluster."""

    def __init__(
        self,
        task: TaskSpec,
        settings: VerifierSettings,
        backend: str,
        address: str = "auto",
        *,
        stages: Stages | None = None,
        workers: int | None = None,
    ) -> None:
        """backend: cuda or rocm run workers with one GPU each, one per GPU of the cluster;
        cpu and static run `workers` CPU workers (default 2). `stages` replaces the pipeline."""
        import ray

        self._joined = connect(address)
        self._ray = ray
        self.task, self.backend = task, backend
        gpu = backend in ("cuda", "rocm")
        if gpu:
            gpus = int(ray.cluster_resources().get("GPU", 0))
            if gpus < 1:
                raise UserError(
                    f"the Ray cluster has no GPUs (resources: {ray.cluster_resources()})",
                    "start its GPU machines with `ray start --address=HEAD` so Ray counts them",
                )
            workers = gpus if workers is None else workers
            self._options = {"num_gpus": 1, "num_cpus": 1}
        else:
            workers = workers or 2
            self._options = {"num_cpus": 1}
        self._stages = stages or PipelineStages(task, settings, backend)
        self._stages_ref = ray.put(self._stages)
        self._prepare_task = ray.remote(num_cpus=1)(_prepare)
        self._actor_class = ray.remote(_Worker)
        self._free: deque = deque()  # (actor, what its describe() said)
        self._starting: dict = {}  # describe() ref -> actor
        self.served: Counter[str] = Counter()  # worker's GPU (or pid) -> evaluations it returned
        self.lost = 0  # evaluations lost with their actor and queued again
        self._turn = threading.Lock()
        for _ in range(workers):
            self._start_worker()
        described = self._wait_for_workers()
        toolchains = {d["toolchain"] for d in described}
        if len(toolchains) > 1:
            raise UserError(
                "the cluster's workers differ: " + " / ".join(sorted(toolchains)),
                "give every machine the same GPU kind, compiler and PyTorch",
            )
        self.toolchain = toolchains.pop()
        self.device = described[0]["device"]
        self.settings_key = settings_key(task, settings, backend)
        self.workers = described

    @property
    def parallelism(self) -> int:
        """Evaluations it runs at once: one per worker."""
        return len(self.workers)

    # ---------------------------------------------------------------------------- workers

    def _start_worker(self) -> None:
        actor = self._actor_class.options(**self._options).remote(self._stages_ref)
        self._starting[actor.describe.remote()] = actor

    def _wait_for_workers(self) -> list[dict[str, str]]:
        described = []
        for ref, actor in list(self._starting.items()):
            try:
                described.append(self._ray.get(ref, timeout=START_LIMIT_S))
            except self._ray.exceptions.GetTimeoutError:
                raise UserError(
                    f"a Ray worker did not start within {START_LIMIT_S:.0f} s "
                    f"(asks for {self._options}; cluster: {self._ray.cluster_resources()})",
                    "free the cluster's GPUs, or add machines",
                ) from None
            del self._starting[ref]
            self._free.append((actor, described[-1]))
        return described

    # ---------------------------------------------------------------------------- a batch

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        # The workers are shared state: concurrent calls (generations in flight) take turns.
        with self._turn:
            return self._evaluate(candidates)

    def _evaluate(self, candidates: list[Candidate]) -> list[Evaluation]:
        ray = self._ray
        results: list[Evaluation | None] = [None] * len(candidates)
        preparing = {
            self._prepare_task.remote(self._stages_ref, c): i for i, c in enumerate(candidates)
        }
        ready: deque[tuple[int, Any]] = deque()  # prepared, waiting for a free worker
        running: dict = {}  # evaluate() ref -> (index, prepared, actor)
        losses: Counter[int] = Counter()
        idle_since = time.monotonic()
        while preparing or ready or running:
            while ready and self._free:
                i, prepared = ready.popleft()
                actor, info = self._free.popleft()
                running[actor.evaluate.remote(prepared)] = (i, prepared, actor, info)
            pending = [*preparing, *running, *self._starting]
            done, _ = ray.wait(pending, num_returns=1, timeout=60.0)
            if not done:
                if not running and not self._free and time.monotonic() - idle_since > START_LIMIT_S:
                    raise UserError(
                        f"no Ray worker has been alive for {START_LIMIT_S:.0f} s "
                        f"(cluster: {ray.cluster_resources()})",
                        "free the cluster's GPUs or add machines; then resume the run",
                    )
                continue
            idle_since = time.monotonic()
            ref = done[0]
            if ref in preparing:
                i = preparing.pop(ref)
                prepared = ray.get(ref)  # a task's own error (a full disk, ...) is raised here
                if prepared.done is not None:
                    results[i] = prepared.done
                else:
                    ready.append((i, prepared))
            elif ref in self._starting:
                actor = self._starting.pop(ref)
                try:
                    self._free.append((actor, ray.get(ref)))
                except ray.exceptions.RayActorError:
                    self._start_worker()
            else:
                i, prepared, actor, info = running.pop(ref)
                try:
                    results[i] = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    self.lost += 1
                    losses[i] += 1
                    self._start_worker()  # the lost one's replacement
                    if losses[i] >= LOST_LIMIT:
                        results[i] = _lost(self.task, self.backend, losses[i], e)
                    else:
                        ready.appendleft((i, prepared))
                    continue
                self._free.append((actor, info))
                self.served[_worker_name(info)] += 1
        return [r for r in results if r is not None]

    def close(self) -> None:
        ray = self._ray
        actors = [a for a, _ in self._free] + list(self._starting.values())
        # A worker that cannot close its judges is killed with them below.
        with contextlib.suppress(ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            ray.get([a.close.remote() for a in actors], timeout=60)
        for actor in actors:
            ray.kill(actor)
        self._free.clear()
        self._starting.clear()
        if self._joined:
            ray.shutdown()  # leaves a cluster it joined running; stops one it started


def _worker_name(info: dict[str, str]) -> str:
    return f"gpu {info['gpu']}" if info.get("gpu") else f"pid {info['pid']}"


def _lost(task: TaskSpec, backend: str, times: int, error: Exception) -> Evaluation:
    why = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return Evaluation(
        status=Status.runtime_error, task=task.name, backend=backend,
        message=f"its Ray worker died {times} times while evaluating it ({why})",
    )  # fmt: skip
