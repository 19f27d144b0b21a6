"""KernelBench plans on a GPU (issue 32, class 1): a KernelBench candidate whose load_inline CUDA
extension was prebuilt is recorded in a recorder process on the device (the extension's C++
reads data_ptr: it cannot run on stand-ins without data) and replayed by the executor, extension
calls included; an attack on the timer through a KernelBench file leaves the honest time.

Run on a GPU machine: python -m pytest -q -m gpu tests/test_kb_plan_gpu.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hipevolve.core.candidate import load_candidate
from hipevolve.core.config import load_settings
from hipevolve.core.evaluation import Status
from hipevolve.problems import get_task
from hipevolve.verifier.pipeline import evaluate

TESTS = Path(__file__).resolve().parent
HEALTHY_SOFTMAX = TESTS / "data" / "candidates" / "healthy_kb_softmax.py"
EXTENSION_FLAG = "its extension's C++ runs beside the checks and the timer"

pytestmark = pytest.mark.gpu


def _settings(tmp_path: Path):  # noqa: ANN202
    return load_settings({"verifier": {"cache_dir": str(tmp_path / "cache")}})


def test_gpu_kb_candidate_with_a_cuda_extension_is_recorded_and_replayed(tmp_path: Path) -> None:
    from hipevolve.verifier.build.backends import resolve_backend

    settings = _settings(tmp_path)
    spec = get_task("softmax", settings.tasks.dirs)
    evaluation = evaluate(load_candidate(HEALTHY_SOFTMAX), spec, settings.verifier,
                          resolve_backend("auto"))  # fmt: skip
    assert evaluation.status is Status.ok, (evaluation.message, evaluation.compile_log)
    assert any(EXTENSION_FLAG in f for f in evaluation.flags), evaluation.flags
    assert "processes:denied" in evaluation.flags
    assert all(c.speedup and c.speedup > 0 for c in evaluation.cases if c.time_us)


def test_gpu_kb_attack_on_the_timer_leaves_the_honest_time() -> None:
    sys.path.insert(0, str(TESTS / "hostile"))
    from test_hostile import evaluate as evaluate_attack

    result = evaluate_attack("corpus_pgb_clock_forge", device="cuda")
    assert result.status in (Status.ok, Status.hacked), result.message
    if result.status is Status.ok:
        assert any("plan:kb-executor" in f for f in result.flags), result.flags
        # The forged clock reads 2 us a trial; two 64 x 1024 Gram matrices and a softmax,
        # replayed, take longer than that on any GPU (launches alone: several us).
        assert min(result.cases[0].trials) > 4.0, result.cases[0].trials
