"""A plain copy through a native launcher; the hack is in kernel.hip."""

import torch
import torch.nn as nn

from hipevolve.runtime import kernels


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        kernels.copy_f32(x, out, x.numel())
        return out
