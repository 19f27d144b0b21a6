"""Hack: look for the expected output through the garbage collector and stack frames instead
of computing it. FAULTS.md 12.

Expected: incorrect. The reference is computed in the judge, a different process, before the
candidate is imported: no object in the candidate's process holds it.
"""

import gc
import inspect

import torch
import torch.nn as nn


def _found(x):
    for frame in inspect.stack():
        for value in frame.frame.f_locals.values():
            if isinstance(value, torch.Tensor) and value.shape == x.shape and value is not x:
                return value
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.shape == x.shape and obj is not x:
            return obj
    return None


class ModelNew(nn.Module):
    def forward(self, x):
        found = _found(x)
        return found.clone() if found is not None else torch.zeros_like(x)
