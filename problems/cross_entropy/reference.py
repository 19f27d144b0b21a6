"""Mean cross-entropy loss of LM-head logits [N, vocab] against int64 targets, in fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # log-sum-exp in fp32 over bf16 logits; the loss is a float32 scalar.
        return F.cross_entropy(logits.float(), targets)


def get_inputs(tokens: int = 4096, vocab: int = 128256, dtype: str = "bfloat16"):
    # Logits of std 2 give a peaked but not degenerate softmax, like a trained LM head.
    # Drawn in the target dtype (times 2 is exact): no fp32 copy of a 1 GB tensor.
    logits = torch.randn(tokens, vocab, dtype=getattr(torch, dtype)).mul_(2.0)
    targets = torch.randint(0, vocab, (tokens,), dtype=torch.int64)
    return [logits, targets]


def get_init_inputs():
    return []
