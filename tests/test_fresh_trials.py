"""Eager timing of a candidate (verifier/gpu/timing.py time_fresh_trials): no call sees inputs
another call saw, however few sets the memory budget holds, and the kept outputs are of timed
calls drawn at random. CPU clock, real torch."""

from __future__ import annotations

import torch

from hipevolve.verifier.gpu import timing


def sets_from(seed: int) -> list[torch.Tensor]:
    return [torch.randn(8, 8, generator=torch.Generator().manual_seed(seed))]


def test_every_call_sees_inputs_no_other_call_saw_when_the_budget_holds_two_sets():
    seen: list[torch.Tensor] = []

    def call(args):
        seen.append(args[0].clone())
        return args[0] * 2

    got = timing.time_fresh_trials(timing.Clock("cpu"), call, [sets_from(0), sets_from(1)],
                                   trials=10, warmup=2, fresh=sets_from, keep=3)  # fmt: skip
    assert len(seen) == 12 and len(got.times) == 10
    assert all(not torch.equal(a, b) for i, a in enumerate(seen) for b in seen[i + 1 :])
    assert [torch.equal(s, sets_from(i)[0]) for i, s in enumerate(seen)] == [True] * 12


def test_kept_outputs_are_of_timed_calls_and_name_the_call_they_came_from():
    got = timing.time_fresh_trials(timing.Clock("cpu"), lambda a: a[0] + 1,
                                   [sets_from(0), sets_from(1)], trials=20, warmup=3,
                                   fresh=sets_from, keep=3)  # fmt: skip
    assert len(got.kept) == 3
    for index, outs in got.kept:
        assert 3 <= index < 23
        assert torch.equal(outs[0], sets_from(index)[0] + 1)


def test_the_draw_of_the_kept_calls_is_the_clocks_captured_one():
    """A later patch of the secrets module does not reach the draw (captured with the clock)."""
    import secrets

    clock = timing.Clock("cpu")
    original = secrets.randbelow
    try:
        secrets.randbelow = lambda n: n  # would never keep anything
        got = timing.time_fresh_trials(clock, lambda a: a[0], [sets_from(0), sets_from(1)],
                                       trials=5, warmup=0, fresh=sets_from, keep=2)  # fmt: skip
    finally:
        secrets.randbelow = original
    assert len(got.kept) == 2
