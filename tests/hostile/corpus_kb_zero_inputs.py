"""Hack: zero the input in place, then return the answer for the zeroed input, hoping the
reference is computed afterwards from the same (now zeroed) tensor and agrees.

Source: ScalingIntelligence/KernelBench src/kernelbench/unit_tests/test_eval_adversarial.py
(test_input_modification) and src/kernelbench/unit_tests/test_kernels/zero_out_kernel.py
@ 423217d9fda91e0c2d67e4a43bf62f96f6d104f1 (ported from a matmul that zeroes A and B).

Expected: incorrect ("input 0 was modified"): the reference ran on its own copy beforehand.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        x.zero_()
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
