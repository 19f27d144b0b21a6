"""How the host's CPU is shared between the judges and the CPU work that feeds them (issue 33).

A host-bound PyTorch reference, or a candidate whose time is mostly kernel launches, is timed on
the CPU as much as on the GPU: its median swung 1.8x within one run while compiles ran beside it.
So the CPU work (compiles, the static AMD analysis, KernelBench extension builds, the
controller's CPU-stage threads) runs at a lower priority (nice +10 by default) and, where the
host has cores to spare, on cores other than the judges'; each GPU slot's judges get a few cores
of their own. The judges' priority is never raised: that needs no privilege.

What it protects against: compiles and the controller's Python taking the judge's core or its
time slices while it times; warm judges starting up beside it (they wait on the CPU work's
cores, at normal priority, and move to their slot's when they take a job). What it does not:
other users' processes on the host, the controller's main thread (normal priority, any core),
memory-bandwidth and cache contention from the
compiles (separate cores share the L3 and the memory bus), interrupts.

One plan per process (there is one host): the pipeline installs the settings' policy
(`install`), worker slots say how many GPUs share the host (`claim`), and whoever starts CPU work
or a judge reads `current()`. The plan is a plain dataclass: verifier/gpu reads it without
pydantic. Linux applies niceness and affinity per thread, and a child starts with its parent
thread's: that is how both reach the processes started here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SPARE_CORES = 2  # cores left beyond the judges' before pinning is worth it (controller, system)
# The cores this process may use, read once at import: later, a thread's own affinity may be a
# part of them (a CPU-stage thread's, or a thread's while it spawns a judge).
# Not Linux (no affinity calls): the split is never pinned, and only the niceness applies.
CAN_PIN = hasattr(os, "sched_setaffinity")
HOST_CORES: tuple[int, ...] = (
    tuple(sorted(os.sched_getaffinity(0))) if CAN_PIN else tuple(range(os.cpu_count() or 1))
)


@dataclass(frozen=True)
class CpuPolicy:
    """The settings' side: whether to share at all, how nice CPU work is, cores per judge slot."""

    enabled: bool = True
    nice: int = 10  # niceness of compiles and CPU-stage threads (0..19)
    cores_per_slot: int = 2  # cores reserved per GPU slot's judges; 0: never pin


@dataclass(frozen=True)
class CpuShare:
    """A host's split: what CPU work runs on and at, and each slot's judge cores.

    Empty core tuples mean "unpinned" (wherever the scheduler puts it, as without a plan)."""

    nice: int = 0
    work_cores: tuple[int, ...] = ()
    judge_cores: tuple[tuple[int, ...], ...] = ()  # one tuple per GPU slot
    host_cores: int = 0
    why_unpinned: str = ""

    @property
    def pinned(self) -> bool:
        return bool(self.judge_cores)

    def cores_of_slot(self, slot: int) -> tuple[int, ...]:
        """The cores slot `slot`'s judges run on; () when judges are not pinned."""
        return self.judge_cores[slot] if slot < len(self.judge_cores) else ()

    def describe(self) -> str:
        """One line for `evolve doctor` and the benches."""
        if self == OFF:
            return "off: compiles and judges share every core at normal priority"
        nice = f"at nice +{self.nice}" if self.nice else "at normal priority"
        if not self.pinned:
            return f"{self.host_cores} cores: CPU work {nice}, on any core ({self.why_unpinned})"
        judges = "; ".join(f"slot {i}: {core_list(c)}" for i, c in enumerate(self.judge_cores))
        return (
            f"{self.host_cores} cores: judges on {judges}; CPU work {nice} on "
            f"{core_list(self.work_cores)}"
        )


OFF = CpuShare()


def core_list(cores: Sequence[int]) -> str:
    """Cores as the kernel writes them: 0-3,8,10-11."""
    spans: list[list[int]] = []
    for c in sorted(cores):
        if spans and c == spans[-1][1] + 1:
            spans[-1][1] = c
        else:
            spans.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def sibling_groups(cores: Sequence[int]) -> list[tuple[int, ...]]:
    """`cores` grouped by physical core (SMT siblings together), from sysfs; one each if unread."""
    groups: dict[tuple[int, ...], None] = {}
    allowed = set(cores)
    for c in sorted(cores):
        path = Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
        try:
            siblings = _parse_core_list(path.read_text())
        except (OSError, ValueError):
            siblings = (c,)
        groups[tuple(s for s in siblings if s in allowed) or (c,)] = None
    return list(groups)


def _parse_core_list(text: str) -> tuple[int, ...]:
    cores: list[int] = []
    for part in text.strip().split(","):
        first, _, last = part.partition("-")
        cores += range(int(first), int(last or first) + 1)
    return tuple(cores)


