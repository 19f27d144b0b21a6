"""Comparing a candidate's outputs with the reference's, in the judge.

Policy (DESIGN.md, FAULTS.md 9-10):
- the number of outputs, and each output's exact type, shape, dtype and device type, must match;
- strides: a contiguous output, or exactly the reference's strides;
- NaN in the reference is a bad reference, found before any candidate runs (`reference_problem`);
- NaN or Inf where the reference is finite fails; an infinite reference needs the same infinity;
- values: `allclose` |x - ref| <= atol + rtol * |ref| everywhere (KernelBench defaults by dtype
  for kind `kernelbench`), or `rel_rms` ||x - ref|| / ||ref|| <= max_rel_rms per output;
- allclose kinds also bound the relative RMS error (`relative_guard`: the tolerance's
  max_rel_rms if given, else max(0.05, 4 rtol), at most 0.25; rtol / 3 where most reference
  values sit inside atol): there (softmax over 151,936 columns) atol alone passes a row sum
  taken over a quarter of each row and scaled by 4 (a relative RMS error of 0.4-0.9% on random
  rows, inside rtol 1%), while rounding an exact answer to bfloat16 gives 0.17%;
- precision: a float32 output whose values carry 16-bit precision (the low 13 mantissa bits zero
  in nearly every element: rounded through bfloat16 or float16) where the reference's use them
  fails as a precision downgrade, unless the tolerance says `low_precision_ok`.
Errors are computed in float64 for float64 outputs and float32 otherwise (exact for 16-bit types).

Most outputs pass, so a quick check runs first (`_quick_pass`): about a third of the full
comparison's passes over the output, one host round trip instead of five. It passes an output only
when every element is finite and inside the tolerance with room to spare (EDGE); anything else,
near the edge or failing, goes through the full comparison, which alone decides and describes.

A reference kept on another device (the host, under a lean memory plan) is compared a chunk at a
time by compare_chunks.py, which the judge calls (`compare_anywhere`, `unchanged_anywhere`).

Imports torch and the standard library only: an exported package ships this file as its own
compare.py (hipevolve/export/package.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

MISMATCH_CHARS = 400
EDGE = 0.999  # the quick check passes only this far inside the tolerance: far beyond rounding


def _kb_tol(dtype: torch.dtype) -> float:
    return 1e-4 if dtype in (torch.float32, torch.float64) else 1e-2


def tolerance_for(tol: dict[str, Any], dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) of an allclose-style tolerance dict for an output of `dtype`."""
    if tol["kind"] == "kernelbench":
        return _kb_tol(dtype), _kb_tol(dtype)
    return float(tol.get("atol") or 0.0), float(tol.get("rtol") or 0.0)


def reference_problem(outputs: list[torch.Tensor]) -> str:
    """Why these reference outputs cannot judge anything ('' when they can)."""
    for i, ref in enumerate(outputs):
        if ref.is_floating_point() or ref.is_complex():
            nans = int(torch.isnan(ref).sum())
            if nans:
                return f"output {i} of the reference has {nans} NaN values"
    return ""


def _wide(t: torch.Tensor) -> torch.Tensor:
    if t.dtype in (torch.float64, torch.complex128):
        return t.to(torch.float64) if not t.is_complex() else t
    if t.is_complex():
        return t.to(torch.complex64)
    return t.to(torch.float32)


def _trim(text: str) -> str:
    return text if len(text) <= MISMATCH_CHARS else text[: MISMATCH_CHARS - 3] + "..."


def check_meta(index: int, meta: dict[str, Any], ref: torch.Tensor, device: str = "") -> str:
    """What is wrong with an output's type, shape, dtype, device or strides ('' if nothing).
    device: where outputs belong (the job's), when the reference is kept elsewhere (the host,
    under a lean memory plan); by default the reference's own device."""
    expected = device.split(":")[0] or ref.device.type
    what = f"output {index}"
    if tuple(meta["shape"]) != tuple(ref.shape):
        return f"{what}: shape {tuple(meta['shape'])}, expected {tuple(ref.shape)}"
    if meta["dtype"] != str(ref.dtype).removeprefix("torch."):
        return f"{what}: dtype {meta['dtype']}, expected {str(ref.dtype).removeprefix('torch.')}"
    if meta["device"].split(":")[0] != expected:
        return f"{what}: on device {meta['device']}, expected {expected}"
    if not meta["contiguous"] and tuple(meta["stride"]) != tuple(ref.stride()):
        return (
            f"{what}: strides {tuple(meta['stride'])} are neither contiguous nor the "
            f"reference's {tuple(ref.stride())}"
        )
    return ""


GUARD_FLOOR, GUARD_CAP, GUARD_RTOLS = 0.05, 0.25, 4.0
# A float32 value rounded through float16 has its low 13 mantissa bits zero (bfloat16: 16).
_LOW13 = (1 << 13) - 1
_LOW16 = (1 << 16) - 1
FULL_SHARE = 0.5  # the reference uses its low bits in at least this share of its elements
DOWNGRADED_SHARE = 0.01  # the output in at most this share
MIN_ELEMENTS = 16


