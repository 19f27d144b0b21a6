"""The GDN benches' timer (bench/gdn_vs_fla.py's protocol, also bench/fitness_fidelity.py's and
bench/gdn_placements.py's): the median of trials, each after a cache flush on an idle device, eagerly
or as CUDA graph replays behind a hold kernel that covers the host's enqueueing; and the kernels
one call launches, as PyTorch's profiler saw them (kernel_events)."""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

Call = Callable[[list[Any]], Any]
FLUSH_BYTES = 512 << 20  # zeroed before every trial: over 10x the H200's 50 MB L2
GRAPH_WARMUP = 3  # side-stream calls before a capture (PyTorch's CUDA graph recipe)
HOLD_US = 200.0  # graph trials: GPU time the hold kernel covers while the host enqueues


class Timer:
    """Median-of-trials timing with a cache flush and an idle device before every trial."""

    def __init__(self) -> None:
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
        self.hold_cycles = hold_cycles(HOLD_US)
        self.late_holds = 0  # graph trials whose enqueueing outlasted the hold

    def _cold(self) -> tuple[torch.cuda.Event, torch.cuda.Event]:
        self.flush.zero_()
        torch.cuda.synchronize()
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def eager(self, call: Call, sets: Sequence[list[Any]], trials: int) -> float:
        times = []
        for i in range(trials):
            args = sets[i % len(sets)]
            start, end = self._cold()
            start.record()
            call(args)
            torch.cuda.synchronize()  # the anchor protocol: synchronise before the end event
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        return statistics.median(times)

    def graph(self, graph: torch.cuda.CUDAGraph, calls: int, trials: int) -> float:
        """Median replay time of a graph of `calls` calls, per call."""
        times = []
        for _ in range(trials):
            start, end = self._cold()
            torch.cuda._sleep(self.hold_cycles)
            start.record()
            graph.replay()
            end.record()
            if start.query():  # the hold ended before the host was done: the GPU may have waited
                self.late_holds += 1
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / calls)
        return statistics.median(times)


def copy_bytes_per_s(timer: Timer, size: int = 1 << 30, trials: int = 10) -> float:
    """What one device-to-device copy of `size` bytes moves per second, bytes read and written:
    the practical ceiling of a roofline share (a memory-bound kernel moves no faster)."""
    src = torch.ones(size, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    us = timer.eager(lambda a: a[1].copy_(a[0]), [[src, dst]], trials)
    return 2 * size / (us * 1e-6)


def hold_cycles(us: float) -> int:
    """torch.cuda._sleep cycles that keep the GPU busy for about `us` microseconds (measured)."""
    probe = 1 << 20
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(probe)  # first call loads the kernel
    torch.cuda.synchronize()
    start.record()
    torch.cuda._sleep(probe)
    end.record()
    end.synchronize()
    return max(1, int(probe * us / (start.elapsed_time(end) * 1e3)))


def capture(call: Call, sets: Sequence[list[Any]]) -> tuple[torch.cuda.CUDAGraph, list]:
    """One graph of a call on every input set in turn, after warm-up on a side stream; (the
    graph, each call's static outputs)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP):
            call(sets[0])
    torch.cuda.current_stream().wait_stream(side)
    graph, outputs = torch.cuda.CUDAGraph(), []
    with torch.cuda.graph(graph):
        for args in sets:
            outputs.append(call(args))
    torch.cuda.synchronize()
    return graph, outputs


def kernel_events(call: Callable[[], object]) -> list[dict]:
    """The GPU kernels one call of `call` launches, in launch order, as the profiler's Chrome
    trace events (name, ts and dur in us, args with grid and block); the device is synchronised
    after the call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        events = json.loads(Path(f.name).read_text()).get("traceEvents", [])
    return sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e.get("ts", 0))
