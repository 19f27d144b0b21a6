"""Timing one forward call: the same code times the reference (in the judge) and the candidate
(in the sandbox), so their numbers are comparable.

Protocol (DESIGN.md "Timing", FAULTS.md 17-20):
- `Clock` captures the timer functions when it is built, before any candidate code is imported;
  later monkeypatching of time.perf_counter, torch.cuda.Event, Event.record/elapsed_time/
  synchronize or torch.cuda.synchronize does not reach the captured functions.
- Every trial gets a distinct input set (built from its own seed, before timing: building or
  cloning is never timed). When the job's memory budget cannot hold one set per trial (with the
  default 1 GiB budget, inputs above ~30 MiB), a candidate's eager trials draw a new set in
  place of the oldest before each call (time_fresh_trials), so no call sees inputs another saw;
  the reference's, trusted, rotate through the sets; a graph's replays refill fixed buffers
  from the rotating sets (no candidate Python runs at a replay to look up a cache).
- GPU: before each trial, a buffer larger than L2 plus Infinity Cache (512 MiB by default) is
  zeroed; then the start event, the call, an end event on the same stream (the time: what
  triton's do_bench measures), a whole-device synchronise, and a window event. The window also
  holds work moved to another stream or a thread; the judge flags a candidate whose windows run
  far past its times. (Timing the window itself would add the host round trip of the
  synchronise, about 10 us on an H200, to every trial: 7-12% on 60-180 us kernels, measured.)
  Times are in microseconds.
- CPU (CI tests): the captured time.perf_counter around the call.
- CUDA graphs (a task's `timing = "graph"`, job.TIMINGS; time_graph_trials): the warm-up calls
  run eagerly as above; then the forward is called once more on a side stream (PyTorch's rule
  before a capture) and captured once, on that side stream, into a graph whose memory comes from
  a private pool of the caching allocator (never the allocator's general pool, and without the
  cache flush torch.cuda.graph does first: the sandbox's reserve stays). Its inputs are fixed
  buffers allocated before the capture. Each trial then, untimed: the graph's outputs poisoned
  (a candidate's: NaN, so a replay that writes nothing shows), the trial's input set copied
  into the fixed buffers, the flush; then the start event, the replay, the end event, the
  synchronise and the window event, as eagerly. A forward that cannot be captured (a host
  synchronisation such as .item(), CPU tensors, a launch on the legacy default stream) is timed
  eagerly instead and the caller flags it `timing:eager (not capturable: ...)`; it never fails
  the candidate. The capture calls (CUDAGraph.capture_begin/capture_end/replay) are captured
  with the timer, before any candidate code exists.
Only raw trial times leave this module; statistics are computed by the judge.

Imports torch, the standard library and hipevolve.verifier.gpu.memplan (standard library) only.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from hipevolve.verifier.gpu.memplan import input_sets_for  # noqa: F401 (the judge's and tests')

FLUSH_BYTES = 512 << 20


class Clock:
    """The timer functions as they were when this object was built."""

    def __init__(self, device: str, flush_bytes: int = FLUSH_BYTES) -> None:
        self.device = device
        self.perf_counter = time.perf_counter
        self.no_grad = torch.no_grad
        self.draw = secrets.randbelow  # which timed calls' outputs are checked (os.urandom)
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
            graph = torch.cuda.CUDAGraph
            self.new_graph = graph
            self.capture_begin, self.capture_end = graph.capture_begin, graph.capture_end
            self.replay = graph.replay
            self.new_stream = torch.cuda.Stream
            self.use_stream = torch.cuda.stream
            self.wait_stream = torch.cuda.Stream.wait_stream
            self.side: Any = None  # the capture stream, made at the first capture
            self.pool_handle = torch.cuda.graph_pool_handle
            self.device_index = torch.cuda.current_device()
            # The allocator's own calls to undo a failed capture (abandon); their names differ
            # between PyTorch releases (a release without them keeps what the failed capture
            # left: see abandon).
            c = torch._C
            self.end_pool = getattr(c, "_cuda_endAllocateToPool", None) or getattr(
                c, "_cuda_endAllocateCurrentStreamToPool", None
            )
            self.release_pool = getattr(c, "_cuda_releasePool", None)

    def sync(self) -> None:
        if self.gpu:
            self.device_sync()

    def trial(self, fn: Callable[[], Any]) -> tuple[float, float]:
        """(time, window) of one call of `fn` in microseconds, caches flushed first on a GPU.

        time: start to end event on the timing stream; window: start to after a whole-device
        synchronise. On the CPU both are the captured perf_counter around the call.
        """
        if not self.gpu:
            t0 = self.perf_counter()
            fn()
            t = (self.perf_counter() - t0) * 1e6
            return t, t
        self.zero(self.flush)
        start, end, window = (self.event(enable_timing=True) for _ in range(3))
        self.record(start, self.stream)
        fn()
        self.record(end, self.stream)
        self.device_sync()
        self.record(window, self.stream)
        self.event_sync(window)
        return float(self.elapsed(start, end)) * 1e3, float(self.elapsed(start, window)) * 1e3

    def capture(self, fn: Callable[[Any], Any]) -> tuple[Any, Any]:
        """(graph, what `fn` returned while it was captured): `fn(stream)` is called once on a
        side stream (untimed warm-up: PyTorch's rule before a capture), then captured once on
        it, into a memory pool of its own. `stream` is the side stream, for code that launches
        on an explicit stream (the executor's launchers). Raises NotCapturable with the first
        line of what stopped the warm-up call or the capture: the caller times the forward
        eagerly, where an error of the forward's own shows as it would have."""
        if self.side is None:
            self.side = self.new_stream()
        side = self.side
        self.wait_stream(side, self.stream)
        error: BaseException | None = None
        ended = False
        with self.use_stream(side):
            try:
                fn(side)
            except Exception as e:  # noqa: BLE001 (timed eagerly, where a real error shows)
                self.wait_stream(self.stream, side)
                raise NotCapturable(f"on a side stream, {_first_line(e)}") from None
            graph, pool = self.new_graph(), self.pool_handle()
            self.device_sync()  # nothing of the warm-up or before it still runs at the capture
            try:
                self.capture_begin(graph, pool=pool, capture_error_mode="global")
            except Exception as e:  # noqa: BLE001 (no capture on this device or stream)
                error = e
            else:
                try:
                    result = fn(side)
                except Exception as e:  # noqa: BLE001 (any failure under capture)
                    error = e
                try:
                    self.capture_end(graph)
                    ended = True
                except Exception as e:  # noqa: BLE001 (an invalidated capture ends with an error)
                    error = error or e
        self.wait_stream(self.stream, side)
        if not ended:
            self.abandon(graph, pool)
        if error is not None:
            self.device_sync()
            raise NotCapturable(_first_line(error))
        return graph, result

    def abandon(self, graph: Any, pool: Any) -> None:  # noqa: ANN401
        """Puts the caching allocator back as it was before a capture that did not end.
        PyTorch's capture_end raises before it stops routing allocations to the graph's pool
        when the capture was invalidated (a host synchronisation under capture); left so, the
        allocator's next empty_cache fails an internal assertion (captures still underway),
        and the judge, which trims its cache after timing the reference, would fail every
        later job. So: routing stopped and the pool released here, as capture_end and the
        graph's destructor would have; the graph object is kept for the life of the process
        (the allocators' filters may still point at it)."""
        _ABANDONED.append(graph)
        for step in (self.end_pool, self.release_pool):
            if step is None:
                continue
            try:
                step(self.device_index, tuple(pool))
            except RuntimeError:  # already done by capture_end, or no such pool
                continue
        # The random generators registered with the failed capture still think one is under
        # way ("Offset increment outside graph capture" at the next random draw, measured on
        # an H100): a capture that begins and ends cleanly (empty) closes their state.
        import warnings

        with warnings.catch_warnings(), self.use_stream(self.new_stream()):
            warnings.simplefilter("ignore")  # "The CUDA Graph is empty"
            try:
                closing = self.new_graph()
                self.capture_begin(closing, capture_error_mode="global")
                self.capture_end(closing)
                _ABANDONED.append(closing)
            except Exception:  # noqa: BLE001, S110 (best effort: the eager timing still runs)
                pass


_ABANDONED: list[Any] = []  # graphs whose capture failed (Clock.abandon)


class NotCapturable(Exception):
    """Why a forward cannot be captured as a CUDA graph: a reason to time it eagerly."""


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:200]


@dataclass
class GraphTrials:
    """What time_graph_trials measured: per-trial times and windows (us); `kept`, the outputs
    of the replays drawn to be checked, as (input set index, cloned outputs); `eager`, why the
    forward was timed eagerly instead ('' when it was replayed)."""

    times: list[float]
    windows: list[float]
    kept: list[tuple[int, list[Any]]] = field(default_factory=list)
    eager: str = ""


def tensors_of(result: Any) -> list[Any]:  # noqa: ANN401
    """A forward's outputs as a list (one tensor, or a tuple or list of them)."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [t for t in result if isinstance(t, torch.Tensor)]
    return []


def fixed_inputs(first: Sequence[Any]) -> list[Any]:
    """Buffers for a graph's inputs, allocated before the capture: each tensor of `first`
    copied into a new one of the same shape, strides and dtype; other values as they are."""
    return [
        torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a)
        if isinstance(a, torch.Tensor)
        else a
        for a in first
    ]


def refill(fixed: Sequence[Any], inputs: Sequence[Any]) -> None:
    """A trial's inputs copied into the graph's fixed input buffers."""
    for buffer, value in zip(fixed, inputs, strict=True):
        if isinstance(buffer, torch.Tensor):
            buffer.copy_(value)


def _poison(t: torch.Tensor) -> None:
    """NaN in a float tensor, the largest value in an integer one; a tensor whose elements
    overlap (an expanded view) cannot be written and is left as it is."""
    if t.is_floating_point() or t.is_complex():
        value: Any = float("nan")
    elif t.dtype == torch.bool:
        value = True
    else:
        value = torch.iinfo(t.dtype).max
    try:
        t.fill_(value)
    except RuntimeError:
        return


def same_scalars(input_sets: Sequence[Sequence[Any]]) -> bool:
    """Whether every input set has the same non-tensor values (a graph bakes them in)."""
    first = [a for a in input_sets[0] if not isinstance(a, torch.Tensor)]
    return all([a for a in s if not isinstance(a, torch.Tensor)] == first for s in input_sets[1:])


def kept_now(clock: Clock, out: GraphTrials, keep: int, left: int) -> bool:
    """Whether the timed call just made (with `left` timed calls counting it) has its outputs
    kept: `keep` of all the timed calls, drawn without replacement from os.urandom, after the
    call (nothing the call could see decided it)."""
    return len(out.kept) < keep and clock.draw(left) < keep - len(out.kept)


def time_graph_trials(
    clock: Clock,
    call: Callable[[list[Any]], Any],
    input_sets: Sequence[list[Any]],
    trials: int,
    warmup: int,
    keep: int = 0,
    poison: bool = False,
) -> GraphTrials:
    """Per-trial times of one CUDA graph replay of `call(inputs)` (see the module docstring),
    or eager times with the reason when it cannot be captured. keep: how many replays, drawn
    after each replay from os.urandom, have their outputs cloned into `kept` for the judge.
    poison: the graph's outputs are poisoned (_poison) before each replay (candidates)."""
    if not clock.gpu:
        times, windows = time_trials(clock, call, input_sets, trials, warmup)
        return GraphTrials(times, windows, eager="no GPU")
    with clock.no_grad():
        for i in range(warmup):
            args = input_sets[i % len(input_sets)]
            clock.trial(lambda args=args: call(args))
        if not same_scalars(input_sets):
            why = "its non-tensor inputs differ between trials"
        else:
            fixed = fixed_inputs(input_sets[0])
            try:
                graph, result = clock.capture(lambda _stream: call(fixed))
            except NotCapturable as e:
                why = str(e)
            else:
                out = GraphTrials([], [])
                outs = tensors_of(result)
                for i in range(warmup, warmup + trials):
                    index = i % len(input_sets)
                    if poison:
                        for o in outs:
                            _poison(o)
                    refill(fixed, input_sets[index])
                    t, w = clock.trial(lambda: clock.replay(graph))
                    out.times.append(t)
                    out.windows.append(w)
                    # Drawn after the replay: nothing the replay could see decided it.
                    if kept_now(clock, out, keep, trials - len(out.times) + 1):
                        out.kept.append((index, [o.clone() for o in outs]))
                clock.sync()
                return out
        times, windows = time_trials(clock, call, input_sets, trials, 0)  # warmed up above
    return GraphTrials(times, windows, eager=why)


def time_fresh_trials(
    clock: Clock,
    call: Callable[[list[Any]], Any],
    input_sets: Sequence[list[Any]],
    trials: int,
    warmup: int,
    fresh: Callable[[int], list[Any]],
    keep: int = 0,
    kept: Callable[[list[Any]], list[Any]] | None = None,
) -> GraphTrials:
    """Per-trial times of `call(inputs)`, eagerly, where no call sees an input set another call
    saw: call i (warm-up calls first) takes input_sets[i] while they last, then `fresh(i)`, a
    new set drawn untimed in place of the one i - len(input_sets) used (the memory budget holds
    len(input_sets) at once). A result cache keyed by an input's address or a sample of its
    values never hits, and one keyed by the address alone returns stale answers, which the kept
    outputs show: keep of the timed calls, drawn after each call from os.urandom, have their
    outputs cloned into `kept` as (call index, outputs); call i's set is the one drawn from
    seed i past the first timing seed. kept: how a kept call's outputs are copied (clones on
    the device by default; the sandbox's lean memory plan keeps them on the host)."""
    copy = kept or (lambda outs: [o.clone() for o in outs])
    sets = list(input_sets)
    out = GraphTrials([], [])
    with clock.no_grad():
        for i in range(warmup + trials):
            slot = i % len(sets)
            if i >= len(sets):
                sets[slot] = []  # its memory back before the next set is drawn
                sets[slot] = fresh(i)
            args, result = sets[slot], []
            t, w = clock.trial(lambda args=args, result=result: result.append(call(args)))
            if i >= warmup:
                out.times.append(t)
                out.windows.append(w)
                if kept_now(clock, out, keep, warmup + trials - i):
                    out.kept.append((i, copy(tensors_of(result[0]))))
    clock.sync()
    return out


def tensor_bytes(values: Sequence[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def time_trials(
    clock: Clock,
    call: Callable[[list[Any]], Any],
    input_sets: Sequence[list[Any]],
    trials: int,
    warmup: int,
) -> tuple[list[float], list[float]]:
    """Per-trial (times, windows) of `call(inputs)` in microseconds; warm-up calls dropped."""
    times: list[float] = []
    windows: list[float] = []
    with clock.no_grad():
        for i in range(warmup + trials):
            args = input_sets[i % len(input_sets)]
            t, w = clock.trial(lambda args=args: call(args))
            if i >= warmup:
                times.append(t)
                windows.append(w)
    clock.sync()
    return times, windows
