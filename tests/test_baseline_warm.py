"""The strong baselines' kernels compile beside a run's first evaluations, off the GPU slot, into
the folder their judges' jobs compile into (verifier/baseline_warm.py, issue 47)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hipevolve.core.baseline import RunBaseline
from hipevolve.core.config import VerifierSettings
from hipevolve.problems import load_task_folder
from hipevolve.verifier.baseline_warm import Warming
from hipevolve.verifier.isolate import baseline_compiles
from tests.standin import TASK_NAME, write_task_folder

# Says which process called it (warm.py or the judge's worker.py), on what, and where its
# JIT compilers would keep their kernels.
RECORDS = """\
import os
import sys
from pathlib import Path

import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        folder = Path(os.environ["TRITON_CACHE_DIR"])
        with (folder / "calls.txt").open("a") as f:
            f.write(f"{Path(sys.argv[0]).name} {x.numel()} {os.environ['TORCHINDUCTOR_CACHE_DIR']}\\n")
        return x + x
"""
NOT_INSTALLED = """\
raise ImportError("demo library not installed (pip install demo)")
"""
HANGS = """\
import time

import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        time.sleep(3600)
"""


def task_with(tmp_path: Path, modules: dict[str, str], *, compiled: bool = False):
    folder = write_task_folder(tmp_path) / TASK_NAME
    (folder / "baselines").mkdir()
    tables = ""
    for name, source in modules.items():
        (folder / "baselines" / f"{name}.py").write_text(source)
        tables += f'\n[[baselines]]\nname = "{name}"\nmodule = "baselines/{name}.py"\n'
    if compiled:
        tables += '\n[[baselines]]\nname = "compiled"\nkind = "torch_compile"\n'
    toml = folder / "task.toml"
    toml.write_text(toml.read_text() + tables)
    return load_task_folder(folder, "user")


def calls(settings: VerifierSettings) -> list[list[str]]:
    text = (baseline_compiles(settings) / "triton" / "calls.txt").read_text()
    return [line.split() for line in text.splitlines()]


def test_each_module_baseline_runs_once_a_timed_case_in_the_shared_compile_folder(tmp_path):
    """One line an item (a module baseline on a timed case), a failure said in its line;
    torch_compile baselines are left to their judges (their compiles are Inductor's)."""
    task = task_with(tmp_path, {"records": RECORDS, "demo": NOT_INSTALLED}, compiled=True)
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    warming = Warming.start(task, settings, "cpu", ())
    assert warming is not None
    lines = warming.wait(timeout=120)
    timed = sorted(c.name for c in task.cases if c.timed)
    assert sorted((x["baseline"], x["case"]) for x in lines) == sorted(
        (b, c) for b in ("records", "demo") for c in timed
    )
    assert {x["error"] for x in lines if x["baseline"] == "records"} == {""}
    assert {x["error"] for x in lines if x["baseline"] == "demo"} == {
        "demo library not installed (pip install demo)"
    }
    sizes = {c.name: c.inputs["n"] for c in task.cases}
    inductor = str(baseline_compiles(settings) / "inductor")
    assert sorted(calls(settings)) == sorted(["warm.py", str(sizes[c]), inductor] for c in timed)
    assert not warming.folder.exists()  # its job files go with it


def test_the_judges_strong_jobs_compile_in_the_folder_the_warm_step_filled(tmp_path):
    """The run's strong baselines: compiled first (one call a case from warm.py), then timed
    in judges that see the same compile folder; the run's line says how long compiling took."""
    from hipevolve.verifier.evaluators import PipelineEvaluator

    task = task_with(tmp_path, {"records": RECORDS})
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    evaluator = PipelineEvaluator(task, settings, "cpu")
    try:
        found = evaluator.strong_baselines(trials=3)
    finally:
        evaluator.close()
    assert isinstance(found, RunBaseline) and "records" in found.others
    timed = [c.name for c in task.cases if c.timed]
    who = [line[0] for line in calls(settings)]
    assert who[: len(timed)] == ["warm.py"] * len(timed)  # all compiled before any job ran
    assert who.count("worker.py") >= 2 * len(timed)  # its check and trials in the judges
    assert found.compiled_s is not None and found.compiled_s > 0
    assert f"compiled beside the run's evaluations first, in {found.compiled_s:.0f} s" in (
        found.strong_line()
    )


def test_a_hung_compile_is_stopped_at_its_deadline_and_leaves_nothing_running(tmp_path):
    task = task_with(tmp_path, {"hangs": HANGS})
    warming = Warming.start(task, VerifierSettings(cache_dir=tmp_path / "cache"), "cpu", ())
    assert warming is not None
    started = time.monotonic()
    lines = warming.wait(timeout=20)
    assert time.monotonic() - started < 40
    assert lines == []
    assert all(p.poll() is not None for p in warming.procs)


def test_a_task_without_module_baselines_starts_no_process(tmp_path):
    task = task_with(tmp_path, {})
    assert Warming.start(task, VerifierSettings(cache_dir=tmp_path / "cache"), "cpu", ()) is None


TRITON_BASELINE = """\
import os
from pathlib import Path

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 1024})], key=["n"]
)
@triton.jit
def twice(x, y, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + i, 2 * tl.load(x + i, mask=i < n), mask=i < n)


class Model(nn.Module):
    def forward(self, x):
        y = torch.zeros_like(x)
        twice[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
        torch.cuda.synchronize()
        with (Path(os.environ["TRITON_CACHE_DIR"]) / "calls.txt").open("a") as f:
            f.write(f"launched {bool(y.any())}\\n")
        return y
"""


@pytest.mark.gpu
def test_triton_kernels_compile_every_config_and_launch_none_then_judges_reuse_them(tmp_path):
    """On a GPU: the warm step leaves the kernel's two autotune configurations compiled and never
    launched it; the judges' jobs then launch it (correct: timed) and compile nothing new."""
    pytest.importorskip("triton")
    from hipevolve.verifier.evaluators import PipelineEvaluator

    task = task_with(tmp_path, {"triton twice": TRITON_BASELINE})
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    cache = baseline_compiles(settings) / "triton"
    warming = Warming.start(task, settings, "cuda", ("0",))
    assert warming is not None
    assert {x["error"] for x in warming.wait()} == {""}
    compiled = sorted(p.name for p in cache.rglob("*.cubin")) or sorted(
        p.name for p in cache.rglob("*.hsaco")
    )
    assert len(compiled) == 2  # both configurations (one kernel, one shape class)
    assert {line[1] for line in calls(settings)} == {"False"}  # never launched
    evaluator = PipelineEvaluator(task, settings, "cuda")
    try:
        found = evaluator.strong_baselines(trials=3)
    finally:
        evaluator.close()
    assert isinstance(found, RunBaseline) and "triton twice" in found.others, found
    assert "True" in {line[1] for line in calls(settings)}
    after = sorted(p.name for p in cache.rglob("*.cubin")) or sorted(
        p.name for p in cache.rglob("*.hsaco")
    )
    assert after == compiled
