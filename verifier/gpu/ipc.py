"""Candidate outputs handed to the judge by CUDA/HIP IPC instead of copied through the pipe.

A checked call's outputs (and, on the first run, its inputs) are hundreds of megabytes on the
large cases; copying them device -> host -> pipe -> host -> device six times per case was most of
an evaluation (measured on the H200: the check stage took 9-10 s of a softmax evaluation's 11-13).
With IPC the sandbox sends, per tensor, the IPC handle of the allocation that holds it plus the
view's place in it; the judge maps that memory into its own context and compares in place, on the
GPU. The values judged are the bytes in the candidate's memory at the moment of comparison,
exactly what a copy would have carried.

Protocol: a message with shared tensors is answered by one "ack" line from the judge after it
has compared them and dropped its views; until then the sandbox keeps them alive. The sandbox
therefore never frees or reuses memory the judge is reading, whatever the candidate does with its
objects. The judge keeps each allocation mapped until the evaluation ends (`JudgeCounter.mapped`),
but reads it again only through the views of a later message.

What the judge accepts from the hostile side is data, validated here: a dtype from the wire
allowlist, non-negative shape, strides and offset that fit inside the storage size claimed, and
a legacy 64-byte IPC memory handle. The sandbox's own reference-counter file and event handle are
never used: the judge passes its own counter file (`JudgeCounter`) and does not wait on events
(the sandbox synchronised the device before sending). A handle that names no allocation fails to
open (an exception: the evaluation is a runtime error); a storage size larger than the real
allocation can make the judge read out of bounds, which faults the judge's own context and ends
the evaluation as a runtime error. Neither can make a wrong output pass.

When sharing is not possible (a CPU device, memory not from the caching allocator, expandable
segments, which use another handle form) the sandbox falls back to copying the bytes and says why
(the judge records it as the flag `outputs:bytes (...)`).

Imports torch and the standard library only (the judge and the sandbox both use it).
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
from dataclasses import dataclass
from typing import Any

import torch

HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t) and of hipIpcMemHandle_t
# torch's caching allocator writes [version][type][payload]; type 'c' is a cudaMalloc block whose
# payload is the 64-byte handle. Type 'e' (expandable segments) carries a process id and file
# descriptors for the receiver to take over: never accepted from the hostile side.
CUDA_MALLOC = ord("c")
# torch's receiving side maps the counter file with at::RefcountedMapAllocator: a 64-byte header
# whose first int32 counts the mappings (the file is unlinked when it drops to 0), then
# CUDA_IPC_REF_COUNTER_FILE_SIZE int64 counters.
COUNTER_FILE_BYTES = 64 + 8 * 10000
MAPPINGS_NEVER_ZERO = 1 << 30


@dataclass(frozen=True)
class Shared:
    """A tensor the sandbox shares: validated description, opened later by `JudgeCounter.open`."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # elements from the storage's start
    device: int
    handle: bytes
    storage_bytes: int
    storage_offset_bytes: int  # where the storage starts in the shared allocation


Counter = tuple[bytes, int]  # the sender's own reference counter of one share: (file, slot)


def handle_ok(handle: bytes) -> bool:
    """A bare IPC memory handle, or torch's versioned form of one (never an expandable one)."""
    return len(handle) == HANDLE_BYTES or (
        len(handle) == HANDLE_BYTES + 2 and handle[1] == CUDA_MALLOC
    )


def share(t: torch.Tensor) -> tuple[dict[str, Any], Counter] | str:
    """The IPC description of `t`'s memory (JSON-ready) and the sender's counter to `release`
    once the judge has acknowledged; or why not (then its bytes are sent instead)."""
    if t.device.type != "cuda" or t.numel() == 0:
        return "not a CUDA tensor" if t.device.type != "cuda" else "empty"
    try:
        device, handle, size, base, counter, slot, *_ = t.untyped_storage()._share_cuda_()
    except (RuntimeError, TypeError) as e:  # not from the caching allocator, or no IPC here
        return f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120] if str(e) else ''}"
    if not isinstance(handle, bytes) or not handle_ok(handle):
        release([(counter, slot)])
        return f"unsupported handle form ({len(handle)} bytes)"
    spec = {
        "device": int(device),
        "handle": handle.hex(),
        "storage_bytes": int(size),
        "storage_offset_bytes": int(base),
        "stride": list(t.stride()),
        "offset": int(t.storage_offset()),
    }
    return spec, (counter, slot)


