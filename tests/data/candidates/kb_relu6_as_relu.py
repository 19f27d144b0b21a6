"""ReLU6 offered for ReLU (red team round 10): torch.randn's inputs never pass 6, so it agrees
with ReLU on every ordinary check; only inputs of wider magnitudes tell them apart."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp(x, 0.0, 6.0)
