"""The static screen in worker processes, for callers that screen from many threads at once.

The screen's lexer is pure Python: about half a second of CPU for a 1,500-line kernel (the
gated_delta_net seed). The agents screen every child before GPU time, from as many threads as
graph runs are in flight; in one process those screens queue for the interpreter's lock, and
the controller's CPU, not the models or the GPUs, sets the pace (bench/llm_loop.py). Here they
run in a pool of worker processes, one per spare core, started on first use (spawned: a
threaded process is never forked). The verdict is the same function's (screening.screen);
a broken pool, or a machine with one core, screens in the calling process.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from hipevolve.core.candidate import Candidate
from hipevolve.verifier.screen.screening import Screening, screen

_pool: ProcessPoolExecutor | None = None
_starting = threading.Lock()


def workers() -> int:
    """Worker processes: every core but the one the caller's interpreter runs on."""
    return max(
        0,
        (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        - 1,
    )


def screen_apart(candidate: Candidate) -> Screening:
    """screening.screen(candidate), in a worker process where there is a spare core."""
    pool = _started()
    if pool is None:
        return screen(candidate)
    try:
        return pool.submit(screen, candidate).result()
    except BrokenProcessPool:  # a worker died (killed, out of memory): screen here, start anew
        _reset(pool)
        return screen(candidate)


def _started() -> ProcessPoolExecutor | None:
    global _pool
    with _starting:
        if _pool is None and workers() > 0:
            _pool = ProcessPoolExecutor(workers(), mp_context=multiprocessing.get_context("spawn"))
        return _pool


def _reset(broken: ProcessPoolExecutor) -> None:
    global _pool
    with _starting:
        if _pool is broken:
            _pool = None
    broken.shutdown(wait=False, cancel_futures=True)
