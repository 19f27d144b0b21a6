"""Worker slots: one per visible GPU, each with its own warm judges, pinned to its GPU.

A slot's judges see exactly one GPU: the slot sets CUDA_VISIBLE_DEVICES (NVIDIA) or
HIP_VISIBLE_DEVICES (ROCm; the HIP runtime reads it, per ROCm's documentation) to the slot's
device in the judge's environment, so inside the judge that GPU is device 0 and the candidate
cannot reach the others. Where the host has cores to spare, a slot's judges also run on cores
of their own, away from the compiles (hipevolve/core/cpu_share.py). An evaluation takes a free slot, runs on it and gives it back; at most
one evaluation runs per GPU, so timings on one GPU never share it with another candidate.

Slots live as long as their owner (the run's evaluator), so judges started while one batch runs
serve the next batch too.
"""

from __future__ import annotations

import os
import queue
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from hipevolve.core import cpu_share
from hipevolve.verifier.isolate import StandbyPool

STANDBY_JUDGES = 3  # judges kept warm per slot while a batch is evaluated

R = TypeVar("R")


def visibility_variable(backend: str) -> str:
    """The environment variable that pins a process to GPUs for this backend."""
    return "HIP_VISIBLE_DEVICES" if backend == "rocm" else "CUDA_VISIBLE_DEVICES"


def visible_gpus(backend: str) -> tuple[str, ...]:
    """The GPUs this process may use, as the ids its visibility variable takes.

    The variable's own list when it is set (CUDA_VISIBLE_DEVICES=2,3 gives slots on GPUs 2
    and 3), else every GPU PyTorch counts. The cpu and static backends have none.
    """
    if backend not in ("cuda", "rocm"):
        return ()
    listed = os.environ.get(visibility_variable(backend))
    if (
        listed is None and backend == "rocm"
    ):  # HIP honours CUDA_VISIBLE_DEVICES when its own is unset
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return tuple(d.strip() for d in listed.split(",") if d.strip())
    import torch

    return tuple(str(i) for i in range(torch.cuda.device_count()))


@dataclass
class Slot:
    """One device's judges; `device` is the id the visibility variable gives it ("" = unpinned)."""

    device: str
    judges: StandbyPool


class Slots:
    """Runs evaluations on the slots, at most one at a time per slot, results as futures."""

    def __init__(self, backend: str, devices: tuple[str, ...], *, standby: int = STANDBY_JUDGES):
        """devices: GPU ids to pin to (visible_gpus); () gives one unpinned slot (cpu backend)."""
        torch_device = "cpu" if backend == "cpu" else "cuda"
        variable = visibility_variable(backend)
        # Each slot's judges time on cores of their own where the host has enough (cpu_share);
        # compiles started from now on keep off them, and warm judges wait beside the compiles.
        self.cpu = cpu_share.claim(max(1, len(devices)))
        self.slots = [
            Slot(
                d,
                StandbyPool(
                    size=standby,
                    device=torch_device,
                    env_extra={variable: d},
                    cores=self.cpu.cores_of_slot(i),
                    standby_cores=self.cpu.work_cores,
                ),
            )
            for i, d in enumerate(devices)
        ] or [
            Slot(
                "",
                StandbyPool(
                    size=standby,
                    device=torch_device,
                    cores=self.cpu.cores_of_slot(0),
                    standby_cores=self.cpu.work_cores,
                ),
            )
        ]
        self._free: queue.SimpleQueue[Slot] = queue.SimpleQueue()
        for slot in self.slots:
            self._free.put(slot)
        self._pool = ThreadPoolExecutor(max_workers=len(self.slots), thread_name_prefix="slot")
        self.served: Counter[str] = Counter()  # device -> evaluations it ran

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(s.device for s in self.slots)

    def submit(self, evaluate: Callable[[Slot], R]) -> Future[R]:
        """Runs evaluate(slot) on the next free slot."""

        def on_a_free_slot() -> R:
            slot = self._free.get()
            try:
                return evaluate(slot)
            finally:
                self.served[slot.device] += 1
                self._free.put(slot)

        return self._pool.submit(on_a_free_slot)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for slot in self.slots:
            slot.judges.close()

    def __enter__(self) -> Slots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
