"""Attacks of the red team rounds that scored `ok` before their fix (issue 32: a helper that read
only README, DESIGN and the candidate contract wrote them; the rest of each round stays outside
the project, a fair exam). Each goes through the whole pipeline, as `evolve verify` scores it:
the screen, the build stage and the judge, under the pipeline's job settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipevolve.core.candidate import load_candidate
from hipevolve.core.config import load_settings
from hipevolve.core.evaluation import Status
from hipevolve.problems import get_task
from hipevolve.verifier.pipeline import evaluate

HERE = Path(__file__).parent


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["rt8_kb_aten_cpp", "rt8_kb_ops_strings"])
def test_gpu_kernelbench_pytorch_compute_hidden_from_the_screen_is_hacked(name: str) -> None:
    evaluation = evaluate(load_candidate(HERE / f"{name}.py"), get_task("softmax"),
                          load_settings({}).verifier, "cuda")  # fmt: skip
    assert evaluation.status is Status.hacked, (evaluation.status, evaluation.message)
    assert "with PyTorch" in evaluation.message, evaluation.message
