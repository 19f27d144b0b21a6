"""A stand-in for the GPU evaluator, shared by the run-loop and `evolve` command tests.

`StandIn` scores a native candidate by its declared tunable values (a known table, so the optimum
of the small space is known), returns real Evaluation objects (ok with per-case results, or
incorrect for one corner of the space) and appends every candidate it finished to a log file.
This machine has no GPU; the production evaluator (hipevolve.verifier.evaluators.pipeline_evaluator)
is exercised by the gpu-marked tests.
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from hipevolve.archive.store import canonical_json
from hipevolve.core.candidate import Candidate
from hipevolve.core.config import Settings, VerifierSettings
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.offline.tunables import current_configuration, parse_tunables
from hipevolve.problems import BUILTIN_DIR, load_task_folder
from hipevolve.verifier.evaluators import BaseEvaluator, duel_order
from hipevolve.verifier.prepared import Prepared
from hipevolve.verifier.ray import Stateless

GDN_DECODE = BUILTIN_DIR / "gated_delta_net_decode"

# The stand-in's score is the product of one factor per tunable: optimum BLOCK=256, UNROLL=4,
# VEC=4, where the score is 1.4 * 1.5 * 1.6.
FACTORS = {
    "BLOCK": {"32": 0.5, "64": 0.8, "128": 1.0, "256": 1.4, "512": 1.2},
    "UNROLL": {"1": 1.0, "2": 1.2, "4": 1.5, "8": 1.3},
    "VEC": {"1": 1.0, "2": 1.3, "4": 1.6},
    "BV": {"16": 0.7, "32": 1.0, "64": 1.3, "128": 1.1},  # the GDN decode seed's tunables
    "NT_FEW": {"128": 1.0, "256": 0.9},
    "NT_MANY": {"128": 0.9, "256": 1.0, "512": 1.1},
    "FEW_WAVES": {"1": 1.0, "2": 0.95},
    "FAST_EXP": {"0": 1.0, "1": 1.05},
}
OPTIMUM = 1.4 * 1.5 * 1.6

# Written so that no catalogue transform applies except widen_vector (a tunable change): the
# space is exactly the 5 * 4 * 3 = 60 tunable configurations.
KERNEL = """\
#include <hip/hip_runtime.h>

// @tunable BLOCK: 32, 64, 128, 256, 512
#define BLOCK 128
// @tunable UNROLL: 1, 2, 4, 8
#define UNROLL 1
// @tunable VEC: 1, 2, 4
#define VEC 1

__global__ void __launch_bounds__(BLOCK)
scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = (blockIdx.x * BLOCK + threadIdx.x) * UNROLL * VEC;
#pragma unroll
    for (int u = 0; u < UNROLL * VEC; ++u) {
        if (i + u < n) y[i + u] = 2.0f * x[i + u];
    }
}

extern "C" hipError_t scale(const float* x, float* y, int n, hipStream_t stream) {
    int per_block = BLOCK * UNROLL * VEC;
    hipLaunchKernelGGL(scale_kernel, dim3((n + per_block - 1) / per_block), dim3(BLOCK), 0,
                       stream, x, y, n);
    return hipGetLastError();
}
"""

MODEL = """\
import torch
import torch.nn as nn

from hipevolve.runtime import kernels


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        kernels.scale(x, y, x.numel())
        return y
"""


class StandIn(BaseEvaluator):
    """Scores native candidates by their tunables; appends each finished source hash to `log`."""

    settings_key = canonical_json({"task": "stand-in", "cases": ["a", "b"]})
    toolchain = "stand-in"

    def __init__(self, log: Path, delay_s: float = 0.0) -> None:
        self.log = log
        self.delay_s = delay_s

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        results = []
        for candidate in candidates:
            time.sleep(self.delay_s)
            results.append(score(candidate))
            with self.log.open("a") as f:
                f.write(candidate.source_hash + "\n")
        return results

    def head_to_head(self, a: Candidate, b: Candidate, rounds: int) -> list[Evaluation]:
        """The rounds of a head-to-head, logged apart (`duels`) from the search's evaluations."""
        order = duel_order(a, b, rounds)
        with self.duels.open("a") as f:
            f.writelines(c.source_hash + "\n" for c in order)
        return [score(c) for c in order]

    @property
    def duels(self) -> Path:
        return self.log.with_suffix(".duels")


