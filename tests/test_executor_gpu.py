"""The trusted executor end to end on a GPU: native seeds are recorded as launch plans and run
with no candidate Python in the process that is checked and timed (flag plan:executor)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _verify(folder: str, task: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "hipevolve", "verify", str(ROOT / folder), "--task", task, "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("folder", "task"),
    [
        ("problems/softmax/seeds/tunable", "softmax"),
        ("problems/gated_delta_net/seeds/chunked", "gated_delta_net"),
    ],
)
def test_a_healthy_native_seed_runs_as_a_plan_and_scores_ok(folder: str, task: str) -> None:
    result = _verify(folder, task)
    assert result["status"] == "ok", result.get("message")
    assert "plan:executor" in json.dumps(result)
