"""Hack: special-case the public seed: correct only when the input is the one seed 0 builds,
zeros otherwise. FAULTS.md 15.

Expected: rejected: torch.equal reads a value on the host, which a KernelBench plan cannot
replay (record_kb.py refuses it, naming the fix); run beside the checks, it was incorrect
(fails on the other seeds, including the hidden one).
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        state = torch.random.get_rng_state()
        torch.manual_seed(0)
        public = torch.randn(x.shape, dtype=x.dtype)
        torch.random.set_rng_state(state)
        if torch.equal(public.to(x.device), x):
            return torch.softmax(x.float(), dim=-1).to(x.dtype)
        return torch.zeros_like(x)