class InertVec(StandIn):
    """The stand-in on a target where VEC builds to the same machine code whatever its value (as
    AMD-only tunables do on NVIDIA): its build-stage digests leave VEC out, so the run loop
    answers a candidate that differs from an evaluated one in VEC alone as a machine-code copy."""

    def prepare(self, candidates: list[Candidate]) -> list[Prepared]:
        out = []
        for candidate in candidates:
            config = current_configuration(parse_tunables(candidate.hip_source or ""))
            config.pop("VEC", None)
            out.append(Prepared(candidate=candidate, digest=canonical_json(config)))
        return out


def score(candidate: Candidate) -> Evaluation:
    config = current_configuration(parse_tunables(candidate.hip_source or ""))
    if config.get("BLOCK") == "512" and config.get("UNROLL") == "8":
        return Evaluation(
            status=Status.incorrect,
            task="stand-in",
            cases=(CaseResult(case="a", correct=False, message="max abs error 3.1"),),
            message="wrong result in case a",
        )
    fitness = 1.0
    for name, value in config.items():
        fitness *= FACTORS[name][value]
    # Two cases whose geometric mean is the score, so per-case speedups differ from fitness.
    cases = (
        CaseResult(case="a", correct=True, time_us=100.0 / (fitness * 1.1), ref_time_us=100.0),
        CaseResult(case="b", correct=True, time_us=100.0 * 1.1 / fitness, ref_time_us=100.0),
    )
    return Evaluation(status=Status.ok, task="stand-in", backend="stand-in", cases=cases)


def make_task(root: Path) -> TaskSpec:
    """The GDN decode task with the three-tunable test kernel as its only seed."""
    seed = root / "seed"
    seed.mkdir(parents=True, exist_ok=True)
    (seed / "kernel.hip").write_text(KERNEL)
    (seed / "model.py").write_text(MODEL)
    task = load_task_folder(GDN_DECODE, "builtin")
    return task.model_copy(update={"seeds": (seed,)})


def evaluated_hashes(path: Path, run: int = 1) -> list[str]:
    """Source hashes of the run's evaluated candidates, in the order they were recorded."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT c.source_hash FROM evaluations e JOIN candidates c ON c.id = e.candidate"
            " WHERE c.run = ? ORDER BY e.id",
            [run],
        ).fetchall()
    return [r[0] for r in rows]


def logged(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def sigkill_when(proc: subprocess.Popen, ready: Callable[[], bool], within_s: float = 30) -> None:
    """Waits for ready() while the child lives, then kills it with SIGKILL and reaps it. The
    child is stopped while ready() is asked again, so what it saw is what the kill leaves."""
    deadline = time.monotonic() + within_s
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the child made no progress"
        if ready():
            os.kill(proc.pid, signal.SIGSTOP)
            if ready():
                break
            os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


# A task the `evolve` command finds through --tasks-dir: y = 2x, with the three-tunable kernel
# above (which computes exactly that) as its seed.
TASK_NAME = "scale_standin"

TASK_TOML = f"""\
name = "{TASK_NAME}"
description = "y = 2x over a float32 vector (the stand-in evaluator's task)"
family = "elementwise"
seeds = ["seeds/scale"]

[tolerance]
kind = "allclose"
atol = 1e-6
rtol = 1e-6

[[cases]]
name = "a"
inputs = {{ n = 4096 }}
small = true

