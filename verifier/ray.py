"""Evaluations on a Ray cluster: compiles as CPU tasks, GPU stages in one actor per GPU.

`evolve ... --ray auto|ADDRESS` scores candidates here instead of on this machine alone. Per batch:

1. each candidate's CPU stages (pipeline.prepare: static screen, compile, AMD analysis) run as a
   Ray task (num_cpus=1) on any machine of the cluster. A compiled library travels back as
   bytes, since the actor that runs it may be on another machine;
2. each prepared candidate goes to a free worker actor. A worker holds one GPU (num_gpus=1:
   Ray sets the GPU visibility variable of its process, so its judges see that GPU alone) and
   runs pipeline.run_prepared in its own warm judges;
3. the evaluations come back in the order of the batch, whatever order the actors finish in.
   Batches called from several threads at once (a run's generations in flight) share the
   workers: one dispatcher thread makes every Ray call, and a free worker takes the ready
   candidate of the oldest batch first.

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
import heapq
import itertools
import os
import socket
import tempfile
import threading
import time
from collections import Counter, deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict

from hipevolve.core.baseline import RunBaseline, RunBounds
from hipevolve.core.candidate import Candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import Evaluation, Status
from hipevolve.core.taskspec import TaskSpec
from hipevolve.verifier.evaluators import settings_key, toolchain_of

if TYPE_CHECKING:
    from hipevolve.verifier.prepared import Prepared

LOST_LIMIT = 3  # evaluations of one candidate lost with their actor before it counts as a crash
START_LIMIT_S = 600.0  # how long a batch waits for a worker when none is alive
WAKE_S = 0.1  # how often the dispatcher looks for batches called while it waits on Ray


class WorkerState(Protocol):
    """What a worker actor keeps between evaluations (production: its warm judges, Slots);
    closed when the worker is."""

    def close(self) -> None: ...


class Stateless:
    """The WorkerState of stages that keep nothing between evaluations."""

    def close(self) -> None:
        """Nothing to close."""


class Stages(Protocol):
    """What the cluster runs: `prepare` in a CPU task, `open` and `run` in a worker actor."""

    def prepare(self, candidate: Candidate) -> Any:
        """The CPU stages; the result's `done` is the Evaluation when nothing is left to run."""
        ...

    def open(self) -> WorkerState:
        """A worker's state, made once when the actor starts (its warm judges)."""
        ...

    def run(self, prepared: Any, state: WorkerState) -> Evaluation: ...

    def describe(self) -> dict[str, str]:
        """backend, toolchain and device as this worker sees them."""
        ...


class Shipment(BaseModel):
    """A prepared candidate as it travels to a worker: the compiled library's bytes with it."""

    model_config = ConfigDict(frozen=True)

    prepared: Any  # hipevolve.verifier.pipeline.Prepared
    library: bytes | None = None
    bounds: RunBounds | None = None  # the run's, set as it is dispatched (use_baseline)

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

    def open(self) -> WorkerState:
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
            return slots.submit(
                lambda slot: run_prepared(
                    prepared,
                    self.task,
                    self.settings,
                    self.backend,
                    slot.judges,
                    bounds=shipment.bounds,
                )
            ).result()

    def baseline(self, slots, trials: int, target: float = 0.0) -> RunBaseline | str:
        from hipevolve.verifier.pipeline import time_baseline

        info = self.describe()
        return slots.submit(
            lambda slot: time_baseline(
                self.task,
                self.settings,
                self.backend,
                slot.judges,
                trials=trials,
                device=info["device"],
                toolchain=info["toolchain"],
                target=target,
            )
        ).result()

    def describe(self) -> dict[str, str]:
        from hipevolve.verifier.build.backends import device_name
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

    def baseline(self, trials: int, target: float = 0.0) -> RunBaseline | str | None:
        """None for stages that time no reference (a test's stand-ins)."""
        timer = getattr(self.stages, "baseline", None)
        return timer(self.state, trials, target) if timer is not None else None

    def head_to_head(self, order: list[Any]) -> list[Evaluation]:
        """The duel's evaluations here, on this worker's GPU, one after the other."""
        return [p.done or self.stages.run(p, self.state) for p in order]

    def close(self) -> None:
        self.state.close()


def _prepare(stages: Stages, candidate: Candidate) -> Any:
    return stages.prepare(candidate)


