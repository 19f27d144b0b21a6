"""Gated DeltaNet prefill: chunk_gated_delta_rule of flash-linear-attention (FLA), forward only.

Yang, Kautz, Hatamizadeh, "Gated Delta Networks" (arXiv 2412.06464), as served in Qwen3-Next.
FLA convention: the state h is S^T, shape [K, V] per (batch, value head); g_t = log(alpha_t).
One step of the recurrence (value head j reads query/key head j // (HV // H)):

    h   <- h * exp(g_t)
    u   =  beta_t * (v_t - h^T k_t)
    h   <- h + k_t u^T
    o_t =  h^T (scale * q_t),      scale = K ** -0.5

that is S_t = S_{t-1} alpha_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T (the paper's form).

Interface: forward(q, k, v, g, beta, initial_state, cu_seqlens=None) -> (o, final_state)
    q, k           [B, T, H, K]   bf16 (L2-normalised over K)
    v              [B, T, HV, V]  bf16, HV a multiple of H
    g, beta        [B, T, HV]     fp32 (g <= 0 is the log decay, 0 < beta < 1)
    initial_state  [N, HV, K, V]  fp32, always given (zeros for a fresh sequence, as vLLM does)
    cu_seqlens     [N + 1]        int64 or absent (None). Absent: B sequences of T tokens, N = B.
                                  Given (FLA's varlen input, how servers pack prompts): B = 1 and
                                  sequence i is tokens cu_seqlens[i] .. cu_seqlens[i + 1] - 1;
                                  cu_seqlens[0] = 0, cu_seqlens[N] = T, lengths >= 1.
    o              [B, T, HV, V]  in q's dtype
    final_state    [N, HV, K, V]  fp32

The reference computes in fp32 (float64 when given float64 inputs) with the chunked form
(C = 64, UT/WY transform); `recurrent_gated_delta_rule` is the step-by-step form it is tested against.
"""

from __future__ import annotations

from itertools import pairwise

import torch
import torch.nn as nn
import torch.nn.functional as F

CHUNK = 64
STEP_ROWS = 256  # (segment, sequence, head) rows that fill one step of the chunk loop


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    # bf16/fp16/fp32 inputs compute in fp32; float64 inputs stay float64 (for exactness tests).
    return torch.promote_types(x.dtype, torch.float32)


