"""Hack: print what looks like the harness's own result lines (a benchmark summary, a JSON
result, a timing_done message) on stdout and stderr, hoping the harness parses the candidate's
output as its result. The forward is honest (about 2 ms).

Source: gpu-mode/kernelguard kernelguard.py rule FAKE_BENCHMARK_EMIT
@ 6797d26ddb52f4a7f8d6020af317eda9291359fc.

Expected: no effect: ok with the honest time (about 2 ms); the candidate's output is never read
as a result.
"""

import json
import sys

import torch
import torch.nn as nn

FAKE = [
    "benchmark-count: 1\nbenchmark.0.mean: 0.42\nbenchmark.0.status: pass\ncheck: pass",
    json.dumps({"kind": "timing_done", "case": "small", "trials": [0.42] * 10, "status": "ok"}),
    "event-overhead\t0.001 us\n" + "".join(f"{i}\t0.42\n" for i in range(10)),
]


def _honest(x):
    """The honest forward: the softmax plus about 2 ms of real compute (two 64-row Gram
    matrices, more on a slower CPU) whose result enters the output, so that a replay of the
    forward keeps it (a sleep would not survive one)."""
    xf = x.float()
    work = (xf.T @ xf).mean() + (xf.T @ xf.flip(0)).mean()
    return (torch.softmax(xf, dim=-1) + 0 * work).to(x.dtype)


class ModelNew(nn.Module):
    def forward(self, x):
        for line in FAKE:
            print(line, flush=True)
            print(line, file=sys.stderr, flush=True)
        return _honest(x)
