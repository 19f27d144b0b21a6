"""SwiGLU gate through one kernel (kernel.hip: silu_and_mul_bf16).

forward(x) -> silu(x[..., :d]) * x[..., d:] with d = x.shape[-1] // 2, computed in fp32 and
rounded once to bfloat16. x must be bfloat16 with an even last dimension, contiguous, on a GPU
and start on a 16-byte boundary (the widest vector access); inputs the kernel was not written
for raise ValueError before any kernel runs.
"""

import torch
import torch.nn as nn

from hipevolve.runtime import kernels

ALIGN = 16  # bytes: VEC = 8 bfloat16 elements move as one access
INT_MAX = 2**31 - 1  # tokens and d are int launcher arguments


def _check(x) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"x must be a tensor, got {type(x).__name__}")
    if x.dtype != torch.bfloat16:
        raise ValueError(f"x must be bfloat16, got {x.dtype}")
    if x.dim() < 1 or x.shape[-1] % 2:
        raise ValueError(f"x {tuple(x.shape)} must end in an even dimension [gate | up]")
    if not x.is_cuda:
        raise ValueError(f"x is on {x.device}: the kernel runs on a GPU")
    if not x.is_contiguous():
        raise ValueError("x must be contiguous")
    if x.data_ptr() % ALIGN:
        raise ValueError(f"x must start on a {ALIGN}-byte boundary (vector loads)")
    two_d = x.shape[-1]
    if two_d > INT_MAX or (two_d and x.numel() // two_d > INT_MAX):
        raise ValueError(f"tokens and the last dimension must each be at most {INT_MAX}")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _check(x)
        d = x.shape[-1] // 2
        tokens = x.numel() // (2 * d) if d else 0
        out = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
        kernels.silu_and_mul_bf16(x, out, tokens, d)
        return out
