"""The offline translator on KernelBench files (agents/lowering/, app/translate.py): the lowered
model.py is whole (no leftover `super(Model, self)`, the module constants __init__ reads come
along) and its ModelNew builds on the CPU; lowering never raises (every failure is a one-line
reason); recurrent modules are refused before tracing; `evolve translate` writes the candidate,
prints a verify command that runs as printed, and never replaces files already in --out without
--force."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hipevolve.agents.lowering import lower as lower_module
from hipevolve.agents.lowering.lower import Unlowered, lower
from hipevolve.app.cli import app
from hipevolve.app.translate import model_builds_on_cpu, translate
from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.problems.kernelbench import load_kernelbench_file

DATA = Path(__file__).parent / "data" / "kernelbench"
SCALED_BIAS = DATA / "gpu_sized" / "7_Scaled_Bias.py"
REFUSALS = DATA / "lowering_refusals"


def test_the_lowered_model_defines_what_it_uses_and_builds_on_the_cpu(tmp_path):
    task = load_kernelbench_file(SCALED_BIAS)
    result = translate(task, tmp_path / "out")
    assert result.folder is not None, result.reason
    model = (result.folder / "model.py").read_text()
    assert "super(Model" not in model and "super().__init__()" in model
    assert "SCALE = 0.5" in model  # the module constant its __init__ reads
    assert result.builds, result.reason
    candidate = load_candidate(result.folder)
    assert candidate.format == "native" and "__global__" in candidate.hip_source


def test_a_model_py_missing_a_name_is_reported_as_not_building(tmp_path):
    task = load_kernelbench_file(SCALED_BIAS)
    found = lower(task)
    assert isinstance(found, Candidate)
    broken = found.model_copy(update={"python_source": found.python_source.replace(
        "SCALE = 0.5\n", "")})  # what the lowering wrote before: __init__ reads an undefined name
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "model.py").write_text(broken.python_source)
    problem = model_builds_on_cpu(broken, task, folder)
    assert problem.startswith("ModelNew does not build on the CPU: NameError")


@pytest.mark.parametrize("name, reason", [
    ("raises_in_init", "the reference cannot be built on the meta device (RuntimeError: this "
                       "reference cannot be built)"),
    ("data_dependent", "the reference's forward fails on the meta device"),
    ("big_gru", "recurrent module nn.GRU: the offline translator lowers no recurrences"),
])  # fmt: skip
def test_a_reference_that_cannot_be_traced_is_a_one_line_reason(name, reason):
    found = lower(load_kernelbench_file(REFUSALS / f"{name}.py"))
    assert isinstance(found, Unlowered)
    assert found.reason.startswith(reason) and "\n" not in found.reason


def test_recurrent_modules_are_refused_before_tracing(monkeypatch):
    def no_tracing(*args, **kwargs):
        raise AssertionError("traced a recurrent module")

    monkeypatch.setattr("torch.fx.experimental.proxy_tensor.make_fx", no_tracing)
    found = lower(load_kernelbench_file(REFUSALS / "big_gru.py"))
    assert isinstance(found, Unlowered) and "nn.GRU" in found.reason


def test_an_unexpected_failure_inside_the_lowering_is_a_reason_not_a_crash(monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("an internal table lacks an entry")

    monkeypatch.setattr(lower_module, "_kernel_source", broken)
    found = lower(load_kernelbench_file(SCALED_BIAS))
    assert isinstance(found, Unlowered)
    assert found.reason == "KeyError: 'an internal table lacks an entry'"


def test_evolve_translate_writes_the_candidate(tmp_path):
    out = tmp_path / "lowered"
    result = CliRunner().invoke(app, ["translate", "7_Scaled_Bias", "--out", str(out),
                                      "--tasks-dir", str(SCALED_BIAS.parent)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (out / "kernel.hip").is_file() and (out / "model.py").is_file()
    assert f"evolve verify {out} --task 7_Scaled_Bias" in result.output


def test_evolve_translate_says_in_one_line_why_a_task_does_not_lower(tmp_path):
    out = tmp_path / "lowered"
    result = CliRunner().invoke(app, ["translate", "big_gru", "--out", str(out),
                                      "--tasks-dir", str(REFUSALS)])  # fmt: skip
    assert result.exit_code == 1
    assert result.output.strip() == ("big_gru: not lowered: recurrent module nn.GRU: the offline "
                                     "translator lowers no recurrences")
    assert not out.exists()


def test_parameters_of_a_sequential_are_indexed_in_the_lowered_model(tmp_path):
    task = load_kernelbench_file(DATA / "sequential" / "9_Tiny_MLP.py")
    result = translate(task, tmp_path / "out")
    assert result.folder is not None, result.reason
    model = (result.folder / "model.py").read_text()
    assert "self.network[0].weight" in model and "self.network.0" not in model
    assert result.builds, result.reason


def _translate(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hipevolve", "translate", *map(str, args)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def test_the_printed_verify_command_runs_as_printed_with_its_tasks_dir(tmp_path):
    """`evolve translate 19_ReLU --tasks-dir DIR` prints an `evolve verify` command carrying the
    same --tasks-dir, its paths quoted (here they hold spaces); run by a shell as printed it
    scores the candidate instead of answering "unknown task"."""
    level = tmp_path / "Kernel Bench" / "level1"
    level.mkdir(parents=True)
    shutil.copy(DATA / "level_test" / "19_ReLU.py", level)
    out = tmp_path / "my relu"
    done = _translate("19_ReLU", "--tasks-dir", level, "--out", out)
    assert done.returncode == 0, done.stderr
    command = re.search(r"score it with `([^`]+)`", done.stderr).group(1)
    assert "--tasks-dir" in command and f"'{level}'" in command and f"'{out}'" in command
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    scored = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                            timeout=300, env=env, cwd=tmp_path)  # fmt: skip
    assert "unknown task" not in scored.stderr, scored.stderr
    # ok on a GPU, compiled (the static backend) without one
    assert scored.returncode == 0, scored.stdout + scored.stderr
    assert re.match(r"(ok|compiled) on 19_ReLU", scored.stdout), scored.stdout


def test_translate_refuses_to_replace_a_hand_edited_kernel_and_force_replaces_it(tmp_path):
    out = tmp_path / "lowered"
    first = _translate("7_Scaled_Bias", "--tasks-dir", SCALED_BIAS.parent, "--out", out)
    assert first.returncode == 0, first.stderr
    edited = (out / "kernel.hip").read_text() + "// my hand edit\n"
    (out / "kernel.hip").write_text(edited)
    again = _translate("7_Scaled_Bias", "--tasks-dir", SCALED_BIAS.parent, "--out", out)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    line = again.stderr.strip()
    assert "\n" not in line and "--force" in line
    assert "already holds kernel.hip and model.py" in line
    assert (out / "kernel.hip").read_text() == edited  # nothing lost
    forced = _translate("7_Scaled_Bias", "--tasks-dir", SCALED_BIAS.parent, "--out", out,
                        "--force")  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    assert "my hand edit" not in (out / "kernel.hip").read_text()
