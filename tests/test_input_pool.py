"""The executor's pooled timed inputs (verifier/gpu/sandbox/input_pool.py): every call's copy holds
its own values at a shift drawn for it, and nothing of an earlier call stays readable anywhere in
the place. CPU tensors: the pool does the same on the device."""

from __future__ import annotations

import torch

from hipevolve.verifier.gpu.sandbox.input_pool import ALIGN, SHIFTS, ShiftedInputs
from hipevolve.verifier.gpu.sandbox.sandbox import CANARY, GUARD


def _sets(n: int, *shape: int) -> list[torch.Tensor]:
    return [torch.randn(*shape) for _ in range(n)]


def _outside(pool: ShiftedInputs, i: int) -> torch.Tensor:
    p = pool.places[i]
    return torch.cat([p.raw[: p.start], p.raw[p.start + p.nbytes :]])


def test_each_call_sees_its_own_values_with_every_byte_around_them_canary():
    pool = ShiftedInputs(GUARD, CANARY)
    for t in _sets(200, 33, 17):
        view = pool.place(0, t)
        assert torch.equal(view, t)
        assert view.stride() == t.stride() and view.dtype == t.dtype
        assert bool((_outside(pool, 0) == CANARY).all())
        assert pool.intact(0)


def test_the_shift_is_drawn_per_call_over_every_multiple_of_the_alignment():
    pool = ShiftedInputs(GUARD, CANARY)
    base = None
    starts = set()
    for t in _sets(400, 8, 8):
        view = pool.place(0, t)
        raw = pool.places[0].raw
        base = raw.data_ptr() if base is None else base
        assert raw.data_ptr() == base  # one allocation for the whole case
        offset = view.data_ptr() - base
        assert (offset - GUARD) % ALIGN == 0
        starts.add(offset)
    assert starts == {GUARD + k * ALIGN for k in range(SHIFTS)}


def test_no_byte_of_an_earlier_calls_data_survives_a_later_shift():
    # Values that canaries can never be mistaken for: every data byte is 0x11.
    pool = ShiftedInputs(GUARD, CANARY)
    marked = torch.full((1000,), 0x11, dtype=torch.uint8)
    for _ in range(300):
        pool.place(0, marked)
        outside = _outside(pool, 0)
        assert not bool((outside == 0x11).any())


def test_a_note_written_past_an_input_in_one_call_is_gone_in_the_next():
    pool = ShiftedInputs(GUARD, CANARY)
    for t in _sets(50, 64):
        pool.place(0, t)
        p = pool.places[0]
        p.raw[p.start + p.nbytes : p.start + p.nbytes + 64].fill_(0x11)  # an out-of-bounds note
        p.raw[: p.start].fill_(0x11)
        assert not pool.intact(0)
        pool.place(0, t.clone())
        assert pool.intact(0)
        assert not bool((_outside(pool, 0) == 0x11).any())


def test_an_input_that_does_not_fill_its_storage_leaves_no_earlier_bytes_in_its_gaps():
    pool = ShiftedInputs(GUARD, CANARY)
    for value in range(1, 60):
        wide = torch.full((64, 8), float(value))
        strided = wide[:, ::2]  # gaps between the elements it holds
        view = pool.place(0, strided)
        assert torch.equal(view, strided)
        p = pool.places[0]
        here = p.raw[p.start : p.start + p.nbytes].reshape(64, 8, 4)  # bytes of each float
        assert bool((here[:, 1::2] == CANARY).all())  # the gaps: canary only
        assert bool((_outside(pool, 0) == CANARY).all())


def test_each_input_has_its_own_place_and_a_new_size_gets_a_new_one():
    pool = ShiftedInputs(GUARD, CANARY)
    a, b = torch.randn(16), torch.randn(4, 4, dtype=torch.float64)
    pool.place(0, a)
    pool.place(1, b)
    assert pool.places[0].raw.data_ptr() != pool.places[1].raw.data_ptr()
    first = pool.places[0].raw
    bigger = torch.randn(32)
    assert torch.equal(pool.place(0, bigger), bigger)
    assert pool.places[0].raw is not first and pool.intact(0)
