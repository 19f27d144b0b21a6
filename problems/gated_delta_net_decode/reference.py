"""Gated DeltaNet decode: one token of the gated delta rule per sequence, the state read and
written back (FLA's fused_recurrent_gated_delta_rule with T = 1, as vLLM runs it per layer).

FLA convention: the state h is S^T, shape [K, V] per (batch, value head); g = log(alpha).
Value head j reads query/key head j // (HV // H). For each (batch, value head):

    h   <- h * exp(g)
    u   =  beta * (v - h^T k)
    h   <- h + k u^T
    o   =  h^T (scale * q),      scale = K ** -0.5

Interface: forward(q, k, v, g, beta, state) -> (o, new_state), out of place:
    q, k       [B, 1, H, K]   bf16 (L2-normalised over K)
    v          [B, 1, HV, V]  bf16, HV a multiple of H
    g, beta    [B, 1, HV]     fp32
    state      [B, HV, K, V]  fp32, read only: it must not be modified
    o          [B, 1, HV, V]  in q's dtype
    new_state  [B, HV, K, V]  fp32, a new tensor

The work is the state: 64 KB of fp32 per (batch, value head) read and written, so the step is
bandwidth bound. Benchmarks must rotate several state buffers so that the state is not served
from L2 (50 MB on an H200) or Infinity Cache (256 MB on an MI300X).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """One Gated DeltaNet decode step: (q, k, v, g, beta, state) -> (o, new_state)."""

    def __init__(self):
        super().__init__()

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        state: torch.Tensor,
    ):
        _, t, h, kd = q.shape
        hv, out_dtype = v.shape[2], q.dtype
        if t != 1:
            raise ValueError(f"decode takes one token per sequence, got T = {t}")
        # TF32 matmuls would make this reference about as inexact as the kernels it judges.
        matmul = getattr(torch.backends.cuda.matmul, "fp32_precision", "none")
        if q.is_cuda and matmul == "tf32":
            raise RuntimeError("the gated_delta_net_decode reference needs IEEE fp32 matmuls")
        dt = torch.promote_types(q.dtype, torch.float32)  # fp32, or float64 for float64 inputs
        q = q[:, 0].to(dt).repeat_interleave(hv // h, dim=1) * kd**-0.5  # [B, HV, K]
        k = k[:, 0].to(dt).repeat_interleave(hv // h, dim=1)
        v, g, beta = v[:, 0].to(dt), g[:, 0].to(dt), beta[:, 0].to(dt)  # [B, HV, V], [B, HV]
        new_state = state.to(dt) * g.exp()[..., None, None]
        u = beta[..., None] * (v - torch.einsum("bhkv,bhk->bhv", new_state, k))
        new_state = new_state + k[..., :, None] * u[..., None, :]
        o = torch.einsum("bhkv,bhk->bhv", new_state, q)
        return o[:, None].to(out_dtype), new_state


def l2_normalise(x: torch.Tensor) -> torch.Tensor:
    """x * rsqrt(sum(x^2) + 1e-6) over the last dimension, as Qwen3-Next does to q and k."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


def get_inputs(
    B: int = 32, H: int = 16, HV: int = 32, K: int = 128, V: int = 128, dtype: str = "bfloat16"
):
    """q, k L2-normalised; v ~ N(0, 1); g = logsigmoid(N(0, 1)) / 16; beta = sigmoid(N(0, 1));
    the state has N(0, 1) entries. dtype is that of q, k, v; g, beta and the state are fp32
    (all float64 when dtype is float64)."""
    io = getattr(torch, dtype)
    f = torch.float64 if io == torch.float64 else torch.float32
    q = l2_normalise(torch.randn(B, 1, H, K, dtype=f)).to(io)
    k = l2_normalise(torch.randn(B, 1, H, K, dtype=f)).to(io)
    v = torch.randn(B, 1, HV, V, dtype=f).to(io)
    g = F.logsigmoid(torch.randn(B, 1, HV, dtype=f)) / 16
    beta = torch.sigmoid(torch.randn(B, 1, HV, dtype=f))
    state = torch.randn(B, HV, K, V, dtype=f)
    return [q, k, v, g, beta, state]


def get_init_inputs():
    return []
