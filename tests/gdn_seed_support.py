"""What the GDN seed tests share (tests/test_gdn_seeds.py on the CPU, tests/test_gdn_seeds_gpu.py
on a GPU): the two tasks and their seeds, the references, and the seed sources' tunables."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import torch

from hipevolve.core.reference import load_module
from hipevolve.problems import get_task

PREFILL = get_task("gated_delta_net")
DECODE = get_task("gated_delta_net_decode")
PREFILL_SEED = PREFILL.reference.parent / "seeds" / "chunked"
DECODE_SEED = DECODE.reference.parent / "seeds" / "recurrent"
SEEDS = {"prefill": (PREFILL, PREFILL_SEED), "decode": (DECODE, DECODE_SEED)}
GDN = load_module(PREFILL.reference)
GDN_DECODE = load_module(DECODE.reference)

CHUNK = 64
SOLVE_BLOCK = 16  # rows per diagonal block of the kernel's triangular solve (SB)
_TUNABLE = re.compile(r"^//\s*@tunable\s+(\w+)\s*:\s*(.+)$", re.M)


def rel_rms(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


def tunables(source: str) -> dict[str, list[int]]:
    """NAME -> allowed values, from `// @tunable NAME: v1, v2, ...` lines."""
    return {m[1]: [int(x) for x in m[2].split(",")] for m in _TUNABLE.finditer(source)}


def with_define(source: str, name: str, value: int) -> str:
    out, count = re.subn(rf"^#define {name} .*$", f"#define {name} {value}", source, flags=re.M)
    assert count == 1, f"no single #define {name}"
    return out


def source_of(seed: Path) -> str:
    return (seed / "kernel.hip").read_text()


def import_model(seed: Path, tag: str = "") -> ModuleType:
    """The seed's model.py under a private module name (it imports hipevolve.runtime only)."""
    name = f"gdn_seed_{seed.name}_{tag}"
    spec = importlib.util.spec_from_file_location(name, seed / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
