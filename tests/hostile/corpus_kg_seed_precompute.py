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

import time

import torch
import torch.nn as nn


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
        time.sleep(0.002)
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
