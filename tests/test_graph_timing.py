"""Tasks declare whether eager or CUDA graph time is what counts (TaskSpec.timing): the field
reaches the judge and the sandbox, decides the idempotency key, and graph timing replays a
captured forward (timing.py), checks replays drawn at random and falls back to eager timing,
flagged, where a forward cannot be captured.

CPU tests: the field, the jobs, the key, the timing helpers and the judge's flags (on a CPU the
graph timing is eager and says so). GPU tests (marked): run on one H100 or H200 with
    python -m pytest -q -m gpu tests/test_graph_timing.py
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import Status
from hipevolve.problems import get_task
from hipevolve.verifier.evaluators import settings_key
from hipevolve.verifier.gpu import timing
from hipevolve.verifier.gpu.job import CandidateJob, CaseSizes, SandboxJob, Timeouts, WorkerJob
from hipevolve.verifier.gpu.judge.judge import timing_flags
from hipevolve.verifier.isolate import WorkerResult, job_for_task, run_worker

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "hostile"))
from test_hostile import (  # noqa: E402
    GPU_CASE,
    HEALTHY,
    HERE,
    assert_gone,
    assert_healthy_native_next,
    cpu_job,
    gpu_job,
)

DATA = Path(__file__).parent / "data" / "candidates"


# --- the task field and the jobs ----------------------------------------------------------------
def test_tasks_time_eagerly_unless_they_declare_graphs_and_decode_declares_them() -> None:
    assert get_task("softmax").timing == "eager"
    assert get_task("gated_delta_net").timing == "eager"
    assert get_task("gated_delta_net_decode").timing == "graph"


def test_an_eager_task_dumps_as_before_the_field_and_a_graph_task_round_trips() -> None:
    eager, graph = get_task("softmax"), get_task("gated_delta_net_decode")
    assert "timing" not in eager.model_dump()
    assert type(graph).model_validate(graph.model_dump()).timing == "graph"
    assert type(eager).model_validate(eager.model_dump()).timing == "eager"


def test_a_timing_other_than_eager_or_graph_is_refused() -> None:
    task = get_task("softmax")
    with pytest.raises(ValidationError, match="timing"):
        type(task).model_validate(task.model_dump() | {"timing": "fast"})
    with pytest.raises(ValueError, match="timing 'fast' is not one of"):
        replace(cpu_job(HEALTHY), timing="fast")


def test_the_judges_job_and_the_sandboxs_job_carry_the_tasks_timing() -> None:
    task = get_task("gated_delta_net_decode")
    job = job_for_task(task, CandidateJob(format="kernelbench", model=HEALTHY),
                       VerifierSettings(), device="cpu")  # fmt: skip
    assert job.timing == "graph"
    assert WorkerJob.from_json(job.to_json()).timing == "graph"
    sizes = {c.name: CaseSizes(poison_sizes=(4,), input_bytes=4, timing_sets=2) for c in job.cases}
    sandbox = SandboxJob.of(job, sizes, reserve_bytes=0)
    assert sandbox.timing == "graph"
    assert SandboxJob.from_dict(json.loads(sandbox.to_json())).timing == "graph"
    eager = job_for_task(get_task("softmax"), CandidateJob(format="kernelbench", model=HEALTHY),
                         VerifierSettings(), device="cpu")  # fmt: skip
    one = CaseSizes(poison_sizes=(4,), input_bytes=4, timing_sets=2)
    assert eager.timing == "eager"
    assert SandboxJob.of(eager, {c.name: one for c in eager.cases}, 0).timing == "eager"


def test_the_timing_decides_the_idempotency_key_and_eager_keys_stay_as_they_were() -> None:
    task = get_task("softmax")
    settings = VerifierSettings()
    eager = settings_key(task, settings, "cuda")
    graph = settings_key(task.model_copy(update={"timing": "graph"}), settings, "cuda")
    assert eager != graph
    assert "timing" not in json.loads(eager)  # keys archived before the field existed still match
    assert json.loads(graph)["timing"] == "graph"


# --- the timing helpers (CPU tensors stand in for device ones) ----------------------------------
def test_a_graphs_fixed_inputs_keep_shape_strides_and_dtype_and_refill_copies_each_trial() -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    strided = base.t()  # not contiguous
    fixed = timing.fixed_inputs([strided, 3, "x"])
    assert fixed[0].stride() == strided.stride() and fixed[0].dtype == strided.dtype
    assert fixed[0].data_ptr() != strided.data_ptr() and torch.equal(fixed[0], strided)
    assert fixed[1:] == [3, "x"]
    other = torch.randn(6, 4)
    address = fixed[0].data_ptr()
    timing.refill(fixed, [other, 3, "x"])
    assert torch.equal(fixed[0], other) and fixed[0].data_ptr() == address


def test_input_sets_whose_non_tensor_values_differ_cannot_share_one_graph() -> None:
    t = torch.zeros(2)
    assert timing.same_scalars([[t, 3, 0.5], [t + 1, 3, 0.5]])
    assert not timing.same_scalars([[t, 3], [t, 4]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.uint8])
def test_poisoned_graph_outputs_read_nan_or_an_integers_largest_value(dtype) -> None:  # noqa: ANN001
    t = torch.zeros(5, dtype=dtype)
    timing._poison(t)
    if dtype.is_floating_point:
        assert all(math.isnan(v) for v in t.float().tolist())
    else:
        assert t.tolist() == [torch.iinfo(dtype).max] * 5


def test_a_plans_buffers_are_poisoned_and_reweighted_before_each_replay(tmp_path: Path) -> None:
    """PlanModel.refresh does to a graph's fixed buffers what prepare does to fresh ones: a
    replay that writes nothing leaves NaN, and each seed's weights are the ones used."""
    import ctypes
    import shutil
    import subprocess

    from test_record_plan import WEIGHTED, WEIGHTED_C, _load, _spec

    from hipevolve.runtime import Launcher
    from hipevolve.verifier.gpu.sandbox import record
    from hipevolve.verifier.gpu.sandbox.executor import PlanModel

    (tmp_path / "w.c").write_text(WEIGHTED_C)
    gcc = shutil.which("gcc") or shutil.which("cc")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(tmp_path / "w.so"), str(tmp_path / "w.c")],
                   check=True)  # fmt: skip
    source = 'extern "C" void scale(const float* x, const float* w, float* y, int n) {}'
    module, kernels = _load(tmp_path, source, WEIGHTED, tmp_path)
    plan = record.record_case(module.ModelNew, [16], [_spec("float32", 16)], kernels, None)
    ret, decls = kernels._signatures["scale"]
    library = ctypes.CDLL(str(tmp_path / "w.so"))
    first = torch.arange(16, dtype=torch.float32)
    model = PlanModel(plan, {"scale": Launcher(library.scale, "scale", ret, decls)}, "cpu",
                      {"weight": first})  # fmt: skip
    x = torch.full((16,), 2.0)
    bases = model.prepare(x)
    (y,) = model.run(bases)
    assert torch.equal(y, 2.0 * first)
    other = torch.full((16,), 3.0)
    model.refresh(bases, {"weight": other})
    assert torch.isnan(y).all()  # the same address, poisoned again
    assert model.broken() == []
    (again,) = model.run(bases)
    assert again.data_ptr() == y.data_ptr() and torch.equal(again, 2.0 * other)


