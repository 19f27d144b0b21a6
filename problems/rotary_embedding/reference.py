"""Rotary position embedding (NeoX rotate-half style) applied to q and k, layout
[batch, seq, heads, head_dim], positions 0..seq-1; cos/sin tables built in the module (fp32)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, head_dim: int, max_positions: int, base: float = 500000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(max_positions, dtype=torch.float32), inv_freq)
        # [positions, head_dim / 2] tables, as vLLM's cos_sin_cache holds them.
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def _rotate(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        cos = self.cos[: x.shape[1], None, :]  # broadcast over batch and heads
        sin = self.sin[: x.shape[1], None, :]
        xf = x.float()
        x1, x2 = xf[..., :half], xf[..., half:]
        # fp32 math, one rounding to the input dtype.
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)

    def forward(self, q: torch.Tensor, k: torch.Tensor):
        return self._rotate(q), self._rotate(k)


def get_inputs(
    batch: int = 4,
    seq: int = 4096,
    q_heads: int = 32,
    kv_heads: int = 8,
    head_dim: int = 128,
    dtype: str = "bfloat16",
):
    dt = getattr(torch, dtype)
    q = torch.randn(batch, seq, q_heads, head_dim, dtype=dt)
    k = torch.randn(batch, seq, kv_heads, head_dim, dtype=dt)
    return [q, k]


def get_init_inputs(head_dim: int = 128, max_positions: int = 4096, base: float = 500000.0):
    return [head_dim, max_positions, base]
