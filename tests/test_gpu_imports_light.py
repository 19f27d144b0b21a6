"""The judge, its sandbox and the zygote import no pydantic: they run with torch, numpy and the
standard library alone, and read their job as plain dataclasses (verifier/gpu/job.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# What a judge process imports, at module level and inside its functions; a sandbox and the
# zygote import a subset of it.
GPU_SIDE = (
    "hipevolve.verifier.gpu.judge.worker",
    "hipevolve.verifier.gpu.sandbox.sandbox",
    "hipevolve.verifier.gpu.sandbox.sandbox_process",
    "hipevolve.verifier.gpu.sandbox.zygote",
    "hipevolve.verifier.gpu.judge.channel",
    "hipevolve.verifier.gpu.judge.compare",
    "hipevolve.verifier.gpu.confine",
    "hipevolve.verifier.gpu.sandbox.input_pool",
    "hipevolve.verifier.gpu.ipc",
    "hipevolve.verifier.gpu.job",
    "hipevolve.verifier.gpu.judge.judge",
    "hipevolve.verifier.gpu.memplan",
    "hipevolve.verifier.gpu.sandbox.prebuilt",
    "hipevolve.verifier.gpu.judge.record_ahead",
    "hipevolve.verifier.gpu.judge.references",
    "hipevolve.verifier.gpu.timing",
    "hipevolve.verifier.gpu.judge.wide_case",
    "hipevolve.verifier.gpu.wire",
    "hipevolve.core.reference",
    "hipevolve.runtime",
)
HEAVY = ("pydantic",)


def _loaded_after_importing(modules: tuple[str, ...]) -> list[str]:
    """The heavy modules a fresh Python has loaded once it has imported `modules`."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_judge_sandbox_and_zygote_import_no_pydantic() -> None:
    assert _loaded_after_importing(GPU_SIDE) == []


@pytest.mark.parametrize("heavy", ["hipevolve.core.config", "hipevolve.verifier.isolate"])
def test_the_check_catches_a_module_that_imports_pydantic(heavy: str) -> None:
    # The controller's side (settings, isolate) does import it: the check above would see it.
    assert _loaded_after_importing((*GPU_SIDE, heavy)) == ["pydantic"]
