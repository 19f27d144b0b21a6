"""The recorder started ahead (verifier/gpu/judge/record_ahead.py): forked by the zygote before its
job exists, it records while the judge does other work, and its plan keeps the same limits and
verdicts as a recorder started when the plan was needed. CPU only: recording needs no GPU.

The softmax seed's forward calls no launcher on the host, so any loadable library serves as its
library here: a small C library built with gcc."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from hipevolve.core import reference
from hipevolve.problems import get_task
from hipevolve.verifier.gpu.job import CandidateJob, RecordJob
from hipevolve.verifier.gpu.judge.channel import SandboxError
from hipevolve.verifier.gpu.judge.record_ahead import Recorder
from hipevolve.verifier.gpu.plan import input_specs
from hipevolve.verifier.gpu.sandbox.zygote import Zygote

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "problems/softmax/seeds/tunable"

TORCH_IN_FORWARD = """
import torch.nn as nn
from hipevolve.runtime import kernels

class ModelNew(nn.Module):
    def forward(self, x):
        return x.softmax(-1)
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler for the stand-in library")
    folder = tmp_path_factory.mktemp("lib")
    (folder / "empty.c").write_text("int hipevolve_nothing(void) { return 0; }\n")
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-o", str(folder / "libempty.so"), str(folder / "empty.c")],
        check=True,
    )
    return folder / "libempty.so"


@pytest.fixture(scope="module")
def zygote(tmp_path_factory, library):
    """A zygote that has forked one recorder already: torch imported, FakeTensorMode warm."""
    z = Zygote.start()
    first = Recorder(str(tmp_path_factory.mktemp("warm") / "record"), z)
    first.send(_job(library, SOFTMAX / "model.py"))
    first.plan(limit_s=300.0)
    yield z
    z.close()


def _job(library: Path, model: Path) -> RecordJob:
    task = get_task("softmax")
    case = task.cases[0]
    module = reference.load_module(task.reference)
    inputs = reference.build_inputs(module, case.inputs, "cpu", 0)
    cand = CandidateJob(
        format="native", model=model, library=library, source=SOFTMAX / "kernel.hip"
    )
    cases = {case.name: {"init": case.init, "inputs": input_specs(inputs)}}
    return RecordJob(reference=task.reference, candidate=cand, cases=cases)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except FileNotFoundError:
        return True


def test_a_plan_recorded_while_the_judge_was_busy_is_read_at_once_and_the_recorder_is_gone(
    tmp_path, zygote, library
):
    rec = Recorder(str(tmp_path / "record"), zygote)  # forked before its job exists
    rec.send(_job(library, SOFTMAX / "model.py"))
    time.sleep(2.0)  # the judge times the reference meanwhile
    start = time.perf_counter()
    plan = rec.plan(limit_s=30.0)
    assert time.perf_counter() - start < 0.5  # it was recorded already
    assert rec.seconds_ahead() >= 2.0
    (case,) = plan["cases"].values()
    assert [s["launcher"] for s in case["steps"]] == ["softmax_f32"]
    assert _gone(rec.line.proc.pid)


def test_a_plan_that_came_after_the_limit_is_a_timeout_however_late_it_is_read(
    tmp_path, zygote, library
):
    rec = Recorder(str(tmp_path / "record"), zygote)
    rec.send(_job(library, SOFTMAX / "model.py"))
    time.sleep(1.0)  # recorded by now, but the limit below ended first
    with pytest.raises(SandboxError) as caught:
        rec.plan(limit_s=1e-4)
    assert caught.value.status == "timeout"
    assert _gone(rec.line.proc.pid)


def test_a_forward_that_computes_with_torch_is_hacked_when_recorded_ahead(
    tmp_path, zygote, library
):
    model = tmp_path / "model.py"
    model.write_text(TORCH_IN_FORWARD)
    rec = Recorder(str(tmp_path / "record"), zygote)
    rec.send(_job(library, model))
    with pytest.raises(SandboxError) as caught:
        rec.plan(limit_s=30.0)
    assert caught.value.status == "hacked"
    assert "launch plan refused" in caught.value.message
    assert "softmax" in caught.value.message


def test_a_launcher_rebound_while_model_py_is_imported_is_hacked_not_a_runtime_error(
    tmp_path, zygote, library
):
    model = tmp_path / "model.py"
    model.write_text(
        (SOFTMAX / "model.py").read_text()
        + "\nfrom hipevolve.runtime import kernels\nkernels.softmax_f32 = print\n"
    )
    rec = Recorder(str(tmp_path / "record"), zygote)
    rec.send(_job(library, model))
    with pytest.raises(SandboxError) as caught:
        rec.plan(limit_s=30.0)
    assert caught.value.status == "hacked", caught.value.message
    assert caught.value.message.startswith("launch plan refused: model.py rebinds kernels.")


def test_a_recorder_stopped_unused_leaves_no_process(tmp_path, zygote):
    rec = Recorder(str(tmp_path / "record"), zygote)  # a cached plan: never given its job
    pid = rec.line.proc.pid
    assert not _gone(pid)
    rec.stop()
    assert _gone(pid)
    assert os.path.isdir(tmp_path / "record")


def test_only_a_judge_on_a_gpu_forks_a_spare_recorder(tmp_path, zygote):
    from hipevolve.verifier.gpu.judge.record_ahead import spare

    assert spare(str(tmp_path / "sandbox-0"), "cpu", zygote) is None  # no native job runs there
    rec = spare(str(tmp_path / "sandbox-1"), "cuda", zygote)
    assert rec is not None and os.path.isdir(tmp_path / "sandbox-1-record")
    assert not _gone(rec.line.proc.pid)
    rec.stop()
    assert _gone(rec.line.proc.pid)


@pytest.mark.gpu
def test_a_gpu_judge_waits_only_for_the_record_that_outlasts_the_references_timing(tmp_path):
    """One judge, two jobs of the same native candidate: the first records ahead (its record
    stage is the wait left after the reference's timing, never more than the whole recording),
    the second takes the plan the first recorded."""
    import sys

    from hipevolve.core.evaluation import Status
    from hipevolve.verifier.isolate import StandbyPool, run_worker

    sys.path.insert(0, str(ROOT / "tests" / "hostile"))
    from test_hostile import HEALTHY_NATIVE, gpu_job

    pool = StandbyPool(size=0, device="cuda")  # no spare judges: the second job gets the first's
    try:
        first = run_worker(gpu_job(HEALTHY_NATIVE, tmp_path), pool.take(), pool=pool)
        second = run_worker(gpu_job(HEALTHY_NATIVE, tmp_path), pool.take(), pool=pool)
    finally:
        pool.close()
    assert first.status is Status.ok, first.message
    assert "plan:executor" in first.flags
    assert 0 <= first.seconds["record"] <= first.seconds["record_ahead"]
    assert second.status is Status.ok, second.message
    assert second.judge_pid == first.judge_pid
    assert "plan:executor (cached)" in second.flags
