"""How long an evaluation takes on a slot, measured as evaluations complete: the ETA's clock.

Evaluations a minute since the start count the start-up (the run's baseline, the first judges)
as if it were evaluating: after the first GDN evaluation on an H200 the panel said "0.2/min,
21h13m left" for a run of well under an hour (issue 47). The clock times only the evaluator's
calls. While calls are out it adds up the slots they hold: a call of n evaluations holds
min(n, width) slots (width: the slots it may use, one for a head-to-head, which runs on one GPU),
and all calls together at most the evaluator's slots, so generations in flight that queue on the
same slots are not counted twice. Slot-seconds over evaluations completed is the wall time one
evaluation holds a slot; the rest of the budget takes that times the units left, over the slots.
A batch returns all at once, so within it the clock sees no completion before the last: it
holds its slots to the end, which is what a batch wider than the slots does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class EvaluationClock:
    """Slot-seconds the evaluator's calls held, and the evaluations they completed; thread-safe
    (generations in flight and a policy's children call from threads of their own)."""

    def __init__(self, slots: int, now: Callable[[], float] = time.monotonic) -> None:
        self.slots, self._now = max(1, slots), now
        self._held = 0  # slots the calls out now hold, before the cap at self.slots
        self._since = 0.0  # when _held last changed
        self._slot_seconds = 0.0
        self._completed = 0
        self._lock = threading.Lock()

    @contextmanager
    def timing(self, evaluations: int, width: int | None = None) -> Iterator[None]:
        """Times one call of the evaluator that runs `evaluations` on up to `width` slots
        (None: any of them); its evaluations count as completed when it returns."""
        held = max(0, min(evaluations, self.slots if width is None else width))
        self._change(held)
        completed = 0
        try:
            yield
            completed = evaluations
        finally:
            self._change(-held, completed)

    def _change(self, held: int, completed: int = 0) -> None:
        with self._lock:
            now = self._now()
            if self._held:
                self._slot_seconds += min(self._held, self.slots) * (now - self._since)
            self._held += held
            self._since = now
            self._completed += completed

    def seconds_per_evaluation(self) -> float | None:
        """Wall seconds one evaluation holds a slot, as measured; None before any completed."""
        with self._lock:
            return self._slot_seconds / self._completed if self._completed else None