def release(counters: list[Counter]) -> None:
    """Drops the sender's share counts, so the caching allocator may reuse the memory once the
    tensors are freed (a block whose count stays above zero is never reused)."""
    for counter, slot in counters:
        torch.UntypedStorage._release_ipc_counter_cuda(counter, slot)


def _ints(value: Any, n: int | None = None) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(v) is int and v >= 0 for v in value):
        raise ValueError("expected a list of non-negative integers")
    if n is not None and len(value) != n:
        raise ValueError(f"expected {n} integers, got {len(value)}")
    return tuple(value)


def parse(spec: dict[str, Any], dtype: torch.dtype, shape: list[int]) -> Shared:
    """Validates a shared-tensor description from the sandbox. Raises ValueError."""
    strides = _ints(spec.get("stride"), len(shape))
    dims = _ints(shape)
    offset, device, size, base = (
        spec.get(k) for k in ("offset", "device", "storage_bytes", "storage_offset_bytes")
    )
    if not all(type(v) is int and v >= 0 for v in (offset, device, size, base)):
        raise ValueError("offset, device and sizes must be non-negative integers")
    try:
        handle = bytes.fromhex(spec.get("handle", ""))
    except (TypeError, ValueError):
        raise ValueError("handle is not hex") from None
    if not handle_ok(handle):
        raise ValueError(f"handle of {len(handle)} bytes is not a cudaMalloc block's")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if math.prod(dims) == 0:
        raise ValueError("an empty tensor is sent by value")
    last = offset + sum((d - 1) * s for d, s in zip(dims, strides, strict=True))
    if (last + 1) * itemsize > size:
        raise ValueError(f"the view ends at byte {(last + 1) * itemsize}, past the storage {size}")
    return Shared(dtype, dims, strides, offset, device, handle, size, base)


class JudgeCounter:
    """The judge's own reference-counter file for the storages it opens.

    torch's receiving side decrements a counter in a shared-memory file when it releases an
    opened storage; naming a file the hostile side made would let it choose where the judge
    writes. This file is the judge's: made here with the layout torch expects, its mapping count
    set so high that torch never unlinks it, and unlinked by `close`.
    """

    def __init__(self) -> None:
        # One opened storage per allocation, kept until `close`: torch maps a handle
        # once while any storage opened from it lives, so later outputs in the same allocation
        # (the sandbox reserves one: worker.sandbox_reserve) need no driver call to open or close.
        self.mapped: dict[bytes, torch.UntypedStorage] = {}
        self.name = f"/hipevolve_ipc_{os.getpid()}"
        self.path = "/dev/shm" + self.name
        fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, COUNTER_FILE_BYTES)
            os.pwrite(fd, struct.pack("<i", MAPPINGS_NEVER_ZERO), 0)
        finally:
            os.close(fd)

    def open(self, s: Shared) -> torch.Tensor:
        """A tensor over the sandbox's memory (no copy). Raises RuntimeError if it cannot open."""
        storage = torch.UntypedStorage._new_shared_cuda(
            s.device,
            s.handle,
            s.storage_bytes,
            s.storage_offset_bytes,
            self.name.encode(),
            0,  # slot 0 of our own file; it only counts down, and nothing reads it
            b"",
            False,  # the sandbox synchronised before sending: no event to wait on
        )
        self.mapped.setdefault(s.handle, storage)
        out = torch.empty(0, dtype=s.dtype, device=f"cuda:{s.device}")
        return out.set_(storage, s.offset, s.shape, s.stride)

    def close(self) -> None:
        self.mapped.clear()  # unmaps: the sandbox's memory is freed once nothing maps it
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
