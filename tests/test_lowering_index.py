"""Broadcast indexing in the lowered pointwise and row kernels (agents/lowering: ir.py,
pointwise.py, rowreduce.py).

Without a GPU:
- the pointwise vector loop finds a pack's row and column with one division per pack, reads a
  per-column input as one Pack and a per-row input once per pack, and keeps the plain
  `n % VEC` condition (no division) when nothing is read by row or column;
- the row kernel reads per-column inputs as Packs and computes per-row values once per row;
- index_div (32-bit division when the sizes fit) equals the 64-bit division on both paths;
- the new broadcast kernels compile with nvcc through the HIP layer and for gfx942 unspilled;
- on CPU threads (the HIP shim of test_tunable_seeds), kernels with every broadcast kind
  (full, per-column, per-row, suffix [H, C] of [B, H, C], scalar) match the reference on shapes
  whose rows are whole packs (vector path) and shapes whose rows are not (cols % VEC != 0:
  the scalar path), at several VEC, UNROLL, ROWS and warp widths.
With a GPU (marked): those tasks are `ok` through the verifier pipeline.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_lowering import (
    assert_matches_reference,
    lowered,
    model_on_cpu_threads,
    task_named,
)

from hipevolve.agents.lowering.emit import DEVICE_HELPERS
from hipevolve.agents.lowering.lower import lower
from hipevolve.core.taskspec import TaskSpec
from hipevolve.problems import load_task_folder

# [B, H, C] with a suffix-shaped [H, C] parameter (INNER), a per-row gate [B, H, 1] (ROW) and
# a per-column bias [C] (COL); cases of whole-pack rows (64) and of rows no VEC > 1 divides.
_POINTWISE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, heads: int = 3, features: int = 64):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(heads, features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x, gate):
        return torch.sigmoid(x + self.pos) * gate + self.bias * 0.5


def get_inputs(batch: int = 2, heads: int = 3, features: int = 64):
    return [torch.randn(batch, heads, features), torch.randn(batch, heads, 1)]


def get_init_inputs(heads: int = 3, features: int = 64):
    return [heads, features]
"""
# The same broadcasts around two dependent row reductions, with a per-row output.
_ROWS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, heads: int = 3, features: int = 64):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(heads, features))
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x, gate):
        y = x + self.pos
        y = y - y.mean(dim=-1, keepdim=True)
        var = (y * y).mean(dim=-1, keepdim=True)
        return y * torch.rsqrt(var + 1e-5) * gate + self.bias, var * gate


def get_inputs(batch: int = 2, heads: int = 3, features: int = 64):
    return [torch.randn(batch, heads, features), torch.randn(batch, heads, 1)]


def get_init_inputs(heads: int = 3, features: int = 64):
    return [heads, features]
"""
_TOML = """name = "{name}"
description = "broadcast indexing: full, suffix, per-row, per-column inputs (lowering test)"
family = "fusion"

[tolerance]
kind = "kernelbench"

[[cases]]
name = "whole_packs"
init = {{ heads = 3, features = 64 }}
inputs = {{ batch = 5, heads = 3, features = 64 }}
small = true

[[cases]]
name = "odd_rows"
init = {{ heads = 3, features = 37 }}
inputs = {{ batch = 4, heads = 3, features = 37 }}
small = true
"""
SOURCES = {"bcast_pointwise": _POINTWISE, "bcast_rows": _ROWS}


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> dict[str, TaskSpec]:
    root = tmp_path_factory.mktemp("tasks")
    found = {}
    for name, source in SOURCES.items():
        folder = root / name
        folder.mkdir()
        (folder / "reference.py").write_text(source)
        (folder / "task.toml").write_text(_TOML.format(name=name))
        found[name] = load_task_folder(folder, "user")
    return found


def kernel_text(source: str) -> str:
    """The __global__ kernel bodies of a lowered source (not the launchers)."""
    return "\n".join(re.findall(r"__global__.*?\n}\n", source, flags=re.S))


def element_loops(source: str) -> list[str]:
    """The bodies of the vector loops over a pack's VEC elements."""
    return re.findall(r"for \(int k = 0; k < VEC; \+\+k\) \{\n(.*?)\n\s*\}\n", source, re.S)


# ----------------------------------------------------------------------------- emitted code


def test_pointwise_vector_loop_divides_once_per_pack_and_reads_broadcasts_per_pack():
    source = lowered("l2_scale_tanh_clamp").hip_source
    kernel = kernel_text(source)
    [loop] = element_loops(kernel)
    # in0 is gamma [C] (float32), in2 the per-row shift [R, 1]: no division inside the loop
    assert "cols" not in loop and "/" not in loop.replace("1.0f /", "")
    assert "pk_in0_col.v[k]" in loop and "in2[" not in loop
    head = kernel[: kernel.index("for (int k = 0")]
    assert "index_div(i0, cols, narrow)" in head
    assert "reinterpret_cast<const Pack<float>*>(in0)[c0 / VEC]" in head
    assert "bf16_to_float(in2[r])" in head  # read once per pack
    assert "(vec_ok && cols % VEC == 0)" in kernel  # a pack never crosses a row
    assert " / cols" not in kernel and " % cols" not in kernel  # the scalar loop too


def test_pointwise_kernel_without_row_or_column_reads_needs_no_division():
    kernel = kernel_text(lowered("gelu").hip_source)
    assert "index_div" not in kernel and "cols % VEC" not in kernel
    assert "(vec_ok && n % VEC == 0)" in kernel


