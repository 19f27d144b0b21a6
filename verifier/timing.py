"""Timing one forward call: the same code times the reference (in the judge) and the candidate
(in the sandbox), so their numbers are comparable.

Protocol (DESIGN.md "Timing", FAULTS.md 17-20):
- `Clock` captures the timer functions when it is built, before any candidate code is imported;
  later monkeypatching of time.perf_counter, torch.cuda.Event, Event.record/elapsed_time/
  synchronize or torch.cuda.synchronize does not reach the captured functions.
- Every trial gets a distinct input set (built from its own seed, before timing: building or
  cloning is never timed). When the job's memory budget cannot hold one set per trial the sets
  are rotated; with the default 1 GiB budget that only happens for inputs above ~30 MiB, where a
  replay cache by identity would be a multi-second bet on the pointer recurring.
- GPU: before each trial, a buffer larger than L2 plus Infinity Cache (512 MiB by default) is
  zeroed, then start event, the call, a whole-device synchronise (work moved to another stream
  or an unsynchronised launch is still inside the window), end event. Times are in microseconds.
- The synchronise before the end event adds a fixed host round trip (about 10 us on an H200) to
  every trial. The judge measures that cost once, with the same protocol around an empty call
  (`Clock.overhead_us`), and subtracts it from the reference's and the candidate's medians alike.
  Without it, our times read 7-12% above triton's do_bench on 60-180 us kernels (measured).
- CPU (CI tests): the captured time.perf_counter around the call.
Only raw trial times leave this module; statistics are computed by the judge.

Imports torch and the standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

FLUSH_BYTES = 512 << 20


class Clock:
    """The timer functions as they were when this object was built."""

    def __init__(self, device: str, flush_bytes: int = FLUSH_BYTES) -> None:
        self.device = device
        self.perf_counter = time.perf_counter
        self.no_grad = torch.no_grad
        self.gpu = device.startswith("cuda")
        if self.gpu:
            base = torch._C._CudaEventBase
            self.event = torch.cuda.Event
            self.record = base.record
            self.elapsed = base.elapsed_time
            self.event_sync = base.synchronize
            self.device_sync = torch.cuda.synchronize
            self.stream = torch.cuda.current_stream()
            self.zero = torch.Tensor.zero_
            self.flush = torch.empty(max(flush_bytes, 1), dtype=torch.uint8, device=device)

    def sync(self) -> None:
        if self.gpu:
            self.device_sync()

    def trial(self, fn: Callable[[], Any]) -> float:
        """Microseconds one call of `fn` takes, caches flushed first on a GPU."""
        if not self.gpu:
            t0 = self.perf_counter()
            fn()
            return (self.perf_counter() - t0) * 1e6
        self.zero(self.flush)
        start, end = self.event(enable_timing=True), self.event(enable_timing=True)
        self.record(start, self.stream)
        fn()
        self.device_sync()
        self.record(end, self.stream)
        self.event_sync(end)
        return float(self.elapsed(start, end)) * 1e3


def overhead_us(clock: Clock, trials: int = 30, warmup: int = 5) -> float:
    """Median time of the protocol itself (flush, events, synchronise) around an empty call."""
    if not clock.gpu:
        return 0.0
    times = time_trials(clock, lambda _: None, [[]], trials, warmup)
    return sorted(times)[len(times) // 2]


def input_sets_for(set_bytes: int, budget_bytes: int, calls: int) -> int:
    """How many distinct input sets fit the budget: one per call at best, 2 at least."""
    if set_bytes <= 0:
        return calls
    return max(2, min(calls, budget_bytes // set_bytes))


def tensor_bytes(values: Sequence[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def time_trials(
    clock: Clock,
    call: Callable[[list[Any]], Any],
    input_sets: Sequence[list[Any]],
    trials: int,
    warmup: int,
) -> list[float]:
    """Per-trial microseconds of `call(inputs)`, warm-up calls run and dropped."""
    times: list[float] = []
    with clock.no_grad():
        for i in range(warmup + trials):
            args = input_sets[i % len(input_sets)]
            t = clock.trial(lambda args=args: call(args))
            if i >= warmup:
                times.append(t)
    clock.sync()
    return times
