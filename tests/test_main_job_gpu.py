"""The main job as a user runs it, on a GPU (issue 47): `evolve --task T --budget 12` from start to
a crowned kernel, every unit of the budget spent on an evaluation. Run these whenever the
verifier, a task file or the search changes: the flagship once stopped after one evaluation
because a seed met an old bound, and no test ran it on a GPU."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUDGET = 12


def main_job(task: str, tmp_path: Path) -> tuple[str, float]:
    """(stdout, seconds) of `evolve --task TASK --budget 12` in a fresh folder."""
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "hipevolve", "--task", task, "--budget", str(BUDGET),
         "--archive", str(tmp_path / "run.db")],
        capture_output=True, text=True, timeout=580, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout, time.monotonic() - started


def assert_crowned_after_the_whole_budget(stdout: str, task: str, tmp_path: Path) -> None:
    spent = re.search(rf"(\d+) of {BUDGET} evaluations", stdout)
    assert spent and int(spent[1]) == BUDGET, stdout[-3000:]
    best = re.search(r"^best: candidate \d+, (\d+\.\d+)x geometric-mean speedup", stdout, re.M)
    assert best and float(best[1]) > 0, stdout[-3000:]
    assert (tmp_path / "hipevolve_best" / "run" / f"{task}-run1" / "kernel.hip").is_file()


@pytest.mark.gpu
def test_the_flagship_main_job_spends_its_budget_and_crowns_a_kernel(tmp_path: Path) -> None:
    stdout, seconds = main_job("gated_delta_net", tmp_path)
    print(f"gated_delta_net, budget {BUDGET}: {seconds:.0f} s\n{stdout[-2000:]}")
    assert_crowned_after_the_whole_budget(stdout, "gated_delta_net", tmp_path)


@pytest.mark.gpu
def test_the_softmax_main_job_spends_its_budget_and_crowns_a_kernel(tmp_path: Path) -> None:
    stdout, seconds = main_job("softmax", tmp_path)
    print(f"softmax, budget {BUDGET}: {seconds:.0f} s\n{stdout[-2000:]}")
    assert_crowned_after_the_whole_budget(stdout, "softmax", tmp_path)