def test_the_judge_keeps_only_new_timing_flags_from_the_sandbox() -> None:
    assert timing_flags(["timing:graph", "seccomp:off", 3], []) == ["timing:graph"]
    assert timing_flags(["timing:graph"], ["timing:graph"]) == []
    assert timing_flags("timing:graph", []) == []
    assert timing_flags(["timing:eager (not capturable: " + "x" * 400], [])[0].__len__() == 300


def test_graph_timing_on_a_cpu_is_eager_and_flagged_for_the_candidate_and_the_reference() -> None:
    job = replace(cpu_job(HEALTHY), timing="graph")
    result = run_worker(job)
    assert result.status is Status.ok, result.message
    assert "timing:eager (not capturable: small: no GPU)" in result.flags, result.flags
    assert "timing:eager (not capturable: reference small: no GPU)" in result.flags
    assert len(result.cases[0].trials) == job.trials


# --- on a GPU -------------------------------------------------------------------------------------
def _decode_job(tmp_path: Path, timing_kind: str) -> WorkerJob:
    from hipevolve.verifier.build.backends import compiler_for, gpu_backend
    from hipevolve.verifier.build.compile import build

    task = get_task("gated_delta_net_decode")
    seed = task.seeds[0]
    built = build((seed / "kernel.hip").read_text(), compiler_for(gpu_backend()),
                  tmp_path / "build-cache")  # fmt: skip
    assert built.ok, built.log
    candidate = CandidateJob(format="native", model=seed / "model.py", library=built.library,
                             source=seed / "kernel.hip")  # fmt: skip
    # The fast seed over an eagerly timed, host-bound reference is far above the 10x gate;
    # the gate is not what this test is about.
    job = job_for_task(task, candidate, VerifierSettings(), device="cuda", suspect_speedup=1e4)
    return replace(job, timing=timing_kind)


