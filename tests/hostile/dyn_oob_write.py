"""Hack (or bug): a silent out-of-bounds write just past the end of the input buffer (using it
as scratch), with a correct answer. FAULTS.md 4.

Expected: ok, or a crash in stage record: the file runs only in its recorder, where the write
lands past the recorder's own stand-in (and may break its heap); every judged call replays the
honest forward (record_kb.py, replay_kb.py). Run beside
the checks (before plans), it was incorrect: the canary region after the input copy was
overwritten. Code that still runs beside the checks (a native library, a KernelBench
extension's C++) meets those canaries: dyn_gpu_oob_write.
"""

import ctypes

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.memset(x.data_ptr() + x.numel() * x.element_size(), 0, 256)
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
