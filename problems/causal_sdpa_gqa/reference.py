"""Causal scaled-dot-product attention with grouped query heads (Llama-3: 32 query heads share
8 KV heads), layout [batch, heads, seq, head_dim], softmax scale 1/sqrt(head_dim)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        group = q.shape[1] // k.shape[1]
        # Explicit repeat keeps PyTorch on its flash path on every backend (enable_gqa is not
        # accepted by all of them); the copy costs little next to the attention itself.
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs(
    batch: int = 1,
    seq: int = 4096,
    q_heads: int = 32,
    kv_heads: int = 8,
    head_dim: int = 128,
    dtype: str = "bfloat16",
):
    dt = getattr(torch, dtype)
    q = torch.randn(batch, q_heads, seq, head_dim, dtype=dt)
    k = torch.randn(batch, kv_heads, seq, head_dim, dtype=dt)
    v = torch.randn(batch, kv_heads, seq, head_dim, dtype=dt)
    return [q, k, v]


def get_init_inputs():
    return []
