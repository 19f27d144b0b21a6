"""The judge's comparisons: the quick check agrees with the full policy, and reads only."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hipevolve.verifier.gpu.judge import compare

TOLERANCES = [
    {"kind": "allclose", "atol": 1e-5, "rtol": 1e-2},
    {"kind": "allclose", "atol": 1e-3, "rtol": 0.0},
    {"kind": "allclose", "atol": 0.0, "rtol": 0.0},
    {"kind": "kernelbench"},
    {"kind": "rel_rms", "max_rel_rms": 0.01},
]
DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
# Multiples of each element's allowed error: well inside, at the quick check's edge, across the
# policy's edge, and well outside.
SCALES = [0.0, 0.5, 0.998, 0.9995, 1.0, 1.002, 3.0]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _pair(dtype: torch.dtype, tol: dict, scale: float, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    r = torch.randn(257, generator=gen, dtype=torch.float64)
    r[::17] = 0.0
    ref = r.to(dtype)
    r = ref.to(torch.float64)
    if tol["kind"] == "rel_rms":
        noise = torch.randn(r.shape, generator=gen, dtype=torch.float64)
        noise *= scale * tol["max_rel_rms"] * r.norm() / noise.norm()
    else:
        atol, rtol = compare.tolerance_for(tol, dtype)
        sign = torch.where(torch.rand(r.shape, generator=gen) < 0.5, -1.0, 1.0).double()
        noise = sign * scale * (atol + rtol * r.abs())
    return (r + noise).to(dtype), ref


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("dtype", "tol"), itertools.product(DTYPES, TOLERANCES))
def test_quick_check_gives_the_full_policys_verdict_near_and_across_the_edge(
    dtype, tol, device
) -> None:
    for scale, seed in itertools.product(SCALES, range(3)):
        got, ref = (t.to(device) for t in _pair(dtype, tol, scale, seed))
        full = compare.compare_fully(0, got, ref, tol)
        quick = compare.compare_values(0, got, ref, tol)
        assert quick[0] == full[0], (scale, seed, full[3])
        assert quick[1] == pytest.approx(full[1], rel=1e-6, abs=1e-30)
        assert quick[2] == pytest.approx(full[2], rel=1e-4, abs=1e-30)
        assert quick[3] == full[3]
        if scale <= 0.5:  # a clear pass never needs the full comparison
            assert compare._quick_pass(got, ref, tol) is not None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("tol", TOLERANCES)
def test_a_non_finite_output_element_is_never_passed_by_the_quick_check(bad, tol, device) -> None:
    ref = torch.linspace(-1, 1, 64, device=device)
    got = ref.clone()
    got[9] = bad
    ok, _, _, mismatch = compare.compare_values(0, got, ref, tol)
    assert not ok and "(9,)" in mismatch


def test_an_infinite_reference_is_judged_by_the_full_policy() -> None:
    ref = torch.tensor([1.0, float("inf"), -float("inf")])
    tol = {"kind": "allclose", "atol": 1e-3, "rtol": 1e-3}
    assert compare.compare_values(0, ref.clone(), ref, tol)[0]
    assert not compare.compare_values(0, ref.flip(0), ref, tol)[0]


def test_quick_check_writes_nothing_into_the_output_or_the_reference() -> None:
    ref = torch.randn(1000)
    got = ref + 1e-4
    before_got, before_ref = got.clone(), ref.clone()
    assert compare.compare_values(0, got, ref, {"kind": "allclose", "atol": 1e-3, "rtol": 0})[0]
    assert torch.equal(got, before_got) and torch.equal(ref, before_ref)


def test_inputs_unchanged_treats_nan_as_equal_and_counts_what_changed() -> None:
    before = [torch.tensor([1.0, float("nan"), -0.0]), torch.arange(4)]
    same = [torch.tensor([1.0, float("nan"), 0.0]), torch.arange(4)]
    assert compare.inputs_unchanged(before, same) == ""
    changed = [before[0].clone(), torch.tensor([0, 1, 5, 6])]
    assert compare.inputs_unchanged(before, changed) == (
        "input 1 was modified by the call (2 elements)"
    )


def test_compare_speed_bench_prints_both_ways_and_their_ratio() -> None:
    bench = Path(__file__).parents[1] / "bench" / "compare_speed.py"
    args = ["--rows", "64", "--cols", "256", "--repeats", "2"]
    out = subprocess.run([sys.executable, str(bench), *args], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert re.search(r"64x256 bfloat16: full [\d.]+ ms, quick [\d.]+ ms, ratio [\d.]+x", out.stdout)
