"""compare.py's policy for outputs whose reference is kept on another device (the host, under a
lean memory plan: memplan.py), a chunk at a time, so the judge never holds a whole reference or a
whole output's worth of temporaries on the device.

Each chunk of the reference is copied to the output's device and compared with the same chunk
of the output (both flattened in logical order); what compare.compare_fully decides over the
whole output is decided here from sums over the chunks: NaN/Inf where the reference is finite,
the relative RMS error (sums of squares), allclose's bad elements, the relative guard (its share
of reference values inside atol), and the precision downgrade (shares of low mantissa bits).
There is no quick pass: every chunk is compared fully. A failure names the first bad element by
its position in the flattened output. The judge calls `compare_anywhere` and `unchanged_anywhere`:
compare.py's own functions where the reference is on the output's device, these elsewhere.

Imports torch, the standard library and hipevolve.verifier.gpu.{judge.compare,memplan} only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from hipevolve.verifier.gpu.judge import compare
from hipevolve.verifier.gpu.memplan import COMPARE_CHUNK_BYTES


def chunks(
    got: torch.Tensor, ref: torch.Tensor, chunk_bytes: int = COMPARE_CHUNK_BYTES
) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
    """(first flat index, got's chunk, ref's chunk on got's device) over both, flattened in
    logical order (a non-contiguous output is copied first)."""
    g, r = got.reshape(-1), ref.reshape(-1)
    step = max(1, chunk_bytes // max(ref.element_size(), 1))
    for a in range(0, g.numel(), step):
        yield a, g[a : a + step], r[a : a + step].to(got.device)


def _first(
    index: int,
    a: int,
    g: torch.Tensor,
    r: torch.Tensor,
    bad: torch.Tensor,
    why: str,
    max_abs: float,
) -> str:
    k = int(torch.nonzero(bad)[0, 0])
    return compare._trim(
        f"output {index}: {why}; first at element {a + k} of the flattened output: got "
        f"{g[k].item():.6g} expected {r[k].item():.6g}; max abs err {max_abs:.3g}"
    )


class _Sums:
    """What compare_fully computes over a whole output, summed over chunks."""

    def __init__(self) -> None:
        self.max_abs = 0.0
        self.err_sq = 0.0
        self.ref_sq = 0.0
        self.near = 0  # reference values inside atol
        self.n = 0
        self.bits = {"ref13": [0, 0], "got13": [0, 0], "got16": [0, 0]}  # [used, counted]
        self.nonfinite: tuple[int, Any, Any, Any] | None = None  # first chunk with NaN/Inf
        self.outside: tuple[int, Any, Any, Any] | None = None  # first chunk outside allclose
        self.outside_n = 0

    def add_bits(self, key: str, t: torch.Tensor, mask: int) -> None:
        bits = t.contiguous().view(torch.int32)
        counted = torch.isfinite(t) & (t != 0)
        self.bits[key][0] += int((((bits & mask) != 0) & counted).sum())
        self.bits[key][1] += int(counted.sum())

    def share(self, key: str) -> tuple[float, int]:
        used, n = self.bits[key]
        return (used / n if n else 0.0), n


def compare_in_chunks(
    index: int,
    got: torch.Tensor,
    ref: torch.Tensor,
    tol: dict[str, Any],
    chunk_bytes: int = COMPARE_CHUNK_BYTES,
) -> tuple[bool, float, float, str]:
    """compare.compare_fully's (passes, max_abs_err, rel_rms_err, mismatch) of one output,
    a chunk at a time (see the module docstring)."""
    if not (ref.is_floating_point() or ref.is_complex()):
        max_abs = 0.0
        first = None
        for a, gc, rc in chunks(got, ref, chunk_bytes):
            g, r = compare._wide(gc), compare._wide(rc)
            if g.numel():
                max_abs = max(max_abs, float((g - r).abs().max()))
            bad = g != r
            if first is None and bool(bad.any()):
                first = (a, g, r, bad)
        if first is not None:
            return False, max_abs, float("nan"), _first(index, *first, "values differ", max_abs)
        return True, 0.0, 0.0, ""
    atol, rtol = compare.tolerance_for(tol, ref.dtype) if tol["kind"] != "rel_rms" else (0, 0)
    bits = ref.dtype == torch.float32 and got.dtype == torch.float32
    bits = bits and not tol.get("low_precision_ok")
    s = _Sums()
    for a, gc, rc in chunks(got, ref, chunk_bytes):
        g, r = compare._wide(gc), compare._wide(rc)
        finite_ref = torch.isfinite(r)
        bad_nonfinite = (finite_ref & ~torch.isfinite(g)) | (torch.isinf(r) & (g != r))
        zero = torch.zeros_like(r.real if r.is_complex() else r)
        diff = torch.where(finite_ref, (g - r).abs(), zero).nan_to_num(nan=float("inf"))
        if diff.numel():
            s.max_abs = max(s.max_abs, float(diff.max()))
        s.err_sq += float(torch.linalg.vector_norm(diff, dtype=torch.float64)) ** 2
        s.ref_sq += (
            float(torch.linalg.vector_norm(torch.where(finite_ref, r, 0), dtype=torch.float64)) ** 2
        )
        if s.nonfinite is None and bool(bad_nonfinite.any()):
            s.nonfinite = (a, g, r, bad_nonfinite)
        if tol["kind"] != "rel_rms":
            bad = finite_ref & (diff > atol + rtol * r.abs())
            count = int(bad.sum())
            if count and s.outside is None:
                s.outside = (a, g, r, bad)
            s.outside_n += count
            s.near += int((r.abs() <= atol).sum())
            s.n += r.numel()
        if bits:
            s.add_bits("ref13", rc, compare._LOW13)
            s.add_bits("got13", gc, compare._LOW13)
            s.add_bits("got16", gc, compare._LOW16)
        del g, r, diff, finite_ref, bad_nonfinite
    return _decide(index, ref, tol, s, bits, atol, rtol)


def _decide(
    index: int,
    ref: torch.Tensor,
    tol: dict[str, Any],
    s: _Sums,
    bits: bool,
    atol: float,
    rtol: float,
) -> tuple[bool, float, float, str]:
    max_abs = s.max_abs
    err_norm, ref_norm = math.sqrt(s.err_sq), math.sqrt(s.ref_sq)
    rel_rms = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    if s.nonfinite is not None:
        why = "NaN/Inf where the reference is finite"
        return False, max_abs, rel_rms, _first(index, *s.nonfinite, why, max_abs)
    if tol["kind"] == "rel_rms":
        return compare.rel_rms_verdict(index, max_abs, rel_rms, tol)
    downgrade = _downgrade(index, s) if bits else ""
    if downgrade:
        return False, max_abs, rel_rms, downgrade
    if s.outside is not None:
        why = f"{s.outside_n} of {ref.numel()} elements outside atol={atol:g} rtol={rtol:g}"
        return False, max_abs, rel_rms, _first(index, *s.outside, why, max_abs)
    guard = _guard(tol, ref.dtype, s, atol, rtol)
    if ref_norm > 0 and not rel_rms <= guard:
        return (
            False,
            max_abs,
            rel_rms,
            compare._trim(
                f"output {index}: every element is within atol={atol:g} rtol={rtol:g}, but the "
                f"relative RMS error is {rel_rms:.3g} > {guard:g}: the values are near atol, "
                f"not near the reference; max abs error {max_abs:.3g}"
            ),
        )
    return True, max_abs, rel_rms, ""


def _guard(tol: dict[str, Any], dtype: torch.dtype, s: _Sums, atol: float, rtol: float) -> float:
    """compare.relative_guard from the share of reference values inside atol over all chunks."""
    if tol.get("max_rel_rms"):
        return float(tol["max_rel_rms"])
    if rtol > 0 and s.n and s.near / s.n > compare.NEAR_ATOL_SHARE:
        return compare.NEAR_ATOL_RTOLS * rtol
    return compare.relative_guard(tol, dtype)


def _downgrade(index: int, s: _Sums) -> str:
    """compare.precision_problem from the low-bit shares over all chunks."""
    ref_share, n_ref = s.share("ref13")
    if n_ref < compare.MIN_ELEMENTS or ref_share < compare.FULL_SHARE:
        return ""
    share, n = s.share("got13")
    if n < compare.MIN_ELEMENTS or share > compare.DOWNGRADED_SHARE:
        return ""
    bf16 = s.share("got16")[0] <= compare.DOWNGRADED_SHARE
    return compare._trim(
        f"output {index}: precision downgrade: float32 values carry only "
        f"{'bfloat16' if bf16 else 'float16'} precision (the low 13 mantissa bits are zero in "
        f"{100 * (1 - share):.1f}% of them, {100 * (1 - ref_share):.1f}% in the reference)"
    )


def unchanged_in_chunks(
    i: int, before: torch.Tensor, after: torch.Tensor, chunk_bytes: int = COMPARE_CHUNK_BYTES
) -> str:
    """compare.inputs_unchanged for one input kept on another device: '' or what changed."""
    if after.shape != before.shape or after.dtype != before.dtype:
        return f"input {i} changed shape or dtype"
    changed = 0
    for _, a, b in chunks(after, before, chunk_bytes):
        if torch.equal(a, b):
            continue
        same = a == b
        if b.is_floating_point() or b.is_complex():
            same |= torch.isnan(a) & torch.isnan(b)
        changed += int((~same).sum())
    return f"input {i} was modified by the call ({changed} elements)" if changed else ""


def compare_anywhere(
    index: int, got: torch.Tensor, ref: torch.Tensor, tol: dict[str, Any]
) -> tuple[bool, float, float, str]:
    """compare.compare_values for a reference on any device: one kept on another device than the
    output (the host, under a lean memory plan) is compared a chunk at a time."""
    if got.device != ref.device and got.device.type != "cpu":
        return compare_in_chunks(index, got, ref, tol)
    return compare.compare_values(index, got, ref, tol)


def unchanged_anywhere(before: list[torch.Tensor], after: list[torch.Tensor]) -> str:
    """compare.inputs_unchanged for inputs on any device: one kept on another device than the
    candidate's copy (the host, under a lean memory plan) is compared a chunk at a time."""
    return compare.inputs_unchanged(before, after, one=_unchanged_anywhere)


def _unchanged_anywhere(i: int, before: torch.Tensor, after: torch.Tensor) -> str:
    if after.device != before.device and after.device.type != "cpu":
        return unchanged_in_chunks(i, before, after)
    return compare.input_unchanged(i, before, after)
