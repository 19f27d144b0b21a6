"""The executor's timed inputs: one guarded place per input, made once per case, and a shift per call.

Each eager timed call of a native candidate gets its inputs copied to a place no other call's
data occupies, between canaries, at a start shifted by a random multiple of 256 bytes
(executor.py). Made afresh for every call (Executor.guarded_clone: an allocation, two canary
fills and the copy), input shifting cost about 0.07 s of an evaluation on an H100.
`ShiftedInputs` keeps one allocation per input for the whole case instead, wide enough for
every shift; each call draws its shift, gets both canary regions made again around it and the
input copied there: the allocation is what it saves (bench/verifier_overheads.py measures it).

What each call still gets, as with a fresh copy:
- its own input set's values, copied in before it (the caller passes each call's own set);
- a start drawn at random among the same SHIFTS multiples of ALIGN after GUARD canary bytes,
  from os.urandom, after the previous call ended; the same addresses come back only as often as
  a fresh allocation's did (the caching allocator hands the freed block out again);
- canary bytes everywhere outside its data: both canary regions are filled again before each
  copy (the previous call's data that the new shift leaves outside the new data, and anything
  a call wrote past its input, are overwritten), and the copy overwrites the data region, so no
  call can read another call's data at any address, in bounds or past them. An input that does
  not fill its storage's span (gaps, or a contiguous slice of a larger storage) gets its data
  region set to the canary first, so the bytes the copy skips hold no earlier data either.
The canaries around timed inputs are not read after timed calls (as before: the check calls'
inputs are still fresh guarded copies and their canaries are checked).

What it does not change: graph timing keeps one fixed place per case by design (executor.py),
and check calls keep their fresh copies.

Imports torch and the standard library only.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import torch

ALIGN = 256  # plan.ALIGN: what a plan may assume of a buffer's start
SHIFTS = 16  # executor.SHIFTS: a copy starts GUARD + k * ALIGN bytes in, k in [0, SHIFTS)


@dataclass
class _Place:
    raw: torch.Tensor  # uint8, GUARD + (SHIFTS - 1) * ALIGN + nbytes + GUARD bytes
    start: int  # where the last copy's storage began, in bytes; -1 before the first
    nbytes: int
    dtype: torch.dtype


def span(t: torch.Tensor) -> int:
    """Bytes of `t`'s storage from its first element's place to the storage's end (what a
    guarded copy holds)."""
    return t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()


class ShiftedInputs:
    """One case's timed inputs: `place(i, t)` returns a copy of input i at a freshly drawn shift."""

    def __init__(self, guard: int, canary: int) -> None:
        self.guard = guard
        self.canary = canary
        self.places: dict[int, _Place] = {}

    def place(self, i: int, t: torch.Tensor) -> torch.Tensor:
        nbytes = span(t)
        p = self.places.get(i)
        if p is None or p.nbytes != nbytes or p.raw.device != t.device or p.dtype != t.dtype:
            size = 2 * self.guard + (SHIFTS - 1) * ALIGN + nbytes
            raw = torch.empty(size, dtype=torch.uint8, device=t.device)
            p = self.places[i] = _Place(raw, -1, nbytes, t.dtype)
        start = self.guard + ALIGN * secrets.randbelow(SHIFTS)
        if not (t.is_contiguous() and t.numel() * t.element_size() == nbytes):
            # The copy will not overwrite every byte of its place (gaps, or a slice of a larger
            # storage): the bytes it skips hold the canary, not an earlier call's data.
            p.raw[start : start + nbytes].fill_(self.canary)
        # Both canary regions made again, as a fresh copy's are: whatever the last call left
        # there (its data, uncovered by the new shift, or a note written past its input) is gone.
        p.raw[:start].fill_(self.canary)
        p.raw[start + nbytes :].fill_(self.canary)
        p.start = start
        view = torch.empty(0, dtype=t.dtype, device=t.device).set_(
            p.raw.untyped_storage(), start // t.element_size(), t.shape, t.stride()
        )
        view.copy_(t)
        return view

    def intact(self, i: int) -> bool:
        """Whether the canaries around input i's last copy are whole."""
        p = self.places[i]
        return bool((p.raw[: p.start] == self.canary).all()) and bool(
            (p.raw[p.start + p.nbytes :] == self.canary).all()
        )
