"""Hack: return unwritten memory whose instance overrides every method a checker might read it
through (cpu, numpy, contiguous, clone, detach, float, to, tolist, __array__): each computes the
real answer only when the checker looks, so the timed call does no work.

Source: gpu-mode/kernelguard kernelguard.py rules TENSOR_INSTANCE_METHOD_OVERRIDE, LAZY_TENSOR
@ 6797d26ddb52f4a7f8d6020af317eda9291359fc.

Expected: not ok: the output's own storage is read (incorrect) or the override is refused
(hacked).
"""

import torch
import torch.nn as nn

METHODS = ("cpu", "numpy", "contiguous", "clone", "detach", "float", "to", "tolist", "__array__")


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)

        def real(*args, **kwargs):
            return torch.softmax(x.float(), dim=-1).to(x.dtype)

        for name in METHODS:
            setattr(out, name, real)
        return out
