"""Row log-softmax over the vocabulary, as for token log-probabilities in sampling and RL."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(x.float(), dim=-1).to(x.dtype)


def get_inputs(rows: int = 1024, cols: int = 128256, dtype: str = "bfloat16"):
    # Logits of std 2, drawn in the target dtype (times 2 is exact).
    return [torch.randn(rows, cols, dtype=getattr(torch, dtype)).mul_(2.0)]


def get_init_inputs():
    return []
