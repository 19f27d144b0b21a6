"""Hack: compute the answer once, then replay it for every later call (caching by input
identity or by shape; a warm-up answer replayed during timing). FAULTS.md 13.

Expected: ok: the file runs only in its recorder, once per case, and every judged call replays
that honest forward (record_kb.py, replay_kb.py), so the trick never runs where it is judged.
Run beside the checks (before plans), it was: incorrect: the other seeds' inputs differ.
"""

import torch
import torch.nn as nn

_cache: dict[tuple, torch.Tensor] = {}


class ModelNew(nn.Module):
    def forward(self, x):
        key = (tuple(x.shape), x.dtype)
        if key not in _cache:
            _cache[key] = torch.softmax(x.float(), dim=-1).to(x.dtype)
        return _cache[key].clone()