NEAR_ATOL_SHARE = 0.5  # above this share of reference values inside atol, the RMS bound is:
NEAR_ATOL_RTOLS = 1 / 3  # ... this share of rtol (module docstring: why)


def relative_guard(
    tol: dict[str, Any], dtype: torch.dtype, ref: torch.Tensor | None = None
) -> float:
    """The relative RMS bound an allclose-kind output must also meet. Where most reference
    values sit inside atol (a 151,936-wide softmax row: every value below 1e-5), atol alone
    would pass a row computed from part of its inputs, so a third of the relative tolerance
    bounds the relative RMS error; elsewhere a looser guard (4 rtol, at least 0.05)."""
    if tol.get("max_rel_rms"):
        return float(tol["max_rel_rms"])
    atol, rtol = tolerance_for(tol, dtype)
    if ref is not None and rtol > 0 and ref.numel():
        near = float((ref.abs() <= atol).float().mean())
        if near > NEAR_ATOL_SHARE:
            return NEAR_ATOL_RTOLS * rtol
    return min(GUARD_CAP, max(GUARD_FLOOR, GUARD_RTOLS * rtol))


def _low_bits_share(t: torch.Tensor, mask: int) -> tuple[float, int]:
    """(share of finite non-zero elements whose low mantissa bits under `mask` are not all
    zero, how many such elements). Reads `t` only."""
    bits = t.contiguous().view(torch.int32)
    counted = torch.isfinite(t) & (t != 0)
    n = int(counted.sum())
    if n == 0:
        return 0.0, 0
    used = ((bits & mask) != 0) & counted
    return int(used.sum()) / n, n


def precision_problem(index: int, got: torch.Tensor, ref: torch.Tensor, tol: dict[str, Any]) -> str:
    """Why a float32 output carries less precision than its reference ('' when it does not)."""
    if ref.dtype != torch.float32 or got.dtype != torch.float32 or tol.get("low_precision_ok"):
        return ""
    ref_share, n_ref = _low_bits_share(ref, _LOW13)
    if n_ref < MIN_ELEMENTS or ref_share < FULL_SHARE:
        return ""  # the reference itself is exact or coarse here: nothing to compare with
    share, n = _low_bits_share(got.to(ref.device), _LOW13)
    if n < MIN_ELEMENTS or share > DOWNGRADED_SHARE:
        return ""
    bf16 = _low_bits_share(got.to(ref.device), _LOW16)[0] <= DOWNGRADED_SHARE
    return _trim(
        f"output {index}: precision downgrade: float32 values carry only "
        f"{'bfloat16' if bf16 else 'float16'} precision (the low 13 mantissa bits are zero in "
        f"{100 * (1 - share):.1f}% of them, {100 * (1 - ref_share):.1f}% in the reference)"
    )


def rel_rms_verdict(
    index: int, max_abs: float, rel_rms: float, tol: dict
) -> tuple[bool, float, float, str]:
    """compare_values' answer under a rel_rms tolerance: within max_rel_rms, or why not (the
    one rule for a comparison on one device and one in chunks: compare_chunks)."""
    limit = float(tol["max_rel_rms"])
    if rel_rms <= limit:
        return True, max_abs, rel_rms, ""
    return (
        False,
        max_abs,
        rel_rms,
        _trim(
            f"output {index}: relative RMS error {rel_rms:.3g} > {limit:g}; "
            f"max abs error {max_abs:.3g}"
        ),
    )


def compare_values(
    index: int, got: torch.Tensor, ref: torch.Tensor, tol: dict[str, Any]
) -> tuple[bool, float, float, str]:
    """(passes, max_abs_err, rel_rms_err, mismatch summary) of one output. A reference kept on
    another device is compared by compare_chunks.compare_anywhere."""
    if precision_problem(index, got, ref, tol):
        return compare_fully(index, got, ref, tol)
    quick = _quick_pass(got.to(ref.device), ref, tol)
    if quick is not None:
        return True, *quick, ""
    return compare_fully(index, got, ref, tol)