def _medians(result: WorkerResult, reference: bool = False) -> dict[str, float]:
    return {
        c.case: statistics.median(c.ref_trials if reference else c.trials)
        for c in result.cases
        if (c.ref_trials if reference else c.trials)
    }


@pytest.mark.gpu
def test_a_decode_seed_timed_as_graph_replays_is_ok_and_the_launch_overhead_is_gone(
    tmp_path: Path,
) -> None:
    """The seed is one kernel: timed eagerly, its launch is already hidden behind the cache
    flush queued before the start event, so its replays are about as fast (no slower). The
    PyTorch reference launches a dozen kernels from Python, host-bound at batch 1 when timed
    eagerly: as graph replays it loses that overhead."""
    graph = run_worker(_decode_job(tmp_path, "graph"))
    eager = run_worker(_decode_job(tmp_path, "eager"))
    assert graph.status is Status.ok, graph.message
    assert eager.status is Status.ok, eager.message
    assert "timing:graph" in graph.flags, graph.flags
    assert not [f for f in graph.flags if f.startswith("timing:eager")], graph.flags
    assert not [f for f in eager.flags if f.startswith("timing:")], eager.flags
    g, e = _medians(graph), _medians(eager)
    assert set(g) == set(e) == {"decode_b1", "decode_b32", "decode_b256"}
    for case in g:
        assert g[case] <= e[case] * 1.10 + 3.0, (case, g, e)
    rg, re = _medians(graph, reference=True), _medians(eager, reference=True)
    assert rg["decode_b1"] < 0.8 * re["decode_b1"], (rg, re)


@pytest.mark.gpu
def test_a_kernel_honest_on_calls_but_not_on_later_graph_replays_is_caught(
    tmp_path: Path,
) -> None:
    """dyn_graph_replay_counter skips its work on every replay of a captured call after the
    first (device-side state), and is honest on every eager call: timed eagerly it scores ok;
    timed as replays, the replays checked at random catch it."""
    folder = HERE / "dyn_graph_replay_counter"
    eager = run_worker(gpu_job(folder, tmp_path))
    assert eager.status is Status.ok, eager.message  # the attack is invisible to eager calls
    result = run_worker(gpu_job(folder, tmp_path, timing="graph"))
    assert result.status in (Status.hacked, Status.incorrect), result.message
    assert "timed call" in result.message or "interleaved call" in result.message, result.message
    assert "timing:graph" in result.flags, result.flags
    assert_gone(result.sandbox_pid)
    assert_healthy_native_next(tmp_path)