[[cases]]
name = "b"
inputs = {{ n = 1048576 }}
"""

REFERENCE = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return 2.0 * x


def get_inputs(n: int = 4096):
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""


def write_task_folder(root: Path) -> Path:
    """A tasks folder (pass it as --tasks-dir) holding the stand-in task and its seed."""
    folder = root / "tasks" / TASK_NAME
    seed = folder / "seeds" / "scale"
    seed.mkdir(parents=True, exist_ok=True)
    (folder / "task.toml").write_text(TASK_TOML)
    (folder / "reference.py").write_text(REFERENCE)
    (seed / "kernel.hip").write_text(KERNEL)
    (seed / "model.py").write_text(MODEL)
    return root / "tasks"


class StandInEvaluators:
    """An evaluator factory for hipevolve.app.run_job (and `hipevolve.app.cli.main(evaluators=...)`)."""

    def __init__(self, log: Path, delay_s: float = 0.0) -> None:
        self.log, self.delay_s = log, delay_s

    def __call__(self, task: TaskSpec, settings: Settings, backend: str) -> StandIn:
        return StandIn(self.log, self.delay_s)


class Ticket(BaseModel):
    """What StandInStages.prepare hands a worker: nothing is finished on the CPU side."""

    candidate: Candidate
    done: Evaluation | None = None


class StandInStages:
    """The stand-in as the Stages of a Ray evaluator (hipevolve.verifier.ray): the
    worker actor scores as StandIn does. With `die_on` (tunable values), the worker process
    exits in the middle of that candidate's evaluation, the first `deaths` times it is asked
    for it (counted in files under `marks`, which every worker sees)."""

    def __init__(
        self,
        marks: Path,
        die_on: dict[str, str] | None = None,
        deaths: int = 1,
        delay_s: float = 0.0,
        full_disk_on: dict[str, str] | None = None,
    ):
        self.marks, self.die_on, self.deaths = marks, die_on, deaths
        self.delay_s = delay_s  # each evaluation takes this long and leaves marks/span-HASH
        self.full_disk_on = full_disk_on  # tunable values whose CPU stage finds the disk full

    def prepare(self, candidate: Candidate) -> Ticket:
        config = current_configuration(parse_tunables(candidate.hip_source or ""))
        if self.full_disk_on and all(config.get(k) == v for k, v in self.full_disk_on.items()):
            raise OSError(errno.ENOSPC, "No space left on device")
        return Ticket(candidate=candidate)

    def open(self) -> Stateless:
        return Stateless()

    def run(self, ticket: Ticket, state: Stateless) -> Evaluation:
        config = current_configuration(parse_tunables(ticket.candidate.hip_source or ""))
        if self.die_on is not None and all(config.get(k) == v for k, v in self.die_on.items()):
            died = len(list(self.marks.glob("death-*")))
            if died < self.deaths:
                (self.marks / f"death-{died}").write_text(str(os.getpid()))
                os._exit(1)  # the worker process is gone, as when its machine is lost
        if self.delay_s:
            began = time.time()
            time.sleep(self.delay_s)
            span = self.marks / f"span-{ticket.candidate.source_hash}"
            span.write_text(f"{began} {time.time()}")
        return score(ticket.candidate)

    def describe(self) -> dict[str, str]:
        return {
            "backend": "stand-in",
            "toolchain": StandIn.toolchain,
            "device": "",
        }  # no device: exact numbers


class JudgedOnCpu:
    """The pipeline's worker stage (PipelineStages.run: a judge and its sandbox) on the cpu
    backend, for Ray workers on machines without a GPU. `prepare` skips the static screen,
    which refuses the pure-PyTorch candidates a CPU can run; the screen has tests of its own."""

    def __init__(self, task: TaskSpec, settings: VerifierSettings) -> None:
        from hipevolve.verifier.ray import PipelineStages

        self.stages = PipelineStages(task, settings, "cpu")

    def prepare(self, candidate: Candidate):
        from hipevolve.verifier.pipeline import Prepared
        from hipevolve.verifier.ray import Shipment

        return Shipment(prepared=Prepared(candidate=candidate))

    def open(self):
        return self.stages.open()

    def run(self, shipment, slots) -> Evaluation:
        return self.stages.run(shipment, slots)

    def describe(self) -> dict[str, str]:
        return self.stages.describe()
