"""softmax's check inputs are logits as models emit them (a peak per row, row scales and offsets),
so a kernel that reduces over part of each row, or skips the max, fails the task's tolerance:
on i.i.d. normal rows 151,936 wide, a sum over 15/16 of each row scaled up passed rtol 1e-2
(red team round 9, tests/hostile/rt9_partial_reduction on a GPU)."""

from __future__ import annotations

import pytest
import torch

from hipevolve.core.reference import build_inputs, load_module
from hipevolve.problems import get_task
from hipevolve.verifier.gpu.judge.compare import compare_values

TASK = get_task("softmax")
REFERENCE = load_module(TASK.reference)
TOLERANCE = TASK.tolerance.model_dump()
LM_HEAD_ROWS = {"rows": 64, "cols": 151936, "dtype": "bfloat16"}  # lm_head's row width, fewer rows


def _reference(x: torch.Tensor) -> torch.Tensor:
    return REFERENCE.Model()(x)


def _partial_sum(x: torch.Tensor, keep_max: bool) -> torch.Tensor:
    """The attack's arithmetic: exp summed over the first 15/16 of each row, scaled by 16/15."""
    xf = x.float()
    if keep_max:
        xf = xf - xf.max(dim=-1, keepdim=True).values
    cols = xf.shape[-1]
    used = cols - cols // 16
    total = xf[:, :used].exp().sum(dim=-1, keepdim=True) * (cols / used)
    return (xf.exp() / total).to(x.dtype)


def _passes(got: torch.Tensor, want: torch.Tensor) -> bool:
    return compare_values(0, got, want, TOLERANCE)[0]


@pytest.mark.parametrize("keep_max", [False, True], ids=["no-max", "max"])
def test_a_sum_over_part_of_each_row_fails_on_every_check_seed(keep_max: bool) -> None:
    for seed in range(TASK.check_seeds):
        (x,) = build_inputs(REFERENCE, LM_HEAD_ROWS, "cpu", seed)
        assert not _passes(_partial_sum(x, keep_max), _reference(x)), seed


def test_the_same_shortcut_passes_on_iid_normal_rows_so_the_inputs_are_what_catch_it() -> None:
    torch.manual_seed(0)
    x = torch.randn(LM_HEAD_ROWS["rows"], LM_HEAD_ROWS["cols"], dtype=torch.bfloat16)
    assert _passes(_partial_sum(x, keep_max=True), _reference(x))


@pytest.mark.parametrize("case", [c.name for c in TASK.cases])
def test_an_honest_softmax_in_another_summation_order_passes_every_case_shape(case: str) -> None:
    inputs = dict(TASK.case(case).inputs, rows=min(64, TASK.case(case).inputs["rows"]))
    for seed in range(TASK.check_seeds):
        (x,) = build_inputs(REFERENCE, inputs, "cpu", seed)
        xf = x.float()
        e = (xf - xf.max(dim=-1, keepdim=True).values).exp()
        halves = e.shape[-1] // 2  # two partial sums added: not the reference's order
        total = e[:, :halves].sum(-1, keepdim=True) + e[:, halves:].sum(-1, keepdim=True)
        assert _passes((e / total).to(x.dtype), _reference(x)), (case, seed)


def test_check_inputs_are_reproducible_per_seed_and_differ_between_seeds() -> None:
    shape = {"rows": 8, "cols": 1000, "dtype": "float32"}
    a, b = build_inputs(REFERENCE, shape, "cpu", 1)[0], build_inputs(REFERENCE, shape, "cpu", 1)[0]
    assert torch.equal(a, b)
    assert not torch.equal(a, build_inputs(REFERENCE, shape, "cpu", 2)[0])
    spread = a.max(dim=-1).values - a.median(dim=-1).values
    assert bool((spread > 2.0).all()), "every row has a peak above the rest"
