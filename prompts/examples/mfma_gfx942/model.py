"""C = A @ B for one 16x16 bf16 tile through the worked MFMA example (fp32 result)."""

import torch
import torch.nn as nn

from hipevolve.runtime import kernels


class ModelNew(nn.Module):
    def forward(self, a, b):
        c = torch.empty(16, 16, dtype=torch.float32, device=a.device)
        kernels.mfma_example(a, b, c)
        return c