def _python_gpu_job(model: Path) -> WorkerJob:
    task = get_task("softmax")
    return WorkerJob(
        task=task.name, reference=task.reference, tolerance=task.tolerance.model_dump(),
        candidate=CandidateJob(format="kernelbench", model=model), device="cuda",
        cases=(GPU_CASE,), seeds=(0, 1, 2), trials=30, warmup=5, timing="graph",
        timeouts=Timeouts(startup=120, load=60, check=20, timing=60),
    )  # fmt: skip


@pytest.mark.gpu
def test_a_python_forward_that_syncs_with_the_host_is_timed_eagerly_with_a_flag() -> None:
    job = _python_gpu_job(DATA / "softmax_item_sync.py")
    result = run_worker(job)
    assert result.status is Status.ok, result.message
    why = f"timing:eager (not capturable: {GPU_CASE.name}: "
    assert [f for f in result.flags if f.startswith(why)], result.flags
    assert "timing:graph" not in result.flags
    assert len(result.cases[0].trials) == job.trials


@pytest.mark.gpu
def test_a_capturable_python_forward_and_its_reference_are_timed_as_graph_replays() -> None:
    result = run_worker(_python_gpu_job(DATA / "softmax_ok.py"))
    assert result.status is Status.ok, result.message
    assert "timing:graph" in result.flags, result.flags
    assert not [f for f in result.flags if f.startswith("timing:eager")], result.flags


# --- the timer's graphs, in this process, on a GPU ---------------------------------------------
@pytest.mark.gpu
def test_replays_are_timed_on_each_trials_inputs_and_checked_replays_hold_their_outputs() -> None:
    clock = timing.Clock("cuda")
    sets = [[torch.randn(1 << 16, device="cuda"), 3] for _ in range(4)]
    got = timing.time_graph_trials(clock, lambda a: a[0] * a[1], sets, trials=20, warmup=3,
                                   keep=20, poison=True)  # fmt: skip
    assert got.eager == "" and len(got.times) == len(got.windows) == 20
    assert all(t > 0 for t in got.times)
    assert [index for index, _ in got.kept] == [(3 + i) % 4 for i in range(20)]
    for index, (out,) in got.kept:
        assert torch.equal(out, sets[index][0] * 3)


@pytest.mark.gpu
def test_a_replay_that_writes_nothing_leaves_poison_in_the_checked_outputs() -> None:
    clock = timing.Clock("cuda")
    sets = [[torch.randn(1024, device="cuda")] for _ in range(2)]

    def lazy(a: list) -> torch.Tensor:  # writes its output only when not captured
        out = torch.empty_like(a[0])
        if not torch.cuda.is_current_stream_capturing():
            out.copy_(a[0])
        return out

    got = timing.time_graph_trials(clock, lazy, sets, trials=5, warmup=1, keep=5, poison=True)
    assert got.eager == ""
    assert all(torch.isnan(out).all() for _, (out,) in got.kept)


@pytest.mark.gpu
def test_a_failed_capture_is_timed_eagerly_and_leaves_the_allocator_sound() -> None:
    """PyTorch's capture_end raises before it stops routing allocations to the graph's pool;
    Clock.abandon undoes it, or the judge's next empty_cache would fail an assertion."""
    clock = timing.Clock("cuda")
    sets = [[torch.randn(1024, device="cuda")] for _ in range(2)]

    def syncs(a: list) -> torch.Tensor:
        return a[0] * float(a[0].sum().item())

    got = timing.time_graph_trials(clock, syncs, sets, trials=5, warmup=1)
    assert got.eager and len(got.times) == 5, got.eager
    torch.cuda.empty_cache()  # raised an internal assertion with the capture left underway
    again = timing.time_graph_trials(clock, lambda a: a[0] + 1, sets, trials=5, warmup=1, keep=1)
    assert again.eager == "" and len(again.kept) == 1
