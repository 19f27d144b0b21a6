"""How much of each thing one evaluation holds on the device at once: a plan per job, from the
sizes of its cases and the device memory free when the judge starts it.

An evaluation's device memory is the judge's and its sandbox's (or the executor's) together: the
reference's inputs and outputs for every check seed, the timing input sets, the outputs of the
checked timed calls, poison and canaries, the cache flush, and what each caching allocator keeps.
For the tasks this project ships that is a few GiB and `today`'s plan holds all of it; for
KernelBench's GPU-sized tasks (an input set of 6-8 GiB) the same plan needs 140 GiB. When today's
plan does not fit a safe share of the free memory (SAFE_SHARE), the plan turns `lean`:
- the judge keeps the reference's inputs and outputs on the host and compares them with what
  the sandbox sends a chunk at a time (compare_chunks.py); a timed call's reference is computed
  when its outputs arrive, moved to the host, and dropped once compared; it gives its
  allocator's unused blocks back between phases and after each comparison;
- the sandbox draws a check call's inputs for that call alone and keeps only their guarded
  copy, poisons one block per output, keeps the outputs of only the last `kept_calls` check
  calls alive (the reuse check then sees pairs of calls that close together), gives its
  allocator's unused blocks back after each call, draws a check seed's inputs only when a
  check call is slipped in among the timed ones, and keeps the checked timed calls' outputs on
  the host until it sends them, one call at a time;
- one timing input set instead of two when two do not fit: each call's set is then drawn anew,
  untimed, before it (as timing.time_fresh_trials does), so no call sees another's inputs.
Not lean: CUDA-graph timing (a task's timing = "graph") holds two sets at least, every check
seed's inputs and the kept replays' outputs on the device as today; the plan counts them so.
A KernelBench file's recorder (record_kb.py) needs no phase of its own: it runs between the
reference's phases and the sandbox's start, in a process of its own that ends before the sandbox
starts, holding one case's stand-in inputs, the forward's outputs and temporaries and its
context: what the check phase holds in the sandbox, in place of the sandbox's context.
When even the leanest plan does not fit, `message` says so in one line, before anything is
allocated. The peaks are estimates (what each phase holds, plus each process's context): the
GPU tests check them on a real device.

Standard library only: the judge imports it, and verifier/gpu/ loads no pydantic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

GIB = 1 << 30
SAFE_SHARE = 0.85  # of the free device memory an evaluation may plan to hold at its peak
SANDBOX_CONTEXT = 1 << 30  # the sandbox's device context, kernels and allocator slack
RESERVE_SLACK = 64 << 20  # the candidate's own weights and scratch, beyond what the case needs
RESERVE_SHARE = 4  # the sandbox's up-front reserve: at most 1/RESERVE_SHARE of the device
CHECKED_TRIALS = 3  # timed calls whose outputs are checked (sandbox.CHECKED_TRIALS)
COMPARE_COPIES = 2  # transient float copies a comparison of one output makes (compare.py)
COMPARE_CHUNK_BYTES = 256 << 20  # a reference on the host is compared this much at a time
CHUNK_COPIES = 8  # the chunk on the device and its temporaries (compare_chunks.py)


@dataclass(frozen=True, kw_only=True)
class CaseBytes:
    """One case's sizes: one input set and all of one call's outputs, in bytes."""

    name: str
    input_bytes: int
    output_bytes: int
    timed: bool = True


@dataclass(frozen=True, kw_only=True)
class JobShape:
    """What of the job, beyond its cases, decides how much memory it takes."""

    seeds: int  # check seeds, each with its reference inputs and outputs
    calls: int  # warm-up + timed calls of a case
    timing_budget_bytes: int  # job.timing_budget_bytes: memory for timing inputs
    flush_bytes: int  # the cache flush buffer, one in each process that times
    graph: bool = False  # timed as CUDA graph replays (job.timing "graph"): not lean while timed


@dataclass(frozen=True, kw_only=True)
class MemoryPlan:
    """What one evaluation holds at once. `lean` False is today's plan, exactly."""

    timing_sets: dict[str, int]  # distinct timing input sets per case
    reserve_bytes: int  # the sandbox's up-front block (worker.sandbox_reserve)
    lean: bool = False
    kept_calls: int = 0  # check calls whose outputs stay alive at once; 0: all of them
    peak_bytes: int = 0  # the estimated peak over judge and sandbox
    message: str = ""  # why the job cannot run on this device, or ''

    @property
    def fits(self) -> bool:
        return not self.message


