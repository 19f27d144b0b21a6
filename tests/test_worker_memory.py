"""The judge under a lean device-memory plan (verifier/gpu/memplan.py), on the CPU path: a job
that names less device memory than today's plan needs (WorkerJob.device_memory_bytes) is run
with references on the host, fewer check outputs kept at once and the result flagged; one that
cannot fit at all is refused in one line before anything runs. The GPU side (chunked
comparisons, one timing set drawn per call, memory given back) is in test_judge_memory_gpu.py."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

from hipevolve.core.evaluation import Status
from hipevolve.verifier.gpu import memplan
from hipevolve.verifier.isolate import run_worker

sys.path.insert(0, str(Path(__file__).parent / "hostile"))
from test_hostile import HEALTHY, HERE, cpu_job  # noqa: E402

# The softmax task's small case (test_hostile.cpu_job): 64 x 1024 float32 in and out.
SMALL = memplan.CaseBytes(name="small", input_bytes=64 * 1024 * 4, output_bytes=64 * 1024 * 4)


def lean_job(candidate: Path):  # noqa: ANN201
    """cpu_job with device memory enough for a lean plan that keeps one check call's outputs."""
    job = cpu_job(candidate, flush_bytes=0)
    shape = memplan.JobShape(seeds=len(job.seeds), calls=job.warmup + job.trials,
                             timing_budget_bytes=job.timing_budget_bytes, flush_bytes=0)  # fmt: skip
    need = memplan.lean_peak(SMALL, 2, 1, shape) + memplan.SANDBOX_CONTEXT
    memory = math.ceil(need / memplan.SAFE_SHARE) + 1
    plan = memplan.plan_memory([SMALL], shape, memory, memory)
    assert plan.lean and plan.fits and plan.kept_calls == 1, plan
    return replace(job, device_memory_bytes=memory)


def test_a_healthy_candidate_scores_ok_under_a_lean_plan_and_says_so() -> None:
    result = run_worker(lean_job(HEALTHY))
    assert result.status is Status.ok, result.message
    assert result.cases[0].time_us and result.cases[0].ref_time_us
    lean = [f for f in result.flags if f.startswith("memory:lean")]
    assert lean and "outputs of 1 check calls kept at once" in lean[0]


def test_outputs_reused_across_calls_never_reach_a_lean_plans_checks() -> None:
    # The file keeps its first output and returns it again; its Python runs only in its recorder
    # (record_kb.py), so the judged replay allocates each call's outputs afresh: its honest
    # outputs are checked, under the lean plan (tests/hostile: REPLAYED).
    result = run_worker(lean_job(HERE / "dyn_output_reuse.py"))
    assert result.status is Status.ok, result.message
    assert any(f.startswith("memory:lean") for f in result.flags), result.flags
    assert any(f.startswith("plan:kb-executor") for f in result.flags), result.flags


def test_stale_outputs_are_still_caught_under_a_lean_plan() -> None:
    result = run_worker(lean_job(HERE / "dyn_empty_reuse.py"))
    assert result.status is Status.incorrect and "wrong values" in result.message


def test_a_job_too_large_for_the_device_is_refused_in_one_line_before_it_runs() -> None:
    result = run_worker(replace(cpu_job(HEALTHY), device_memory_bytes=1 << 20))
    assert result.status is Status.runtime_error
    assert result.message.startswith("case small needs about ")
    assert result.message.endswith("GiB of device memory at least; this GPU has 0.0 GiB free")
    assert "\n" not in result.message and "Traceback" not in result.message