def test_suffix_input_is_read_as_a_pack_in_both_kernel_kinds(tasks):
    for name in SOURCES:
        kernel = kernel_text(lower(tasks[name]).hip_source)
        loops = element_loops(kernel)
        assert loops and all("%" not in loop for loop in loops), name
        # the [H, C] parameter: one Pack from its row r % H (H a runtime size, from x.shape[1])
        assert re.search(r"Pack<float>\*>\(in\d+ \+ r % inner0_rows \* cols\)", kernel), name


def test_row_kernel_reads_column_inputs_as_packs_and_row_values_once():
    kernel = kernel_text(lowered("layernorm").hip_source)
    assert kernel.count("rsqrtf(") == 1  # once per row, not per element in each loop
    assert "reinterpret_cast<const Pack<uint16_t>*>(in0)[cv]" in kernel  # weight [C]
    assert not any("in0[" in loop or "in1[" in loop for loop in element_loops(kernel))


def test_index_div_matches_64_bit_division_on_both_paths(tmp_path):
    """The helper as the kernels get it, built for the CPU shim's device qualifiers."""
    from test_tunable_seeds import CPU_HIP_RUNTIME

    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    (tmp_path / "hip").mkdir()
    (tmp_path / "hip" / "hip_runtime.h").write_text(CPU_HIP_RUNTIME)
    pairs = [(0, 1), (6179, 1030), (2**31 - 1, 1030), (2**31 - 1, 2**31 - 1), (2**31 - 2, 7),
             (2**40 + 12345, 8192), (2**62, 3), (2**33, 2**32 + 1)]  # fmt: skip
    narrow = [(a, b) for a, b in pairs if a < 2**31 and b < 2**31]
    checks = [f"    ok &= index_div({a}LL, {b}LL, false) == {a // b}LL;" for a, b in pairs]
    checks += [f"    ok &= index_div({a}LL, {b}LL, true) == {a // b}LL;" for a, b in narrow]
    program = "\n".join(["#include <hip/hip_runtime.h>", "#include <cstdio>", DEVICE_HELPERS,
                         "int main() {", "    bool ok = true;", *checks,
                         '    std::puts(ok ? "ok" : "wrong");', "    return ok ? 0 : 1;", "}"])  # fmt: skip
    (tmp_path / "t.cpp").write_text(program)
    argv = [gxx, "-std=c++20", "-O1", "-pthread", "-DCPU_WARP=64", f"-I{tmp_path}", "t.cpp"]
    built = subprocess.run(argv + ["-o", "t"], cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    done = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok"


def test_broadcast_kernels_compile_with_nvcc_and_for_gfx942_without_spills(tasks, tmp_path):
    from test_tunable_seeds import assert_all_compile, assert_gfx942_clean, nvcc_compiler

    sources = {name: lower(task).hip_source for name, task in tasks.items()}
    assert_all_compile(sources, nvcc_compiler(), tmp_path / "nvcc")
    assert_gfx942_clean(sources, tmp_path / "amd")


# ----------------------------------------------------------------------------- CPU threads


def run_on_cpu_threads(task: TaskSpec, config: dict, warp: int, folder: Path, monkeypatch):
    """Every small case through model.py over the kernel built for CPU threads (test_lowering's
    CPU test runs only the first small case)."""
    module = model_on_cpu_threads(lower(task), config, warp, folder, monkeypatch)
    for case in task.small_cases:
        assert_matches_reference(task, module, case, 0)


# (task, configuration, warp): VEC 2 and 8 take the vector path where rows are whole packs and
# the scalar path elsewhere; l2_scale_tanh_clamp's 1030 columns are whole packs at VEC 2 only.
CPU_RUNS = [
    ("bcast_pointwise", {"VEC": "8", "BLOCK": "64"}, 64),
    ("bcast_pointwise", {"VEC": "2", "UNROLL": "2", "BLOCK": "64"}, 32),
    ("bcast_rows", {"VEC": "4", "BLOCK": "64", "ROWS": "2"}, 32),
    ("bcast_rows", {"VEC": "8", "BLOCK": "64"}, 64),
    ("l2_scale_tanh_clamp", {"VEC": "2"}, 64),
    ("l2_scale_tanh_clamp", {"VEC": "4", "BLOCK": "128"}, 64),
]  # fmt: skip


@pytest.mark.parametrize("name,config,warp", CPU_RUNS,
                         ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(CPU_RUNS)])  # fmt: skip
def test_broadcast_kernels_match_the_reference_on_cpu_threads(name, config, warp, tasks,
                                                              tmp_path, monkeypatch):  # fmt: skip
    task = tasks[name] if name in tasks else task_named(name)
    run_on_cpu_threads(task, config, warp, tmp_path, monkeypatch)


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_broadcast_task_is_ok_through_the_verifier_pipeline(name, tasks, tmp_path):
    from hipevolve.core.config import VerifierSettings
    from hipevolve.verifier.build.backends import gpu_backend
    from hipevolve.verifier.pipeline import evaluate_many

    settings = VerifierSettings(cache_dir=tmp_path, trials=10)
    [evaluation] = evaluate_many([lower(tasks[name])], tasks[name], settings, gpu_backend())
    assert evaluation.ok, (evaluation.status, evaluation.message, evaluation.mismatch,
                           evaluation.compile_log)  # fmt: skip