def compare_fully(
    index: int, got: torch.Tensor, ref: torch.Tensor, tol: dict[str, Any]
) -> tuple[bool, float, float, str]:
    """compare_values without the quick check: the policy, element by element."""
    g, r = _wide(got.to(ref.device)), _wide(ref)
    if not (r.is_floating_point() or r.is_complex()):
        bad = g != r
        max_abs = float((g - r).abs().max()) if g.numel() else 0.0
        if bool(bad.any()):
            return False, max_abs, float("nan"), _summary(index, g, r, bad, "values differ")
        return True, 0.0, 0.0, ""
    finite_ref = torch.isfinite(r)
    bad_nonfinite = finite_ref & ~torch.isfinite(g)
    inf_ref = torch.isinf(r)
    bad_nonfinite |= inf_ref & (g != r)
    diff = torch.where(finite_ref, (g - r).abs(), torch.zeros_like(r.real if r.is_complex() else r))
    diff = diff.nan_to_num(nan=float("inf"))
    max_abs = float(diff.max()) if diff.numel() else 0.0
    ref_norm = float(torch.linalg.vector_norm(torch.where(finite_ref, r, 0)))
    err_norm = float(torch.linalg.vector_norm(diff))
    rel_rms = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    if bool(bad_nonfinite.any()):
        return (
            False,
            max_abs,
            rel_rms,
            _summary(index, g, r, bad_nonfinite, "NaN/Inf where the reference is finite"),
        )
    if tol["kind"] == "rel_rms":
        return rel_rms_verdict(index, max_abs, rel_rms, tol)
    downgrade = precision_problem(index, got, ref, tol)
    if downgrade:
        return False, max_abs, rel_rms, downgrade
    atol, rtol = tolerance_for(tol, ref.dtype)
    bad = finite_ref & (diff > atol + rtol * r.abs())
    if bool(bad.any()):
        return (
            False,
            max_abs,
            rel_rms,
            _summary(
                index,
                g,
                r,
                bad,
                f"{int(bad.sum())} of {r.numel()} elements outside atol={atol:g} rtol={rtol:g}",
            ),
        )
    guard = relative_guard(tol, ref.dtype, r)
    if ref_norm > 0 and not rel_rms <= guard:
        return (
            False,
            max_abs,
            rel_rms,
            _trim(
                f"output {index}: every element is within atol={atol:g} rtol={rtol:g}, but the "
                f"relative RMS error is {rel_rms:.3g} > {guard:g}: the values are near atol, "
                f"not near the reference; max abs error {max_abs:.3g}"
            ),
        )
    return True, max_abs, rel_rms, ""


def _quick_pass(
    g: torch.Tensor, r: torch.Tensor, tol: dict[str, Any]
) -> tuple[float, float] | None:
    """(max_abs_err, rel_rms_err) when `g` passes with room to spare, None when the full
    comparison must decide. Writes into neither tensor: `g` may be the candidate's memory."""
    if not r.is_floating_point() or r.numel() == 0:
        return None
    wide = torch.float64 if r.dtype == torch.float64 else torch.float32
    d = g.to(wide, copy=True)
    d.sub_(r)  # r widens exactly inside the kernel
    stats = [
        torch.linalg.vector_norm(d, float("inf")),
        torch.linalg.vector_norm(d),
        torch.linalg.vector_norm(r, dtype=wide),
    ]
    if tol["kind"] != "rel_rms":
        atol, rtol = tolerance_for(tol, r.dtype)
        stats.append(d.abs_().sub_(r.abs(), alpha=EDGE * rtol).max())  # NaN propagates
    max_abs, err_norm, ref_norm, *excess = torch.stack(stats).tolist()
    if not all(math.isfinite(x) for x in (max_abs, err_norm, ref_norm, *excess)):
        return None  # a NaN or Inf on either side: the full comparison says where
    rel_rms = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else math.inf)
    if tol["kind"] == "rel_rms":
        inside = rel_rms <= EDGE * float(tol["max_rel_rms"])
    else:
        guard = relative_guard(tol, r.dtype, r)
        inside = excess[0] <= EDGE * atol and (ref_norm == 0 or rel_rms <= EDGE * guard)
    return (max_abs, rel_rms) if inside else None


def _summary(index: int, g: torch.Tensor, r: torch.Tensor, bad: torch.Tensor, why: str) -> str:
    where = torch.nonzero(bad)[:3].tolist()
    shown = ", ".join(
        f"{tuple(ix)}: got {g[tuple(ix)].item():.6g} expected {r[tuple(ix)].item():.6g}"
        for ix in where
    )
    rel = ((g - r).abs() / r.abs().clamp_min(1e-12)).nan_to_num(nan=float("inf"))
    max_rel = float(rel[bad].max()) if bool(bad.any()) else 0.0
    max_abs = (
        float((g - r).abs().nan_to_num(nan=float("inf"))[bad].max()) if bool(bad.any()) else 0.0
    )
    return _trim(
        f"output {index}: {why}; first at {shown}; max abs err {max_abs:.3g}, "
        f"max rel err {max_rel:.3g}"
    )


def inputs_unchanged(
    before: list[torch.Tensor],
    after: list[torch.Tensor],
    one: Callable[[int, torch.Tensor, torch.Tensor], str] | None = None,
) -> str:
    """'' if every input tensor is bit-for-bit what it was (NaN equal to NaN), else which not;
    `one(i, before, after)` judges one input (input_unchanged, unless the caller says)."""
    if len(before) != len(after):
        return f"{len(after)} input tensors came back, {len(before)} went in"
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        changed = (one or input_unchanged)(i, b, a)
        if changed:
            return changed
    return ""


def input_unchanged(i: int, before: torch.Tensor, after: torch.Tensor) -> str:
    """'' if input `i` is bit-for-bit what it was (NaN equal to NaN), else how it changed."""
    a, b = after.to(before.device), before
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"input {i} changed shape or dtype"
    if torch.equal(a, b):
        return ""  # the usual answer, in one pass; NaN inputs take the way below
    same = a == b
    if b.is_floating_point() or b.is_complex():
        same |= torch.isnan(a) & torch.isnan(b)
    if not bool(same.all()):
        return f"input {i} was modified by the call ({int((~same).sum())} elements)"
    return ""
