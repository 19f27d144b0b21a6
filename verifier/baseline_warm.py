"""The strong baselines' kernels compiled beside a run's first evaluations, off the GPU slot.

On a cold H200 each of FLA's eight strong-baseline jobs held the run's only GPU slot for about
45 s, about 40 s of it Triton compiling on the CPU (stop 55's split: compiled without launching,
then called, the first call took 4-6 s). `Warming.start` compiles them first in a few processes of
their own (verifier/gpu/judge/warm.py: Triton compiles every kernel and launches none), each
with a share of the task's timed cases, into the compile folder the judges' jobs read
(isolate.baseline_compiles), while the run's evaluations hold the slot; the strong-baseline
jobs wait for it (evaluators.PipelineEvaluator.strong_baselines), then only autotune and time.

Only `module` baselines are compiled here (a torch_compile baseline's compiles are Inductor's,
made inside its judge's job). The processes run trusted code only (the task's reference and
baseline modules), in a judge's environment (isolate.judge_env), pinned to the run's first
GPU; `stop` kills what is left of them. An item that fails is said in its line and left to
the judge's job, which decides with the same code.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from hipevolve.verifier.isolate import baseline_jobs, judge_env
from hipevolve.verifier.slots import visibility_variable

if TYPE_CHECKING:
    from hipevolve.core.config import VerifierSettings
    from hipevolve.core.taskspec import TaskSpec

WAIT_S = 900.0  # past this the jobs compile what is left themselves
CORES_PER_PROCESS = 2  # one compiles, the other is left to the run's builds


class Warming:
    """The compile processes of one run's strong baselines."""

    def __init__(self, procs: list[subprocess.Popen], folder: Path) -> None:
        self.procs, self.folder, self.started = procs, folder, time.monotonic()

    @classmethod
    def start(
        cls, task: TaskSpec, settings: VerifierSettings, backend: str, gpus: tuple[str, ...]
    ) -> Warming | None:
        """The processes started, or None when the task has no `module` baseline to compile."""
        from hipevolve.verifier.pipeline import _device, check_seeds

        items = [
            {
                "baseline": b.resolved(),
                "case": {"name": c.name, "init": c.init, "inputs": c.inputs},
            }
            for b in baseline_jobs(task, settings)
            if b.kind == "module"
            for c in task.cases
            if c.timed and not c.globals
        ]
        if not items:
            return None
        count = max(1, min(len(items), (os.cpu_count() or 2) // CORES_PER_PROCESS))
        folder = Path(tempfile.mkdtemp(prefix="hipevolve-warm-"))
        env = judge_env(folder)
        if gpus:
            env[visibility_variable(backend)] = gpus[0]
        procs = []
        for i in range(count):
            job = folder / f"job{i}.json"
            job.write_text(
                json.dumps(
                    {
                        "device": _device(backend),
                        "reference": str(Path(task.reference).resolve()),
                        "seed": check_seeds(task, settings)[0],
                        "items": items[i::count],
                    }
                )
            )
            with (folder / f"job{i}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "hipevolve.verifier.gpu.judge.warm", str(job)],
                        stdout=subprocess.PIPE,
                        stderr=log,
                        start_new_session=True,
                        env=env,
                        cwd=folder,
                    )
                )
        return cls(procs, folder)

    def wait(self, timeout: float = WAIT_S) -> list[dict]:
        """Every item's line ({"baseline", "case", "seconds", "error"}) once all are done, or
        those done when `timeout` ran out (the rest are stopped)."""
        lines: list[dict] = []
        deadline = self.started + timeout
        for proc in self.procs:
            try:
                out, _ = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stop()
                out, _ = proc.communicate()
            for line in (out or b"").decode(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    lines.append(json.loads(line))
        self.stop()
        return lines

    def stop(self) -> None:
        """Kills what is still running, with everything it started; its folder goes."""
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 9)
                proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)

    def seconds(self) -> float:
        return time.monotonic() - self.started
