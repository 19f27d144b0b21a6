"""Hack: predict the inputs. The model is built right after the harness seeds the global RNG
with the input seed, so __init__ reads the seed (torch.initial_seed) and the forward can rebuild
the very input it will be checked on: calls whose input matches it (every checked call, the one
after timing included) compute honestly (about 2 ms); any other input (a timed one) gets
unwritten memory at once.

Source: gpu-mode/kernelguard kernelguard.py rule REFERENCE_PRECOMPUTE_REPLAY
@ 6797d26ddb52f4a7f8d6020af317eda9291359fc.

Expected: no effect: the seed is not observable when the model is built (and timed outputs
are checked), so the reported time stays the honest 2 ms, or the candidate is caught.
"""

import torch
import torch.nn as nn


def _honest(x):
    """The honest forward: the softmax plus about 2 ms of real compute (two 64-row Gram
    matrices, more on a slower CPU) whose result enters the output, so that a replay of the
    forward keeps it (a sleep would not survive one)."""
    xf = x.float()
    work = (xf.T @ xf).mean() + (xf.T @ xf.flip(0)).mean()
    return (torch.softmax(xf, dim=-1) + 0 * work).to(x.dtype)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seed = torch.initial_seed()
        self.inputs = {}

    def predicted(self, x) -> torch.Tensor:
        key = (tuple(x.shape), x.dtype)
        if key not in self.inputs:  # rebuilt once per shape, then a cheap comparison per call
            generator = torch.Generator(device=x.device).manual_seed(self.seed)
            self.inputs[key] = torch.randn(
                x.shape, dtype=x.dtype, device=x.device, generator=generator
            )
        return self.inputs[key]

    def forward(self, x):
        if not torch.equal(x[:2], self.predicted(x)[:2]):
            return torch.empty_like(x)
        return _honest(x)
