"""The judge's wide case (verifier/gpu/judge/wide_case.py): a pointwise reference is also checked on
inputs whose elements are scaled by 1/16 to 16, so a kernel right only within torch.randn's
range (ReLU6 for ReLU, red team round 10) is incorrect; references that combine elements keep
their cases."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from hipevolve.core import reference
from hipevolve.core.config import load_settings
from hipevolve.core.evaluation import Status
from hipevolve.problems import get_task
from hipevolve.verifier.gpu.job import CandidateJob, WorkerJob
from hipevolve.verifier.gpu.judge.wide_case import SPREAD, SUFFIX, with_wide_case
from hipevolve.verifier.isolate import job_for_task, run_worker

DATA = Path(__file__).parent / "data"
RELU6 = DATA / "candidates" / "kb_relu6_as_relu.py"
SETTINGS = load_settings({"tasks": {"dirs": [str(DATA / "kernelbench" / "level_test")]}})


def _job(task_name: str, candidate: Path | None = None, **fields) -> WorkerJob:
    task = get_task(task_name, SETTINGS.tasks.dirs)
    cand = CandidateJob(format="kernelbench", model=candidate) if candidate else None
    return job_for_task(task, cand, SETTINGS.verifier, device="cpu", **fields)


def _reference(folder: Path, body: str) -> WorkerJob:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "reference.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        f"    def forward(self, x):\n        return {body}\n\n\n"
        "def get_inputs():\n    return [torch.randn(64, 256)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    return dataclasses.replace(_job("19_ReLU", RELU6), reference=path)


def test_a_pointwise_reference_gets_an_untimed_case_of_wide_magnitudes():
    job = _job("19_ReLU", RELU6)
    widened = with_wide_case(job)
    assert widened.cases[: len(job.cases)] == job.cases  # the task's own cases first, unchanged
    wide = widened.cases[-1]
    assert wide.name == job.cases[0].name + SUFFIX and not wide.timed
    module = reference.load_module(job.reference)
    plain = reference.build_inputs(module, job.cases[0].inputs, "cpu", 7)[0]
    spread = reference.build_inputs(module, wide.inputs, "cpu", 7)[0]
    assert plain.abs().max() < 6 < spread.abs().max() <= plain.abs().max() * SPREAD
    assert torch.equal(torch.sign(spread), torch.sign(plain))  # scaled, never flipped
    assert torch.equal(spread, reference.build_inputs(module, wide.inputs, "cpu", 7)[0])


def test_references_that_combine_elements_keep_their_cases():
    for name in ("1_Square_matmul", "softmax"):
        job = _job(name, RELU6)
        assert with_wide_case(job).cases == job.cases, name


def test_a_reference_not_finite_on_wide_inputs_keeps_its_cases(tmp_path):
    finite = _reference(tmp_path / "a", "torch.exp(x) * 0.5")  # exp(80) is finite in float32
    assert with_wide_case(finite).cases[-1].name.endswith(SUFFIX)
    overflows = _reference(tmp_path / "b", "torch.exp(x * 4.0)")  # exp(320) is not
    assert with_wide_case(overflows).cases == overflows.cases


def test_relu6_offered_for_relu_is_incorrect_on_the_wide_case():
    result = run_worker(_job("19_ReLU", RELU6,
                             do_timing=False))  # fmt: skip
    assert result.status is Status.incorrect, result.message
    assert SUFFIX in result.message and "wide magnitudes" in result.message


def test_an_honest_relu_passes_the_wide_case_too():
    result = run_worker(_job("19_ReLU", DATA / "candidates" / "kb_relu_torch.py", do_timing=False))
    assert result.status is Status.ok, result.message
    assert [c.case for c in result.cases][-1].endswith(SUFFIX)
