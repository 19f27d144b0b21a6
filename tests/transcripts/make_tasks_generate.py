"""Writes tasks_generate.json: the replayed replies of `evolve tasks generate --model M --n 6`.

    python tests/transcripts/make_tasks_generate.py      # rewrite the transcript

Six task_generator replies, in the order the modes come (mutate, compose, constrain, ...):
three fit tasks (a temperature-scaled softmax, a residual add + LayerNorm, a GELU-gated
half-split), a verbatim copy of the built-in softmax task (a duplicate), a reference whose
output is the same value everywhere (constant), and metadata that is not JSON (a trailing
comma and single quotes). Expected: kept 3, rejected 3, each with its reason.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOFTMAX = HERE.parents[1] / "problems" / "softmax"


def reply(meta: dict | str, reference: str, words: str = "Here is the task.") -> str:
    text = meta if isinstance(meta, str) else json.dumps(meta, indent=1)
    return f"{words}\n\n```json\n{text}\n```\n\n```python\n{reference}```\n"


SCALED_SOFTMAX = '''\
"""Temperature-scaled softmax over LM-head logits, as in sampling."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, temperature: float = 0.7):
        super().__init__()
        self.inv_t = 1.0 / temperature

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.softmax(logits.float() * self.inv_t, dim=-1).to(logits.dtype)


def get_inputs(rows: int = 256, vocab: int = 128256, dtype: str = "bfloat16"):
    return [torch.randn(rows, vocab, dtype=getattr(torch, dtype))]


def get_init_inputs(temperature: float = 0.7):
    return [temperature]
'''

ADD_LAYERNORM = '''\
"""Residual add then LayerNorm, in fp32, rounded once (a transformer block's pre-norm)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, hidden: int = 4096, eps: float = 1e-5):
        super().__init__()
        self.hidden, self.eps = hidden, eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        h = x.float() + residual.float()
        return F.layer_norm(h, (self.hidden,), self.weight, self.bias, self.eps).to(x.dtype)


def get_inputs(tokens: int = 8192, hidden: int = 4096, dtype: str = "bfloat16"):
    dt = getattr(torch, dtype)
    return [torch.randn(tokens, hidden, dtype=dt), torch.randn(tokens, hidden, dtype=dt)]


def get_init_inputs(hidden: int = 4096, eps: float = 1e-5):
    return [hidden, eps]
'''

GELU_GATE = '''\
"""GELU (tanh) gate over the two halves of a fused up-projection: memory-bound, one read of
2 x ffn columns and one write of ffn per token."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return (F.gelu(a.float(), approximate="tanh") * b.float()).to(x.dtype)


def get_inputs(tokens: int = 4096, ffn: int = 14336, dtype: str = "bfloat16"):
    return [torch.randn(tokens, 2 * ffn, dtype=getattr(torch, dtype))]


def get_init_inputs():
    return []
'''

ROW_SUM = '''\
"""Row sums of the softmax (a normaliser check)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x.float(), dim=-1).sum(dim=-1).round()


def get_inputs(rows: int = 4096, cols: int = 4096):
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''


def softmax_copy() -> tuple[dict, str]:
    """The built-in softmax task, verbatim, under another name."""
    spec = tomllib.loads((SOFTMAX / "task.toml").read_text())
    cases = [{k: v for k, v in c.items() if k != "roofline"} for c in spec["cases"]]
    meta = {"name": "row_softmax", "description": "Row softmax over the last dimension",
            "family": "reduction", "cases": cases, "tolerance": spec["tolerance"]}  # fmt: skip
    return meta, (SOFTMAX / "reference.py").read_text()


def steps() -> list[dict[str, str]]:
    dup_meta, dup_ref = softmax_copy()
    replies = [
        reply({"name": "scaled_softmax", "family": "reduction",
               "description": "Softmax of logits divided by a sampling temperature",
               "cases": [{"name": "small", "init": {"temperature": 0.7},
                          "inputs": {"rows": 16, "vocab": 2048, "dtype": "float32"},
                          "dtypes": ["float32"], "small": True, "timed": False},
                         {"name": "llama3_vocab", "init": {"temperature": 0.7},
                          "inputs": {"rows": 256, "vocab": 128256, "dtype": "bfloat16"},
                          "dtypes": ["bfloat16"]}],
               "tolerance": {"kind": "allclose", "atol": 1e-5, "rtol": 1e-2},
               "notes": "sampling kernels fuse the temperature into the softmax"},
              SCALED_SOFTMAX),
        reply({"name": "add_layernorm", "family": "fusion",
               "description": "Residual add followed by LayerNorm with weight and bias",
               "cases": [{"name": "small", "init": {"hidden": 256},
                          "inputs": {"tokens": 32, "hidden": 256, "dtype": "float32"},
                          "small": True, "timed": False},
                         {"name": "llama_8k", "init": {"hidden": 4096},
                          "inputs": {"tokens": 8192, "hidden": 4096, "dtype": "bfloat16"},
                          "dtypes": ["bfloat16"]}],
               "tolerance": {"kind": "allclose", "atol": 2e-2, "rtol": 2e-2}},
              ADD_LAYERNORM),
        reply(dup_meta, dup_ref, "A row softmax, a classic memory-bound reduction."),
        reply({"name": "softmax_row_sum", "family": "reduction",
               "description": "Row sums of the softmax, rounded",
               "cases": [{"name": "small", "inputs": {"rows": 8, "cols": 64}, "small": True,
                          "timed": False},
                         {"name": "big", "inputs": {"rows": 4096, "cols": 4096}}],
               "tolerance": {"kind": "allclose", "atol": 1e-5, "rtol": 1e-5}},
              ROW_SUM),
        reply("{'name': 'rmsnorm_silu', 'family': 'fusion', 'cases': [],}",
              ROW_SUM.replace("Row sums of the softmax", "RMSNorm then SiLU"),
              "RMSNorm fused with SiLU."),
        reply({"name": "gelu_gate_split", "family": "elementwise",
               "description": "tanh-GELU of one half of each row times the other half",
               "cases": [{"name": "small", "inputs": {"tokens": 8, "ffn": 128,
                                                       "dtype": "float32"},
                          "small": True, "timed": False},
                         {"name": "llama_ffn", "inputs": {"tokens": 4096, "ffn": 14336,
                                                          "dtype": "bfloat16"}}],
               "tolerance": {"kind": "allclose", "atol": 1e-2, "rtol": 1e-2}},
              GELU_GATE),
    ]  # fmt: skip
    return [{"role": "task_generator", "reply": r} for r in replies]


if __name__ == "__main__":
    (HERE / "tasks_generate.json").write_text(json.dumps(steps(), indent=1) + "\n")
