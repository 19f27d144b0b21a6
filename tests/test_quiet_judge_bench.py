"""bench/quiet_judge.py without a GPU: the reference it judges on the CPU, the cases it picks,
its compile load (real compiles, at the policy's niceness), and one real judged evaluation.
The GPU run (idle against loaded, quiet judge on and off) is the bench itself."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hipevolve.core import cpu_share
from hipevolve.core.config import VerifierSettings
from hipevolve.core.cpu_share import CpuPolicy
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import Status
from hipevolve.problems import get_task
from hipevolve.verifier.build.compile import Compiler

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import quiet_judge  # noqa: E402  (bench/ is a folder of scripts, not a package)


@pytest.fixture(autouse=True)
def default_plan():
    yield
    cpu_share.install(CpuPolicy())
    cpu_share.claim(0)


def test_the_reference_becomes_a_candidate_without_its_input_builders():
    candidate = quiet_judge.reference_as_candidate(get_task("gated_delta_net"))
    namespace: dict = {}
    exec(compile(candidate.python_source, "candidate", "exec"), namespace)  # noqa: S102
    assert "ModelNew" in namespace and "Model" not in namespace
    assert "get_inputs" not in namespace and "get_init_inputs" not in namespace


def test_cpu_mode_times_the_small_cases_and_gpu_mode_the_issues_case():
    task = get_task("gated_delta_net")
    on_cpu = quiet_judge.cases_of(task, (), cpu=True)
    assert on_cpu and all(c.small and c.timed for c in on_cpu)
    assert [c.name for c in quiet_judge.cases_of(task, (), cpu=False)] == ["qwen_tp1_short"]


def test_an_unknown_case_is_refused_in_one_line_naming_the_known_ones():
    with pytest.raises(UserError) as refused:
        quiet_judge.cases_of(get_task("softmax"), ("nope",), cpu=False)
    assert "lm_head_vocab" in refused.value.line() and "\n" not in refused.value.line()


def test_the_load_keeps_real_compiles_running_until_it_stops(tmp_path):
    gxx = ("g++", "-x", "c++", "-shared", "-fPIC", "-O0", "kernel.hip", "-o", "lib.so")
    compiler = Compiler(name="test", argv=gxx, toolchain="g++ (test)", lists_dependencies=False)
    load = quiet_judge.CompileLoad('extern "C" int f() { return 1; }', compiler, tmp_path, jobs=2)
    with load as running:
        assert running.started >= 2
    assert load.done >= 2 and not load.failed
    with load as again:  # a second phase starts afresh
        assert again.started >= 2
    assert not (tmp_path / "lib").exists()  # its libraries are not kept


def test_one_judged_evaluation_on_the_cpu_times_the_reference_and_the_candidate(tmp_path):
    task = get_task("softmax")
    cases = quiet_judge.cases_of(task, (), cpu=True)
    settings = VerifierSettings(cache_dir=tmp_path, trials=5, warmup=1)
    prepared = quiet_judge.prepared_for(task, settings, "cpu")
    evaluation = quiet_judge.judged(prepared, task, cases, settings, "cpu")
    assert evaluation.status is Status.ok, evaluation.message
    assert all(c.time_us and c.ref_time_us for c in evaluation.cases)
    times = quiet_judge.Times()
    times.add("softmax", "on", "idle", evaluation)
    assert times.ref[("softmax", "small", "on", "idle")] == [evaluation.cases[0].ref_time_us]
