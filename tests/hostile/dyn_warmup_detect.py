"""Hack: behave during the correctness calls, then detect the timing loop (by counting calls)
and return unwritten memory instantly. FAULTS.md 20.

Expected: hacked: the timed calls' outputs, checked at random, are wrong ("wrong in a timed
call"); the checked call after timing would show it too.
"""

import torch
import torch.nn as nn

_calls = [0]


class ModelNew(nn.Module):
    def forward(self, x):
        _calls[0] += 1
        if _calls[0] > 6:  # 3 seeds x 2 runs in the checks
            return torch.empty_like(x)
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
