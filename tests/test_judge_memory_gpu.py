"""GPU-sized tasks on a real device (issue 35): a synthetic elementwise task (ReLU) judged under
the memory plan (verifier/gpu/memplan.py). KernelBench's 19_ReLU (an input of 4096 x 393216
float32, 6 GiB) ran out of memory on a 139.8 GiB H200 under the old plan; here it scores ok
under a lean plan, as does one sized from the device's free memory at test time (a quarter of
it, or less where the host cannot hold the lean plan's references: memplan.lean_host), and one
that cannot fit is refused in one line before anything is allocated.

Run: .venv/bin/python -m pytest -q -m gpu tests/test_judge_memory_gpu.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hipevolve.core.evaluation import Status
from hipevolve.verifier.gpu import memplan
from hipevolve.verifier.gpu.job import CandidateJob, CaseJob, Timeouts, WorkerJob
from hipevolve.verifier.gpu.judge.reference_side import host_available
from hipevolve.verifier.isolate import run_worker

pytestmark = pytest.mark.gpu

REFERENCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs(rows=16, cols=1024):
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
"""
CANDIDATE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""
SEEDS = (0, 1, 2)
COLS = 393216  # KernelBench 19_ReLU's row length


def device_free() -> int:
    """Free device memory, measured in a process of its own (this one holds no context)."""
    code = "import torch; print(torch.cuda.mem_get_info()[0])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    return int(done.stdout.split()[-1])


def relu_job(tmp_path: Path, rows: int) -> WorkerJob:
    (tmp_path / "reference.py").write_text(REFERENCE)
    (tmp_path / "model.py").write_text(CANDIDATE)
    return WorkerJob(
        task="relu_gpu_sized",
        reference=tmp_path / "reference.py",
        cases=(CaseJob(name="big", inputs={"rows": rows, "cols": COLS}),),
        tolerance={"kind": "allclose", "atol": 1e-5, "rtol": 1e-5},
        seeds=SEEDS,
        candidate=CandidateJob(format="kernelbench", model=tmp_path / "model.py"),
        timeouts=Timeouts(startup=120, load=120, check=600, timing=600),
        device="cuda",
        trials=10,
        warmup=2,
    )


def lean_flag(result) -> str:  # noqa: ANN001
    return next((f for f in result.flags if f.startswith("memory:lean")), "")


def test_kernelbench_19_relu_with_its_6_gib_input_scores_ok_under_a_lean_plan(
    tmp_path: Path,
) -> None:
    result = run_worker(relu_job(tmp_path, rows=4096))
    assert result.status is Status.ok, result.message
    assert lean_flag(result), result.flags
    assert result.cases[0].time_us and result.cases[0].ref_time_us


def test_an_elementwise_task_up_to_a_quarter_of_free_device_memory_scores_ok(
    tmp_path: Path,
) -> None:
    quarter = device_free() // 4
    host = host_available()
    shape = memplan.JobShape(seeds=len(SEEDS), calls=12, timing_budget_bytes=1 << 30,
                             flush_bytes=512 << 20)  # fmt: skip
    size = quarter
    while (
        host is not None
        and memplan.lean_host(
            memplan.CaseBytes(name="big", input_bytes=size, output_bytes=size), shape
        )
        > 0.8 * host
    ):
        size = size * 9 // 10  # the host holds the lean plan's references (memplan.lean_host)
    rows = size // (4 * COLS)
    result = run_worker(relu_job(tmp_path, rows=rows))
    assert result.status is Status.ok, f"{rows} rows ({size / 2**30:.1f} GiB): {result.message}"
    assert lean_flag(result), result.flags
    print(f"input {size / 2**30:.1f} GiB, a quarter of free: {quarter / 2**30:.1f} GiB; "
          f"{lean_flag(result)}")  # fmt: skip


def test_a_case_beyond_the_device_is_refused_in_one_line_without_an_oom(tmp_path: Path) -> None:
    rows = device_free() // 2 // (4 * COLS)  # input and output: the whole device
    result = run_worker(relu_job(tmp_path, rows=rows))
    assert result.status is Status.runtime_error
    assert result.message.startswith("case big needs about ")
    assert "of device memory at least; this GPU has " in result.message
    assert "OutOfMemoryError" not in result.message and "\n" not in result.message
