"""Row softmax through kernel.hip (softmax_f32, softmax_bf16)."""

import torch
import torch.nn as nn

from hipevolve.runtime import kernels


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        y = torch.empty_like(x)
        if x.dtype == torch.float32:
            kernels.softmax_f32(x, y, rows, cols)
        else:
            kernels.softmax_bf16(x, y, rows, cols)
        return y
