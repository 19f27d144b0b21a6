"""A reference kept on the host (a lean memory plan) is compared a chunk at a time
(verifier/gpu/judge/compare_chunks.py), with the verdicts compare.compare_fully gives over the whole
output. Chunks of 4 KiB here, so every output spans many."""

from __future__ import annotations

import pytest
import torch

from hipevolve.verifier.gpu.judge import compare
from hipevolve.verifier.gpu.judge.compare_chunks import compare_in_chunks, unchanged_in_chunks

CHUNK = 4096
ALLCLOSE = {"kind": "allclose", "atol": 1e-5, "rtol": 1e-5}


def ref_of(n: int = 10_000, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(0)).to(dtype)


def both(got: torch.Tensor, ref: torch.Tensor, tol: dict) -> tuple[tuple, tuple]:
    return compare.compare_fully(0, got, ref, tol), compare_in_chunks(0, got, ref, tol, CHUNK)


def test_a_correct_output_passes_with_the_whole_outputs_error_norms() -> None:
    ref = ref_of()
    got = ref * (1 + 1e-7)
    whole, chunked = both(got, ref, ALLCLOSE)
    assert whole[0] and chunked[0] and chunked[3] == ""
    assert chunked[1] == pytest.approx(whole[1]) and chunked[2] == pytest.approx(whole[2], rel=1e-4)


def test_one_wrong_element_in_a_later_chunk_fails_and_is_found_by_its_flat_position() -> None:
    ref = ref_of().reshape(100, 100)
    got = ref.clone()
    got[73, 21] += 1.0
    whole, chunked = both(got, ref, ALLCLOSE)
    assert not whole[0] and not chunked[0]
    assert "1 of 10000 elements outside" in chunked[3]
    assert f"first at element {73 * 100 + 21} " in chunked[3]
    assert chunked[1] == pytest.approx(whole[1])


def test_nan_where_the_reference_is_finite_fails() -> None:
    ref = ref_of()
    got = ref.clone()
    got[9_000] = float("nan")
    _, chunked = both(got, ref, ALLCLOSE)
    assert not chunked[0] and "NaN/Inf where the reference is finite" in chunked[3]
    assert "element 9000 " in chunked[3]


def test_values_rounded_through_bfloat16_are_a_precision_downgrade() -> None:
    ref = ref_of()
    got = ref.bfloat16().float()
    whole, chunked = both(got, ref, {"kind": "allclose", "atol": 1e-2, "rtol": 1e-2})
    assert "precision downgrade" in whole[3]
    assert "precision downgrade: float32 values carry only bfloat16" in chunked[3]


def test_relative_rms_is_decided_over_the_whole_output_not_per_chunk() -> None:
    ref = ref_of()
    ref[: CHUNK // 4] *= 1e-3  # the first chunk alone has a tiny norm
    got = ref.clone()
    got[: CHUNK // 4] += 1e-3  # its own relative error is large; the whole output's is small
    tol = {"kind": "rel_rms", "max_rel_rms": 0.01}
    whole, chunked = both(got, ref, tol)
    assert whole[0] and chunked[0]
    assert chunked[2] == pytest.approx(whole[2], rel=1e-4)


def test_values_near_atol_everywhere_fail_the_relative_guard_as_in_the_whole_comparison() -> None:
    ref = ref_of() * 1e-6  # every value inside atol
    got = ref + 9e-6
    whole, chunked = both(got, ref, ALLCLOSE)
    assert not whole[0] and not chunked[0]
    assert "relative RMS error" in chunked[3] and "near atol" in chunked[3]


def test_integer_outputs_must_be_equal() -> None:
    ref = torch.arange(10_000, dtype=torch.int64)
    got = ref.clone()
    got[5_000] = -1
    assert compare_in_chunks(0, ref.clone(), ref, ALLCLOSE, CHUNK)[0]
    failed = compare_in_chunks(0, got, ref, ALLCLOSE, CHUNK)
    assert not failed[0] and "values differ" in failed[3] and "element 5000 " in failed[3]


def test_a_modified_input_is_found_in_any_chunk_and_nan_equals_nan() -> None:
    before = ref_of()
    before[3] = float("nan")
    assert unchanged_in_chunks(0, before, before.clone(), CHUNK) == ""
    after = before.clone()
    after[9_999] = 0.0
    assert unchanged_in_chunks(1, before, after, CHUNK) == (
        "input 1 was modified by the call (1 elements)"
    )
    assert "changed shape" in unchanged_in_chunks(0, before, before[:10], CHUNK)
