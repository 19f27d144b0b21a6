"""How many graph runs a run with a model keeps in flight, and how far its plans may lag: chosen
from the evaluator's slots and the latencies measured so far (Little's law), unless the user set
them (agents.concurrency, evolution.lag in hipevolve.toml).

A slot stays busy only if a candidate is waiting whenever it frees. A graph run spends
`propose_s` in model calls (their latencies as the client measured them) and holds a slot
`evaluations` times (its child, a re-check, repairs; under 1 where runs end without one: a
reply that fails, a machine-code copy) for `evaluate_s` each. The slots finish
slots / evaluate_s evaluations a second, so by Little's law the graph runs in flight that
keep them fed are

    slots * (propose_s + evaluations * evaluate_s) / (evaluations * evaluate_s)

plus one waiting per slot for the spread of latencies, within [slots, MOST_IN_FLIGHT]. The
graph run's own CPU work (prompts, the static screen) is left out on purpose: where the
controller's CPU is what limits, more graph runs in flight only lengthen it (`writing_s`, the
wall time less slot waits, is measured and reported, not used). Graph
runs of every generation in flight share that bound (a Gate, oldest generation first), so a
slow proposal of one generation never leaves the others' turns unused. A generation of P
proposals is planned only once the generation `lag` before it is in, so at most (lag + 1) * P
proposals are open at once; a paced run takes lag = ceil(in flight / P), at most its recorded
bound (evolution.lag), so a generation's tail never starves the slots.

Latencies are moving averages (weight ALPHA on the newest). Each generation's decision (its lag,
the concurrency, the latencies it rests on) is logged as a `pace` event when first made; a
resumed run plans a generation that has one with that lag, so its parents are drawn from the same
islands. The concurrency itself changes no plan and is re-decided as latencies move.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from pydantic import Field

from hipevolve.core.base import Frozen

EVENT = "pace"
MOST_IN_FLIGHT = 64  # agents.concurrency's own upper bound
MOST_LAG = 4  # evolution.lag's upper bound: how many checkpoints a resume restores
PRIOR_PER_SLOT = 4  # graph runs per slot before anything is measured
ALPHA = 0.2  # weight of the newest measurement in the moving averages
MIN_PER_RUN = 0.25  # slot holds a graph run is taken to bring, at the least


class Decision(Frozen):
    """What a generation was planned with (the data of a `pace` event)."""

    generation: int
    lag: int = Field(description="the generation was planned from the islands after g - 1 - lag")
    concurrency: int = Field(description="graph runs in flight when it was planned")
    propose_s: float | None = Field(description="moving average of a graph run's model time")
    evaluate_s: float | None = Field(description="moving average of a slot hold")
    evaluations_per_run: float | None = Field(description="slot holds per graph run")


class Pace:
    """Measured latencies and what they decide; thread-safe."""

    def __init__(
        self, slots: int, *, concurrency: int | None = None, lag_bound: int | None = None
    ) -> None:
        """`concurrency`: fixed by the user (None: from the latencies). `lag_bound`: a paced lag
        up to this bound (None: the run's settings.lag, fixed)."""
        self.slots, self.fixed, self.lag_bound = max(1, slots), concurrency, lag_bound
        self.propose_s: float | None = None  # model-call seconds a graph run
        self.writing_s: float | None = None  # wall seconds a graph run, less its slot waits
        self.evaluate_s: float | None = None  # seconds a slot hold
        self._holds = self._runs = 0
        self._decided: dict[int, Decision] = {}
        self._lock = threading.Lock()
        self._local = threading.local()  # per graph run: seconds at a slot, in model calls
        self.gate = Gate(self.concurrency)

    # ------------------------------------------------------------------ measuring

    @contextmanager
    def on_slot(self, slots: threading.Semaphore) -> Iterator[None]:
        """Holds one of the run's slots for one evaluation: the hold is measured, and the
        wait and hold are not counted as the calling graph run's writing time."""
        began = time.monotonic()
        with slots:
            start = time.monotonic()
            try:
                yield
            finally:
                held = time.monotonic() - start
                self._local.away = getattr(self._local, "away", 0.0) + time.monotonic() - began
                with self._lock:
                    self.evaluate_s = _average(self.evaluate_s, held)
                    self._holds += 1

    def called(self, seconds: float) -> None:
        """One model call of the calling graph run took `seconds` (the client's latency)."""
        self._local.model = getattr(self._local, "model", 0.0) + seconds

    @contextmanager
    def writing(self) -> Iterator[None]:
        """One graph run (inside its turn at the gate): its model time and its wall time less
        its waits for and holds of a slot are measured."""
        self._local.away = self._local.model = 0.0
        began = time.monotonic()
        try:
            yield
        finally:
            writing = max(0.0, time.monotonic() - began - self._local.away)
            with self._lock:
                self.propose_s = _average(self.propose_s, self._local.model)
                self.writing_s = _average(self.writing_s, writing)
                self._runs += 1

    # ------------------------------------------------------------------ deciding

    def counts(self) -> tuple[int, int]:
        """Graph runs written and slot holds, so far."""
        with self._lock:
            return self._runs, self._holds

    def evaluations_per_run(self) -> float | None:
        """Slot holds a graph run brings, as measured: under 1 where runs end without a GPU
        evaluation (a reply that failed to parse or compile, a machine-code copy), which
        is what asks for more runs in flight; at least MIN_PER_RUN."""
        with self._lock:
            return max(MIN_PER_RUN, self._holds / self._runs) if self._runs else None

    def concurrency(self) -> int:
        """Graph runs in flight: the user's, or Little's law over the measured latencies."""
        if self.fixed is not None:
            return self.fixed
        per_run = self.evaluations_per_run()
        with self._lock:
            propose_s, evaluate_s = self.propose_s, self.evaluate_s
        if propose_s is None or not evaluate_s or per_run is None:
            return min(MOST_IN_FLIGHT, PRIOR_PER_SLOT * self.slots)
        busy_s = per_run * evaluate_s
        wanted = self.slots * (propose_s + busy_s) / busy_s + self.slots
        return max(self.slots, min(MOST_IN_FLIGHT, math.ceil(wanted)))

    def lag(self, generation: int, proposals: int, fixed: int) -> int:
        """Generation `generation`'s lag: recorded (a resumed run), decided now (a paced run,
        logged through `log`), or `fixed` (the run's settings.lag)."""
        if self.lag_bound is None:
            return fixed
        with self._lock:
            known = self._decided.get(generation)
        if known is not None:
            return known.lag
        concurrency = self.concurrency()
        lag = max(1, min(self.lag_bound, math.ceil(concurrency / max(1, proposals))))
        decision = Decision(
            generation=generation,
            lag=lag,
            concurrency=concurrency,
            propose_s=self.propose_s,
            evaluate_s=self.evaluate_s,
            evaluations_per_run=self.evaluations_per_run(),
        )
        with self._lock:
            self._decided[generation] = decision
        self.log(decision)
        return lag

    def log(self, decision: Decision) -> None:
        """Where decisions go (the run's `pace` events; set by the run loop)."""

    def restore(self, recorded: Iterable[dict]) -> None:
        """A resumed run's recorded decisions (the data of its `pace` events)."""
        for data in recorded:
            decision = Decision.model_validate(data)
            self._decided[decision.generation] = decision

    def line(self) -> str:
        """One line for a report: the latencies measured and what they decide."""

        def s(v: float | None) -> str:
            return "?" if v is None else f"{v:.2f} s"

        per_run = self.evaluations_per_run()
        return (
            f"model calls {s(self.propose_s)} a graph run (wall {s(self.writing_s)} less slot "
            f"waits), {s(self.evaluate_s)} a slot hold, "
            f"{'?' if per_run is None else f'{per_run:.2f}'} holds a run, "
            f"{self.slots} slots -> {self.concurrency()} graph runs in flight"
        )


class Gate:
    """At most capacity() holders at once, the smallest waiting turn first."""

    def __init__(self, capacity: Callable[[], int]) -> None:
        """`capacity`: read again whenever a holder leaves, and now and then while waiting."""
        self.capacity = capacity
        self.inside = self.most = 0
        self._waiting: list[tuple[int, int]] = []
        self._changed = threading.Condition()

    @contextmanager
    def turn(self, turn: tuple[int, int]) -> Iterator[None]:
        with self._changed:
            self._waiting.append(turn)
            # capacity() moves with the measurements: look again now and then
            while min(self._waiting) != turn or self.inside >= self.capacity():
                self._changed.wait(0.2)
            self._waiting.remove(turn)
            self.inside += 1
            self.most = max(self.most, self.inside)
            self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self.inside -= 1
                self._changed.notify_all()


def _average(old: float | None, new: float) -> float:
    return new if old is None else (1 - ALPHA) * old + ALPHA * new