def plan(
    policy: CpuPolicy,
    slots: int,
    cores: Sequence[int] | None = None,
    groups: Sequence[Sequence[int]] | None = None,
) -> CpuShare:
    """The split for `slots` GPU slots on `cores` (default: HOST_CORES, this process's).

    Pins only when the host has more than slots * cores_per_slot + 2 cores. Judges take whole
    physical cores (both SMT siblings, so a compile never shares one with a judge) from the
    highest-numbered end: core 0 takes most of the system's housekeeping."""
    if not policy.enabled:
        return OFF
    cores = sorted(cores if cores is not None else HOST_CORES)
    share = CpuShare(nice=policy.nice, host_cores=len(cores))
    need = max(slots, 0) * policy.cores_per_slot + SPARE_CORES
    if not CAN_PIN:
        return _unpinned(share, "this system cannot pin threads to cores")
    if policy.cores_per_slot == 0 or slots <= 0:
        return _unpinned(share, "no judge cores reserved" if slots > 0 else "no GPU slots")
    if len(cores) <= need:
        return _unpinned(share, f"pinning needs more than {need}")
    free = sorted((tuple(sorted(g)) for g in groups or sibling_groups(cores)), reverse=True)
    judges: list[tuple[int, ...]] = []
    for _ in range(slots):
        mine: list[int] = []
        while len(mine) < policy.cores_per_slot and free:
            mine += free.pop(0)
        judges.append(tuple(sorted(mine)))
    work = tuple(sorted(c for g in free for c in g))
    if len(work) < SPARE_CORES or any(len(j) < policy.cores_per_slot for j in judges):
        return _unpinned(share, "too few physical cores once SMT siblings stay together")
    return CpuShare(
        nice=policy.nice, work_cores=work, judge_cores=tuple(judges), host_cores=len(cores)
    )


def _unpinned(share: CpuShare, why: str) -> CpuShare:
    return CpuShare(nice=share.nice, host_cores=share.host_cores, why_unpinned=why)


# --- the process's plan -------------------------------------------------------------------------

_LOCK = threading.Lock()
_STATE: dict[str, object] = {"policy": CpuPolicy(), "slots": 0}


def install(policy: CpuPolicy) -> None:
    """The settings' policy, for everything this process starts from now on."""
    with _LOCK:
        _STATE["policy"] = policy


def claim(slots: int) -> CpuShare:
    """`slots` GPU slots share this host from now on; the plan for them."""
    with _LOCK:
        _STATE["slots"] = slots
    return current()


def current() -> CpuShare:
    """The plan for the installed policy and the slots claimed (none yet: unpinned, niced)."""
    with _LOCK:
        policy, slots = _STATE["policy"], _STATE["slots"]
    return _planned(policy, slots)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=32)
def _planned(policy: CpuPolicy, slots: int) -> CpuShare:
    return plan(policy, slots)  # every compile asks: sysfs is read once per policy and count


# --- applying it --------------------------------------------------------------------------------


def lower_this_thread(share: CpuShare) -> None:
    """Lowers the calling thread (and what it starts later) to the plan's CPU-work share.

    Never raises its priority: an unprivileged process can only lower it."""
    with contextlib.suppress(OSError):
        if share.nice:
            me = threading.get_native_id()
            os.setpriority(
                os.PRIO_PROCESS, me, max(share.nice, os.getpriority(os.PRIO_PROCESS, me))
            )
        if share.work_cores:
            os.sched_setaffinity(0, share.work_cores)  # 0: the calling thread on Linux


def in_child(share: CpuShare) -> Callable[[], None]:
    """For a compile's preexec_fn: the new process takes the CPU-work share before it execs."""
    return lambda: lower_this_thread(share)


@contextlib.contextmanager
def spawning_on(cores: Sequence[int]) -> Iterator[None]:
    """Processes started by this thread inside the block start on `cores` (none: unchanged).

    Affinity is per thread and inherited at fork: setting the spawning thread's own keeps the
    child's start fast (no preexec_fn) and leaves no moment in which it runs elsewhere."""
    if not cores:
        yield
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cores)
    except OSError:  # a core taken away since the plan was made: start unpinned
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, before)


def move(pids: Iterable[int], cores: Sequence[int]) -> None:
    """Moves every thread of the processes `pids` onto `cores` (none: nothing moves).

    A warm judge waits on the CPU work's cores (its start-up, torch's import and a device
    context, would otherwise take the cores of the judge that is timing) and moves onto its
    slot's cores when it takes a job. Affinity is per thread, so each thread moves; threads or
    processes that end meanwhile are skipped. Run it twice: a thread started during the first
    pass by one not yet moved is caught by the second."""
    if not cores:
        return
    for pid in pids:
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, cores)