def input_sets_for(set_bytes: int, budget_bytes: int, calls: int) -> int:
    """How many distinct input sets fit the budget: one per call at best, 2 at least (today's
    rule; timing.input_sets_for is this function)."""
    if set_bytes <= 0:
        return calls
    return max(2, min(calls, budget_bytes // set_bytes))


def today_reserve(cases: Sequence[CaseBytes], sets: dict[str, int], total_bytes: int) -> int:
    """The sandbox's reserve as it has always been: the largest case's checked outputs (six
    kept, poison twice over), input copies and timing sets, at most a quarter of the device."""
    need = max((10 * c.output_bytes + (3 + sets[c.name]) * c.input_bytes for c in cases), default=0)
    return min(need + RESERVE_SLACK, total_bytes // RESERVE_SHARE)


def today_peak(case: CaseBytes, sets: int, job: JobShape) -> int:
    """Today's plan: the judge holds every seed's inputs and outputs and the checked timed
    calls' references it computes, the sandbox every check call's outputs, every seed's inputs
    during timing, and the checked timed outputs as clones."""
    i, o, s, f = case.input_bytes, case.output_bytes, job.seeds, job.flush_bytes
    compare = COMPARE_COPIES * o
    refs = s * (i + o)
    ref_timing = sets * i + o + f
    check = 2 * s * o + 2 * i + 4 * o + compare
    timing = (sets + s + 1) * i + (1 + CHECKED_TRIALS + 2) * o + f
    timed_refs = CHECKED_TRIALS * (i + o) + compare
    return refs + max(ref_timing, check, timing + timed_refs)


def lean_peak(case: CaseBytes, sets: int, kept_calls: int, job: JobShape) -> int:
    """The lean plan: references on the host, compared a chunk at a time; the sandbox holds a
    check call's guarded input copy (drawn for the call, the draw dropped once copied), one
    poisoned block per output, the call's outputs and `kept_calls` earlier calls' outputs;
    while timing, its sets (or one drawn per call and dropped once copied), the call's copy
    and outputs; a checked timed call's outputs go back to the device one call at a time while
    the judge computes their reference (its inputs and outputs)."""
    i, o, f = case.input_bytes, case.output_bytes, job.flush_bytes
    chunk = min(CHUNK_COPIES * COMPARE_CHUNK_BYTES, CHUNK_COPIES * o)
    build = i + o + o // 2  # the reference's inputs and outputs, and its NaN check
    ref_timing = sets * i + o + f
    check = max(2 * i, i + (1 + kept_calls) * o + chunk)
    timing = ((sets + 1) * i + o if sets > 1 else max(2 * i, i + o)) + f
    if job.graph:  # sets, every check seed's inputs, the graph's buffers, clones kept (executor)
        timing = (sets + job.seeds + 1) * i + (2 + CHECKED_TRIALS + 2) * o + f
    sent = o + i + o + chunk
    return max(build, ref_timing, check, timing, sent)


def lean_host(case: CaseBytes, job: JobShape) -> int:
    """Host memory a lean plan takes: every check seed's reference inputs and outputs, one
    timed call's reference, and the sandbox's checked timed outputs (and the executor's two
    check calls slipped in among them) until they are sent."""
    i, o = case.input_bytes, case.output_bytes
    return job.seeds * (i + o) + (i + o) + (CHECKED_TRIALS + 2) * o


def _gib(n: float) -> str:
    return f"{n / GIB:.1f}"


def plan_memory(
    cases: Sequence[CaseBytes],
    job: JobShape,
    free_bytes: int | None,
    total_bytes: int,
    host_bytes: int | None = None,
) -> MemoryPlan:
    """The plan for a job whose cases have these sizes, on a device with `free_bytes` free
    when the judge starts it (None: a CPU, or unknown: today's plan); host_bytes: the host
    memory available (None: not checked), which a lean plan also needs."""
    calls = max(job.calls, 1)
    sets = {c.name: input_sets_for(c.input_bytes, job.timing_budget_bytes, calls) for c in cases}
    reserve = today_reserve(cases, sets, total_bytes)
    if free_bytes is None:
        return MemoryPlan(timing_sets=sets, reserve_bytes=reserve)
    budget = int(SAFE_SHARE * free_bytes) - SANDBOX_CONTEXT
    peak = max((today_peak(c, sets[c.name], job) for c in cases), default=0)
    if max(peak, reserve) <= budget:
        return MemoryPlan(timing_sets=sets, reserve_bytes=reserve, peak_bytes=peak)
    lean_sets: dict[str, int] = {}
    kept = 2 * job.seeds  # every check call's outputs, as today, while they fit
    worst, worst_case = 0, cases[0]
    for c in cases:
        # A graph's replays refill fixed buffers from the sets: two at least, as today.
        n = 2 if calls > 1 and (job.graph or lean_peak(c, 2, 1, job) <= budget) else 1
        lean_sets[c.name] = n
        while kept > 1 and lean_peak(c, n, kept, job) > budget:
            kept -= 1
    for c in cases:
        p = lean_peak(c, lean_sets[c.name], kept, job)
        if p > worst:
            worst, worst_case = p, c
    message = ""
    host = max(lean_host(c, job) for c in cases)
    if host_bytes is not None and host > SAFE_SHARE * host_bytes:
        big = max(cases, key=lambda c: lean_host(c, job))
        message = (
            f"case {big.name} needs about {_gib(host / SAFE_SHARE)} GiB of host memory beside "
            f"the GPU's; this machine has {_gib(host_bytes)} GiB available"
        )
    if worst > budget:
        need = (worst + SANDBOX_CONTEXT) / SAFE_SHARE
        message = (
            f"case {worst_case.name} needs about {_gib(need)} GiB of device memory at least; "
            f"this GPU has {_gib(free_bytes)} GiB free"
        )
    return MemoryPlan(
        timing_sets=lean_sets,
        reserve_bytes=0,  # the allocator takes what each phase needs, and gives it back
        lean=True,
        kept_calls=kept,
        peak_bytes=worst,
        message=message,
    )
