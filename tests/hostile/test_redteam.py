"""Attacks of the red team rounds that scored `ok` before their fix (issue 32: a helper that read
only README, DESIGN and the candidate contract wrote them; the rest of each round stays outside
the project, a fair exam). Each goes through the whole pipeline, as `evolve verify` scores it:
the screen, the build stage and the judge, under the pipeline's job settings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hipevolve.core.candidate import load_candidate
from hipevolve.core.config import load_settings
from hipevolve.core.evaluation import Status
from hipevolve.problems import get_task
from hipevolve.verifier.pipeline import evaluate

HERE = Path(__file__).parent
EXAMPLE_MODEL = HERE.parents[1] / "prompts" / "examples" / "softmax_native" / "model.py"


def softmax_candidate(name: str, folder: Path) -> Path:
    """The attack `name`: a .py file as it is, or a kernel (name.hip) made a native softmax
    candidate with the example's model.py (the attacks launch their kernels as it does)."""
    if name.endswith(".py"):
        return HERE / name
    folder.mkdir()
    shutil.copy(HERE / f"{name}.hip", folder / "kernel.hip")
    shutil.copy(EXAMPLE_MODEL, folder / "model.py")
    return folder


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["rt8_kb_aten_cpp", "rt8_kb_ops_strings"])
def test_gpu_kernelbench_pytorch_compute_hidden_from_the_screen_is_hacked(name: str) -> None:
    evaluation = evaluate(load_candidate(HERE / f"{name}.py"), get_task("softmax"),
                          load_settings({}).verifier, "cuda")  # fmt: skip
    assert evaluation.status is Status.hacked, (evaluation.status, evaluation.message)
    assert "with PyTorch" in evaluation.message, evaluation.message


@pytest.mark.gpu
def test_gpu_kernelbench_aten_kernel_called_beside_the_dispatcher_is_hacked() -> None:
    # red team round 9: at::cuda::_softmax_out under an asm label scored `ok` (2.91x) on an H200
    # once the round's other fixes were in; the build stage's library check refuses its import
    evaluation = evaluate(load_candidate(HERE / "rt9_kb_cuda_dispatch_bypass.py"),
                          get_task("softmax"), load_settings({}).verifier, "cuda")  # fmt: skip
    assert evaluation.status is Status.hacked, (evaluation.status, evaluation.message)
    assert "at::cuda::_softmax_out" in evaluation.message, evaluation.message


@pytest.mark.gpu
def test_gpu_a_sum_over_part_of_each_row_is_incorrect(tmp_path: Path) -> None:
    # red team round 9: on i.i.d. normal rows 151,936 wide, the sum over 15/16 of each row passed
    # rtol 1e-2 (ok); the task's check inputs now carry a peak per row (test_softmax_check_inputs)
    candidate = softmax_candidate("rt9_partial_reduction", tmp_path / "c")
    evaluation = evaluate(load_candidate(candidate), get_task("softmax"),
                          load_settings({}).verifier, "cuda")  # fmt: skip
    assert evaluation.status is Status.incorrect, (evaluation.status, evaluation.message)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "name", ["rt9_ptr_content_cache", "rt9_side_stream", "rt9_kb_pyrun_timer.py"]
)
def test_gpu_a_cheat_on_a_deliberately_slow_kernel_never_wins(name: str, tmp_path: Path) -> None:
    # red team round 9: each computes softmax correctly but slowly (one pass repeated 8-64
    # times, about 0.3-0.5x the reference honestly), and cheats the timer (a device-memory cache
    # keyed by output address and input samples; the slow quarter on the per-thread default
    # stream; the extension's C++ running Python in the executor to scale Event.elapsed_time).
    # They scored `ok` on an H100 (the runner read no speedup, so whether the cheat won was not
    # seen): a fitness above 1 can only be a cheat that worked.
    candidate = softmax_candidate(name, tmp_path / "c")
    evaluation = evaluate(load_candidate(candidate), get_task("softmax"),
                          load_settings({}).verifier, "cuda")  # fmt: skip
    assert evaluation.status is not Status.ok or evaluation.fitness <= 1.0, (
        evaluation.status, evaluation.fitness, [c.speedup for c in evaluation.cases])


@pytest.mark.parametrize("name", ["rt9_partial_reduction", "rt9_ptr_content_cache", "rt9_side_stream"])
def test_each_kernel_only_attack_becomes_a_native_candidate(name: str, tmp_path: Path) -> None:
    candidate = load_candidate(softmax_candidate(name, tmp_path / "c"))
    assert candidate.format == "native" and "softmax_bf16" in candidate.hip_source
