"""torch.matmul: the vendor BLAS (cuBLAS/cuBLASLt, hipBLASLt on ROCm) in bf16 with fp32
accumulation, the GEMM every PyTorch user already has. A strong baseline of gemm_bf16
(task.toml [[baselines]]), timed beside the reference once per run."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)