@dataclass(eq=False)
class _Batch:
    """One call's candidates, their evaluations as they come, and the caller's answer."""

    seq: int
    candidates: list[Candidate]
    results: list[Evaluation | None]
    answer: Future = field(default_factory=Future)
    losses: Counter = field(default_factory=Counter)  # candidate index -> evaluations lost

    def settle(self, i: int, evaluation: Evaluation) -> None:
        self.results[i] = evaluation
        if not self.answer.done() and all(r is not None for r in self.results):
            self.answer.set_result(list(self.results))

    def fail(self, error: BaseException) -> None:
        if not self.answer.done():
            self.answer.set_exception(error)


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
    """An Evaluator (verifier/evaluators.py) whose work runs on a Ray cluster."""

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
        self.task, self.backend, self.settings = task, backend, settings
        from hipevolve.verifier.pipeline import hidden_seed

        self._bounds = RunBounds(hidden_seed=hidden_seed())  # the run's (use_baseline)
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
        self._lock = threading.Lock()  # guards _called, _dispatcher and _closed
        self._called: deque[_Batch] = deque()  # batches the dispatcher has not taken yet
        self._dispatcher: threading.Thread | None = None
        self._closed = False
        self._seq = itertools.count()
        self._ready: list = []  # heap: (batch seq, index, tie, batch, prepared), oldest first
        self._tie = itertools.count()
        self._busy: dict = {}  # evaluate() ref -> (batch, index, prepared, actor, its info)
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
        self.device = described[0]["device"] or None  # "": workers on no device (stand-ins)
        self.settings_key = settings_key(task, settings, backend)
        self.workers = described

    @property
    def parallelism(self) -> int:
        """Evaluations it runs at once: one per worker."""
        return len(self.workers)

    def prepare(self, candidates: list[Candidate]) -> list[Prepared]:
        """Nothing is prepared here: the cluster's machines prepare each candidate as `run`
        sends it (a Ray task), so none has a digest and the run loop evaluates every one (a
        machine-code copy costs its GPU time on Ray)."""
        from hipevolve.verifier.prepared import Prepared

        return [Prepared(candidate=c) for c in candidates]

    def preprocessed(self, sources: list[str]) -> list[str | None]:
        """None for each: the cluster's machines build, with a compiler this one may lack, so
        on Ray no tunable is known to be inert (evolution/offline/inert.py)."""
        return [None] * len(sources)

    def run(self, prepared: list[Prepared]) -> list[Evaluation]:
        """Their candidates evaluated on the cluster, CPU stages included (__call__)."""
        return self([p.candidate for p in prepared])

    def _one_worker(self):
        """A started worker for work that must stay on one GPU (a baseline, a head-to-head);
        an actor runs its calls one at a time, so it queues behind any evaluation it has."""
        with self._lock:
            return self._free[0][0] if self._free else next(iter(self._busy.values()))[3]

    def baseline(self, trials: int, target: float = 0.0) -> RunBaseline | str | None:
        """The reference and the strong baselines on one worker's GPU (pipeline.time_baseline):
        nothing pending, nothing cached (the workers are other machines)."""
        return self._ray.get(self._one_worker().baseline.remote(trials, target))

    def strong_baselines(self, trials: int, target: float = 0.0) -> RunBaseline | str | None:
        """None: `baseline` timed them already."""
        return None

    def use_baseline(self, baseline: RunBaseline, check_every: int) -> None:
        """The run's suspect bounds travel with each shipment from now on (RunBaseline.bounds);
        on Ray the reference is not timed inside evaluations (no periodic noise check)."""
        roofline = frozenset(c.name for c in self.task.cases if c.roofline)
        self._bounds = RunBounds(
            fastest=baseline.bounds(
                self.settings.suspect_margin, self.settings.suspect_speedup, roofline
            ),
            time_reference=False,
            hidden_seed=self._bounds.hidden_seed,
        )

    def head_to_head(self, a: Candidate, b: Candidate, rounds: int) -> list[Evaluation]:
        """Every evaluation of the duel on one worker's GPU, one after the other."""
        from hipevolve.verifier.evaluators import duel_order

        shipped = dict(
            zip(
                (a.source_hash, b.source_hash),
                self._ray.get([self._prepare_task.remote(self._stages_ref, c) for c in (a, b)]),
                strict=True,
            )
        )
        order = [shipped[c.source_hash] for c in duel_order(a, b, rounds)]
        return self._ray.get(self._one_worker().head_to_head.remote(order))

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
        """The candidates' evaluations, in their order. Safe to call from several threads."""
        if not candidates:
            return []
        batch = _Batch(next(self._seq), list(candidates), [None] * len(candidates))
        with self._lock:
            if self._closed:
                raise RuntimeError("the Ray evaluator is closed")
            self._called.append(batch)
            if self._dispatcher is None:
                self._dispatcher = threading.Thread(
                    target=self._dispatch, name="ray-dispatcher", daemon=True
                )
                self._dispatcher.start()
        return batch.answer.result()

    def _take_called(self, preparing: dict) -> bool:
        """Starts the CPU stages of the batches called since; False once nothing is left to do
        (the dispatcher then ends, under the lock, so a call made meanwhile starts another)."""
        with self._lock:
            while self._called:
                batch = self._called.popleft()
                for i, c in enumerate(batch.candidates):
                    preparing[self._prepare_task.remote(self._stages_ref, c)] = (batch, i)
            if self._closed or not (preparing or self._ready or self._busy):
                self._dispatcher = None
                return False
            return True

    def _dispatch(self) -> None:
        """The one thread that makes Ray calls for every batch in flight."""
        ray = self._ray
        preparing: dict = {}  # prepare() ref -> (batch, index)
        try:
            idle_since = time.monotonic()
            while self._take_called(preparing):
                while self._ready and self._free:
                    _, i, _, batch, prepared = heapq.heappop(self._ready)
                    if batch.answer.done():  # it failed: the rest of it need not run
                        continue
                    actor, info = self._free.popleft()
                    if isinstance(prepared, Shipment):
                        prepared = prepared.model_copy(update={"bounds": self._bounds})
                    self._busy[actor.evaluate.remote(prepared)] = (batch, i, prepared, actor, info)
                pending = [*preparing, *self._busy, *self._starting]
                done, _ = ray.wait(pending, num_returns=1, timeout=WAKE_S)
                if not done:
                    if (
                        not self._busy
                        and not self._free
                        and time.monotonic() - idle_since > START_LIMIT_S
                    ):
                        raise UserError(
                            f"no Ray worker has been alive for {START_LIMIT_S:.0f} s "
                            f"(cluster: {ray.cluster_resources()})",
                            "free the cluster's GPUs or add machines; then resume the run",
                        )
                    continue
                idle_since = time.monotonic()
                ref = done[0]
                if ref in preparing:
                    self._prepared(ref, *preparing.pop(ref))
                elif ref in self._starting:
                    actor = self._starting.pop(ref)
                    try:
                        self._free.append((actor, ray.get(ref)))
                    except ray.exceptions.RayActorError:
                        self._start_worker()
                else:
                    self._evaluated(ref)
        except BaseException as e:  # noqa: BLE001 (every caller hears of it; none waits forever)
            with self._lock:
                self._dispatcher = None
            self._fail_waiting(preparing, e)
        else:
            if self._closed:
                self._fail_waiting(preparing, RuntimeError("the Ray evaluator was closed"))

    def _fail_waiting(self, preparing: dict, error: BaseException) -> None:
        """Every batch not yet answered gets `error`: no caller waits forever."""
        with self._lock:
            waiting = [*self._called, *(b for b, _ in preparing.values())]
            self._called.clear()
        waiting += [entry[3] for entry in self._ready] + [b for b, *_ in self._busy.values()]
        for batch in waiting:
            batch.fail(error)

    def _prepared(self, ref: Any, batch: _Batch, i: int) -> None:
        try:
            prepared = self._ray.get(ref)
        except self._ray.exceptions.RayTaskError as e:  # the task's own error: a full disk, ...
            batch.fail(e)  # also an instance of the error's own class (OSError, ...)
            return
        if prepared.done is not None:
            batch.settle(i, prepared.done)
        elif not batch.answer.done():
            heapq.heappush(self._ready, (batch.seq, i, next(self._tie), batch, prepared))

    def _evaluated(self, ref: Any) -> None:
        """An evaluation came back, or its worker died: queued again, first, up to LOST_LIMIT."""
        batch, i, prepared, actor, info = self._busy.pop(ref)
        try:
            evaluation = self._ray.get(ref)
        except self._ray.exceptions.RayActorError as e:
            self.lost += 1
            batch.losses[i] += 1
            self._start_worker()  # the lost one's replacement
            if batch.losses[i] >= LOST_LIMIT:
                batch.settle(i, _lost(self.task, self.backend, batch.losses[i], e))
            else:
                heapq.heappush(self._ready, (batch.seq, i, next(self._tie), batch, prepared))
            return
        self._free.append((actor, info))
        self.served[_worker_name(info)] += 1
        batch.settle(i, evaluation)

    def close(self) -> None:
        ray = self._ray
        with self._lock:
            self._closed = True
            dispatcher = self._dispatcher
        if dispatcher is not None:
            dispatcher.join(timeout=WAKE_S + 5)
        busy = [entry[3] for entry in self._busy.values()]
        actors = [a for a, _ in self._free] + list(self._starting.values()) + busy
        # A worker that cannot close its judges is killed with them below.
        with contextlib.suppress(ray.exceptions.RayError, ray.exceptions.GetTimeoutError):
            ray.get([a.close.remote() for a in actors], timeout=60)
        for actor in actors:
            ray.kill(actor)
        self._free.clear()
        self._starting.clear()
        self._busy.clear()
        if self._joined:
            ray.shutdown()  # leaves a cluster it joined running; stops one it started


def _worker_name(info: dict[str, str]) -> str:
    return f"gpu {info['gpu']}" if info.get("gpu") else f"pid {info['pid']}"


def _lost(task: TaskSpec, backend: str, times: int, error: Exception) -> Evaluation:
    why = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return Evaluation(
        status=Status.runtime_error,
        task=task.name,
        backend=backend,
        message=f"its Ray worker died {times} times while evaluating it ({why})",
    )
