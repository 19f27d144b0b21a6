"""Whether a generated reference is fit to be a task: it runs its small case on the CPU under a
time guard, deterministically, with finite, non-constant outputs that every input tensor changes.
The reference runs in this process: generated references are our own templates."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch

from hipevolve.core.reference import as_outputs, build_inputs, build_model
from hipevolve.core.taskspec import TaskSpec
from hipevolve.problems.synthetic.measure import module_from_source

CPU_SECONDS = 2.0


class _TooSlow(Exception):
    pass


@contextmanager
def _time_guard(seconds: float) -> Iterator[None]:
    """Interrupts a runaway reference where signals can (the main thread); elsewhere the measured
    time still rejects it afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum, frame):  # type: ignore[no-untyped-def]
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _run(
    module: ModuleType, init: dict, inputs: dict, seed: int, replace: dict[int, Any] | None = None
) -> list[torch.Tensor]:
    model = build_model(module, init, "cpu", seed)
    args = build_inputs(module, inputs, "cpu", seed)
    for i, value in (replace or {}).items():
        args[i] = value
    with torch.no_grad():
        return as_outputs(model(*args))


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def verify_task(task: TaskSpec) -> str | None:
    """Why the task's reference is unfit, or None: it must run its small case on the CPU within
    2 s, twice equal for a seed, finite, varying across elements and seeds, and every input
    tensor must change the output."""
    if not task.small_cases:
        return "no small case"
    case = task.small_cases[0]
    init, inputs = dict(case.init), dict(case.inputs)
    try:
        with _time_guard(CPU_SECONDS + 1.0):
            module = module_from_source(task.reference.read_text(), task.name)
            start = time.perf_counter()
            first = _run(module, init, inputs, seed=0)
            seconds = time.perf_counter() - start
            if seconds > CPU_SECONDS:
                return f"slow: small case took {seconds:.2f} s on the CPU (limit {CPU_SECONDS} s)"
            if not _same(first, _run(module, init, inputs, seed=0)):
                return "nondeterministic: two runs of seed 0 differ"
            for i, out in enumerate(first):
                if out.is_floating_point() and not torch.isfinite(out).all():
                    return f"non-finite: output {i} has NaN or Inf"
                flat = out.flatten()
                if flat.numel() > 1 and bool((flat == flat[0]).all()):
                    return f"constant: output {i} has one value in every element"
            if _same(first, _run(module, init, inputs, seed=1)):
                return "constant: seeds 0 and 1 give the same outputs"
            other = build_inputs(module, inputs, "cpu", seed=1)
            for i, value in enumerate(other):
                if isinstance(value, torch.Tensor) and _same(
                    first, _run(module, init, inputs, seed=0, replace={i: value})
                ):
                    return f"insensitive: changing input {i} leaves the output unchanged"
    except _TooSlow:
        return f"slow: small case ran past {CPU_SECONDS + 1.0:.0f} s and was interrupted"
    except Exception as e:  # a generated reference that fails is a rejection, not a crash
        line = (str(e).strip().splitlines() or [""])[0][:200]
        return f"does not run: {type(e).__name__}: {line}"
    return None