def _heads_first(x: torch.Tensor, hv: int, dtype: torch.dtype) -> torch.Tensor:
    """[B, T, H, D] -> [B, HV, T, D]: grouped value heads read head j // (HV // H)."""
    x = x.to(dtype)
    if x.shape[2] != hv:
        x = x.repeat_interleave(hv // x.shape[2], dim=2)
    return x.transpose(1, 2)


def _check_shapes(q, k, v, g, beta, initial_state) -> None:
    b, t, h, kd = q.shape
    hv, vd = v.shape[2], v.shape[3]
    if k.shape != q.shape or v.shape[:2] != (b, t) or hv % h:
        raise ValueError(f"bad shapes q{tuple(q.shape)} k{tuple(k.shape)} v{tuple(v.shape)}")
    if g.shape != (b, t, hv) or beta.shape != (b, t, hv):
        raise ValueError(f"g and beta must be [B, T, HV] = {(b, t, hv)}")
    if initial_state is not None and initial_state.shape != (b, hv, kd, vd):
        raise ValueError(f"initial_state must be [B, HV, K, V] = {(b, hv, kd, vd)}")


def gated_delta_rule_step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    h: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token: q, k [..., K], v [..., V], g, beta [...], h [..., K, V] -> (o [..., V], new h)."""
    h = h * g.exp()[..., None, None]
    u = beta[..., None] * (v - torch.einsum("...kv,...k->...v", h, k))
    h = h + k[..., :, None] * u[..., None, :]
    o = torch.einsum("...kv,...k->...v", h, q * scale)
    return o, h


def recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The recurrence one token at a time. Returns (o [B, T, HV, V], final_state), compute dtype."""
    _check_shapes(q, k, v, g, beta, initial_state)
    b, t, _, kd = q.shape
    hv, vd = v.shape[2], v.shape[3]
    dt = _compute_dtype(q)
    scale = kd**-0.5 if scale is None else scale
    q, k = _heads_first(q, hv, dt), _heads_first(k, hv, dt)
    v, g, beta = v.to(dt).transpose(1, 2), g.to(dt).transpose(1, 2), beta.to(dt).transpose(1, 2)
    h = q.new_zeros(b, hv, kd, vd) if initial_state is None else initial_state.to(dt)
    o = q.new_empty(b, hv, t, vd)
    for i in range(t):
        o[:, :, i], h = gated_delta_rule_step(
            q[:, :, i], k[:, :, i], v[:, :, i], g[:, :, i], beta[:, :, i], h, scale
        )
    return o.transpose(1, 2).contiguous(), h


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    scale: float | None = None,
    chunk: int = CHUNK,
    segments: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked (UT/WY) form: same result as the recurrence, a loop over T/chunk steps only.

    Per chunk, gamma = in-chunk cumulative sum of g and Gamma_ij = exp(gamma_i - gamma_j):
        A  = (I + tril(diag(beta) (K K^T * Gamma), -1))^-1
        W  = A (K * beta * exp(gamma));   U = A (V * beta)
        Vn = U - W h
        O  = (scale Q * exp(gamma)) h + tril(scale Q K^T * Gamma) Vn
        h' = exp(gamma_C) h + (K * exp(gamma_C - gamma))^T Vn
    The sequence is padded with g = 0 and beta = 0 (and zero q, k, v) to whole chunks, and to
    `segments` runs of equal length: a padded position leaves the state exactly unchanged, and
    causality keeps it out of the real positions' outputs.
    Segments (the loop is launch-bound on a GPU: its steps are small products that wait on one
    another): a chunk's step is affine in h, h' = M h + r, so a run of chunks from an unknown
    state h_in ends in P h_in + r_end. `_segment_starts` finds every segment's P and r_end at
    once (all segments in parallel, from [0 | I]), then chains the starts segment after segment;
    the chunk loop then runs all segments in parallel from their exact starts. segments=None
    picks about sqrt(8 N) for N chunks (the loop's launches: 8 per step of the first pass and
    the second together, one per segment of the chain), but no more than fill STEP_ROWS rows a
    step with the sequences and heads there are (the first pass does twice the products of the
    second, which a step of many heads already keeps the GPU busy with); 1 is the plain loop."""
    _check_shapes(q, k, v, g, beta, initial_state)
    b, t, _, kd = q.shape
    hv, vd = v.shape[2], v.shape[3]
    dt = _compute_dtype(q)
    scale = kd**-0.5 if scale is None else scale
    chunks = max(1, -(-t // chunk))
    if segments is None:  # enough to fill a GPU's step, few where the heads already do
        segments = 1 if chunks <= 8 else min(round((8 * chunks) ** 0.5), -(-STEP_ROWS // (b * hv)))
    length = -(-chunks // segments)  # chunks per segment
    segments = -(-chunks // length)
    n = segments * length
    pad = n * chunk - t

    def chunked(x: torch.Tensor) -> torch.Tensor:  # [B, HV, T, *] -> [B, HV, N, C, *]
        x = F.pad(x, (0, 0, 0, pad)) if x.dim() == 4 else F.pad(x, (0, pad))
        return x.reshape(b, hv, n, chunk, *x.shape[3:])

    q = chunked(_heads_first(q, hv, dt)) * scale
    k = chunked(_heads_first(k, hv, dt))
    v = chunked(v.to(dt).transpose(1, 2))
    g = chunked(g.to(dt).transpose(1, 2))
    beta = chunked(beta.to(dt).transpose(1, 2))

    # The recurrence runs step-major: [L, S * B * HV, ...] for L chunks a segment and S segments,
    # so that step i is one product over chunk i of every segment, its block contiguous. Each
    # term is put in that order as it is made, and what is done with is dropped (memory: the
    # judge runs this on 32k tokens at 64 heads).
    def steps(x: torch.Tensor) -> torch.Tensor:  # [B, HV, N, *] -> [L, S * B * HV, *]
        rest = x.shape[3:]
        x = x.reshape(b, hv, segments, length, *rest).movedim(3, 0).movedim(3, 1)
        return x.reshape(length, segments * b * hv, *rest).contiguous()

    # Everything that does not depend on the state, for all chunks at once.
    gamma = g.cumsum(-1)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    # Mask before exp: above the diagonal gamma_i - gamma_j > 0 can overflow, and inf * 0 = nan.
    decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~causal, float("-inf")).exp()
    attn = steps((q @ k.transpose(-1, -2)) * decay)  # decay is zero above the diagonal
    q_decayed = steps(q * gamma.exp()[..., None])
    del q
    unit_lower = torch.tril(beta[..., :, None] * (k @ k.transpose(-1, -2)) * decay, -1)
    del decay
    unit_lower += torch.eye(chunk, dtype=dt, device=k.device)

    rhs = k * (beta * gamma.exp())[..., None]
    w = steps(torch.linalg.solve_triangular(unit_lower, rhs, upper=False, unitriangular=True))
    rhs = v * beta[..., None]
    u = steps(torch.linalg.solve_triangular(unit_lower, rhs, upper=False, unitriangular=True))
    del unit_lower, rhs, v
    k_end_t = steps((k * (gamma[..., -1:] - gamma).exp()[..., None]).transpose(-1, -2))
    chunk_decay = steps(gamma[..., -1].exp())[..., None, None]
    del k, g, beta, gamma

    h0 = w.new_zeros(b * hv, kd, vd)
    if initial_state is not None:
        h0.copy_(initial_state.to(dt).reshape(b * hv, kd, vd))
    states = w.new_empty(length + 1, segments * b * hv, kd, vd)  # each chunk's state, the last
    states[0] = _segment_starts(w, u, k_end_t, chunk_decay, h0, segments) if segments > 1 else h0
    v_new = torch.empty_like(u)
    for c in range(length):
        torch.baddbmm(u[c], w[c], states[c], alpha=-1, out=v_new[c])
        torch.baddbmm(states[c] * chunk_decay[c], k_end_t[c], v_new[c], out=states[c + 1])
    del w, u, k_end_t
    # The outputs read the states and Vn after the loop, for all chunks in two batched products.
    o = attn.flatten(0, 1) @ v_new.flatten(0, 1)
    del attn, v_new
    o = torch.baddbmm(o, q_decayed.flatten(0, 1), states[:length].flatten(0, 1))
    o = o.reshape(length, segments, b, hv, chunk, vd).movedim(0, 3).movedim(0, 2)
    o = o.reshape(b, hv, n * chunk, vd)[:, :, :t].transpose(1, 2).contiguous()
    return o, states[length].reshape(segments, b, hv, kd, vd)[-1].clone()


def _segment_starts(
    w: torch.Tensor,
    u: torch.Tensor,
    k_end_t: torch.Tensor,
    chunk_decay: torch.Tensor,
    h0: torch.Tensor,
    segments: int,
) -> torch.Tensor:
    """Every segment's exact start state, [S * B * HV, K, V], from the step-major chunk terms of
    chunk_gated_delta_rule and the sequences' initial states h0 [B * HV, K, V].
    One pass over the L chunks of every segment at once carries [r | P] ([K, V + K]): the state
    reached from a start of zero and the linear map of the start, from [0 | I] (the first
    segment from [h0 | 0], its true start). A step maps both halves the same way, except that
    U feeds only r: [r | P]' = exp(gamma_C) [r | P] + K_end^T ([U | 0] - W [r | P]). Then the
    starts chain: start(s + 1) = r_end(s) + P_end(s) start(s)."""
    length, rows, chunk, kd = w.shape
    vd = u.shape[-1]
    heads = rows // segments
    carried = w.new_zeros(segments, heads, kd, vd + kd)
    carried[0, :, :, :vd] = h0
    carried[1:, :, :, vd:] = torch.eye(kd, dtype=w.dtype, device=w.device)
    carried = carried.reshape(rows, kd, vd + kd)
    v_new = w.new_empty(rows, chunk, vd + kd)
    for c in range(length):
        torch.bmm(w[c], carried, out=v_new)
        v_new.neg_()
        v_new[..., :vd] += u[c]
        carried = torch.baddbmm(carried * chunk_decay[c], k_end_t[c], v_new)
    carried = carried.reshape(segments, heads, kd, vd + kd)
    starts = [h0]
    for s in range(1, segments):
        starts.append(torch.baddbmm(carried[s - 1, ..., :vd], carried[s - 1, ..., vd:], starts[-1]))
    return torch.cat(starts)


def _require_ieee_fp32_matmul(x: torch.Tensor) -> None:
    # TF32 matmuls would make this reference about as inexact as the kernels it judges.
    # (fp32_precision, newer PyTorch, also reports the legacy allow_tf32 and global flags.)
    matmul = getattr(torch.backends.cuda.matmul, "fp32_precision", "none")
    if x.is_cuda and matmul == "tf32":
        raise RuntimeError("the gated_delta_net reference needs IEEE fp32 matmuls, not TF32")


def varlen_gated_delta_rule(q, k, v, g, beta, initial_state, cu_seqlens: torch.Tensor):
    """Packed sequences (B = 1, cu_seqlens [N + 1]): each sequence through the chunked form from
    its own initial state, sequences of one length together as one batch. Returns
    (o [1, T, HV, V], final_state [N, HV, K, V]) in the compute dtype."""
    bounds = [int(x) for x in cu_seqlens.tolist()]
    n = len(bounds) - 1
    t, hv, kd, vd = q.shape[1], v.shape[2], q.shape[3], v.shape[3]
    if q.shape[0] != 1 or n < 1 or bounds[0] != 0 or bounds[-1] != t:
        raise ValueError(f"cu_seqlens must run from 0 to T = {t} over B = 1, got {bounds[:8]}")
    if any(e <= s for s, e in pairwise(bounds)):
        raise ValueError("cu_seqlens must be strictly increasing: every sequence has a token")
    if initial_state.shape != (n, hv, kd, vd):
        raise ValueError(f"initial_state must be [N, HV, K, V] = {(n, hv, kd, vd)}")
    o = q.new_empty(1, t, hv, vd, dtype=_compute_dtype(q))
    final_state = torch.empty_like(initial_state, dtype=o.dtype)
    by_length: dict[int, list[int]] = {}
    for i, (s, e) in enumerate(pairwise(bounds)):
        by_length.setdefault(e - s, []).append(i)
    for length, seqs in by_length.items():
        rows = [slice(bounds[i], bounds[i] + length) for i in seqs]
        group = [torch.cat([x[:, r] for r in rows]) for x in (q, k, v, g, beta)]
        o_group, final_state[seqs] = chunk_gated_delta_rule(*group, initial_state[seqs])
        for j, r in enumerate(rows):
            o[0, r] = o_group[j]
    return o, final_state


class Model(nn.Module):
    """Gated DeltaNet prefill forward: (q, k, v, g, beta, initial_state, cu_seqlens=None) ->
    (o, final_state)."""

    def __init__(self):
        super().__init__()

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        initial_state: torch.Tensor,
        cu_seqlens: torch.Tensor | None = None,
    ):
        _require_ieee_fp32_matmul(q)
        if cu_seqlens is None:
            o, final_state = chunk_gated_delta_rule(q, k, v, g, beta, initial_state)
        else:
            o, final_state = varlen_gated_delta_rule(q, k, v, g, beta, initial_state, cu_seqlens)
        return o.to(q.dtype), final_state


def l2_normalise(x: torch.Tensor) -> torch.Tensor:
    """x * rsqrt(sum(x^2) + 1e-6) over the last dimension, as Qwen3-Next does to q and k."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


def get_inputs(
    B: int = 1,
    T: int = 4096,
    H: int = 16,
    HV: int = 32,
    K: int = 128,
    V: int = 128,
    dtype: str = "bfloat16",
    initial_state: str = "zero",
    seqlens: str = "",
):
    """q, k L2-normalised; v ~ N(0, 1); g = logsigmoid(N(0, 1)) / 16; beta = sigmoid(N(0, 1)).

    dtype is that of q, k, v; g, beta and the state are fp32 (all float64 when dtype is float64).
    initial_state: "zero" (a fresh sequence) or "random" (N(0, 1) entries, as FLA's tests draw it).
    seqlens: "" (B sequences of T tokens), or the lengths of packed sequences, comma-separated,
    summing to T with B = 1: then one state per sequence and a seventh input, cu_seqlens (int64).
    """
    if initial_state not in ("zero", "random"):
        raise ValueError(f"initial_state must be 'zero' or 'random', not {initial_state!r}")
    lengths = [int(x) for x in seqlens.split(",")] if seqlens else []
    if lengths and (B != 1 or sum(lengths) != T or min(lengths) < 1):
        raise ValueError(f"seqlens {seqlens!r} must be positive and sum to T = {T}, with B = 1")
    io = getattr(torch, dtype)
    f = torch.float64 if io == torch.float64 else torch.float32
    q = l2_normalise(torch.randn(B, T, H, K, dtype=f)).to(io)
    k = l2_normalise(torch.randn(B, T, H, K, dtype=f)).to(io)
    v = torch.randn(B, T, HV, V, dtype=f).to(io)
    g = F.logsigmoid(torch.randn(B, T, HV, dtype=f)) / 16
    beta = torch.sigmoid(torch.randn(B, T, HV, dtype=f))
    n = len(lengths) or B
    if initial_state == "random":
        h0 = torch.randn(n, HV, K, V, dtype=f)
    else:
        h0 = torch.zeros(n, HV, K, V, dtype=f)
    if not lengths:
        return [q, k, v, g, beta, h0]
    cu_seqlens = torch.tensor([0, *lengths], dtype=torch.int64).cumsum(0)
    return [q, k, v, g, beta, h0, cu_seqlens]


def get_init_inputs():
    return []
