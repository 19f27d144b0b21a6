"""Every Evaluator provides the whole protocol (verifier/evaluators.py): its callers never probe
for a member with getattr."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from agents_support import CompilingStandIn
from standin import StandIn

from hipevolve.core.config import VerifierSettings
from hipevolve.problems import get_task
from hipevolve.verifier.evaluators import BaseEvaluator, Evaluator, PipelineEvaluator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import offline_suite as osu  # noqa: E402  (bench/ is a folder of scripts, not a package)
import search_efficiency as se  # noqa: E402

MEMBERS = (
    "settings_key",
    "toolchain",
    "device",
    "parallelism",
    "close",
    "__call__",
    "prepare",
    "run",
)


def _provides(evaluator: Evaluator) -> None:
    assert isinstance(evaluator.settings_key, str) and isinstance(evaluator.toolchain, str)
    assert evaluator.device is None or isinstance(evaluator.device, str)
    assert isinstance(evaluator.parallelism, int) and evaluator.parallelism >= 1
    assert callable(evaluator.close) and callable(evaluator)
    assert evaluator.prepare([]) == [] and evaluator.run([]) == []


def test_the_protocol_names_every_member_its_callers_use() -> None:
    for name in MEMBERS:
        assert hasattr(Evaluator, name) or name in Evaluator.__annotations__, name


def test_stand_ins_take_the_defaults_no_device_one_batch_nothing_to_close(tmp_path) -> None:
    wrapped = StandIn(tmp_path / "inner.log")
    for evaluator in (StandIn(tmp_path / "log"), CompilingStandIn(tmp_path, build=False),
                      osu.Remembering(wrapped)):  # fmt: skip
        _provides(evaluator)
        assert (evaluator.device, evaluator.parallelism) == (None, 1)
        evaluator.close()
    assert issubclass(se.TableEvaluator, BaseEvaluator)


def test_the_pipeline_evaluator_provides_the_protocol_without_a_gpu(tmp_path) -> None:
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    evaluator = PipelineEvaluator(get_task("softmax"), settings, "static")
    _provides(evaluator)
    assert (evaluator.device, evaluator.parallelism) == ("no GPU", 1)
    evaluator.close()


def test_a_stand_in_without_a_call_cannot_be_built() -> None:
    class Silent(BaseEvaluator):
        settings_key, toolchain = "{}", "none"

    with pytest.raises(TypeError, match="abstract"):
        Silent()


def _judges_of(pid: int) -> list[int]:
    """This process's children that are judges (verifier/gpu/judge/worker.py)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == pid and b"hipevolve.verifier.gpu.judge.worker" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_start_has_the_judges_running_before_any_evaluation_and_close_stops_them(tmp_path):
    """A run's evaluator starts its judges as it is made (gpu_evaluator), so their start-up
    runs beside the run's set-up rather than before its first evaluation."""
    import os
    import time

    evaluator = PipelineEvaluator(get_task("softmax"), VerifierSettings(cache_dir=tmp_path), "cpu")
    assert _judges_of(os.getpid()) == []  # made, not started: nothing runs yet
    try:
        evaluator.start()
        assert len(_judges_of(os.getpid())) >= 1
    finally:
        evaluator.close()
    end = time.monotonic() + 30
    while _judges_of(os.getpid()) and time.monotonic() < end:
        time.sleep(0.2)
    assert _judges_of(os.getpid()) == []
