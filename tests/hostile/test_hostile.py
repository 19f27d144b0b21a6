"""Every dynamic attack in tests/hostile/dyn_*.py is caught with its expected status, and a
healthy candidate evaluated right after it still scores ok (FAULTS.md's rule).

CPU path: python candidates (KernelBench format, plain PyTorch) against the softmax task's
small case, 3 seeds, 10 trials; each evaluation is a fresh judge + sandbox (~2.5 s here).
GPU-marked attacks (native kernels) are at the bottom. What an attack can reach of the host
(secrets, files, notes and kernel objects, sockets) is tests/hostile/test_host_reach.py's.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hipevolve.core.evaluation import Status
from hipevolve.problems import get_task
from hipevolve.verifier.gpu.job import CandidateJob, CaseJob, Timeouts, WorkerJob
from hipevolve.verifier.gpu.judge.worker import REUSABLE
from hipevolve.verifier.isolate import StandbyPool, WorkerResult, run_worker

HERE = Path(__file__).resolve().parent
HEALTHY = HERE.parent / "data" / "candidates" / "softmax_ok.py"
CHECK_TIMEOUT = 5.0
LOAD_TIMEOUT = 20.0


def cpu_job(candidate: Path, **fields) -> WorkerJob:
    task = get_task("softmax")
    case = CaseJob(name="small", inputs={"rows": 64, "cols": 1024, "dtype": "float32"}, timed=True)
    defaults = dict(
        device="cpu",
        cases=(case,),
        seeds=(0, 1, 2),
        trials=10,
        warmup=2,
        timeouts=Timeouts(startup=60, load=LOAD_TIMEOUT, check=CHECK_TIMEOUT, timing=30),
    )
    defaults |= fields
    return WorkerJob(
        task=task.name,
        reference=task.reference,
        tolerance=task.tolerance.model_dump(),
        candidate=CandidateJob(format="kernelbench", model=candidate),
        **defaults,
    )


def evaluate(name: str, **fields) -> WorkerResult:
    return run_worker(cpu_job(HERE / f"{name}.py", **fields))


def assert_gone(pid: int | None) -> None:
    """Not running and not a zombie: /proc has no entry at all."""
    assert pid is not None
    deadline = time.monotonic() + 2
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}"), f"pid {pid} still exists"


def assert_healthy_next() -> None:
    result = run_worker(cpu_job(HEALTHY))
    assert result.status is Status.ok, result.message
    assert result.cases[0].time_us and result.cases[0].ref_time_us


# Attacks whose trick is state kept by the forward's Python across calls (a call counter, a cache
# of answers or of buffers): a KernelBench file runs only in its recorder, once per case, and every
# judged call replays that honest forward (record_kb.py, replay_kb.py), so the trick never runs
# where it is judged: ok, its outputs checked like any candidate's, is the right verdict.
REPLAYED = (Status.ok, "")

# name -> (status, a phrase the message must contain)
SIMPLE = {
    "dyn_exit_early": (Status.runtime_error, "crash"),
    "dyn_segfault": (Status.runtime_error, "SIGSEGV"),
    "dyn_abort": (Status.runtime_error, "SIGABRT"),
    "dyn_fork_bomb": (Status.runtime_error, "Operation not permitted"),
    "dyn_wrong_shape": (Status.incorrect, "shape"),
    "dyn_wrong_dtype": (Status.incorrect, "dtype float16"),
    "dyn_noncontiguous": (Status.incorrect, "strides"),
    "dyn_nan_output": (Status.incorrect, "wrong values"),
    "dyn_return_input": (Status.incorrect, "shares memory with input"),
    "dyn_mutate_input": (Status.incorrect, "input 0 was modified"),
    "dyn_empty_reuse": (Status.incorrect, "wrong values"),
    "dyn_timed_window_replay": REPLAYED,
    "dyn_output_reuse": REPLAYED,
    "dyn_replay_first_answer": REPLAYED,
    "dyn_lazy_subclass": (Status.hacked, "not a plain torch.Tensor"),
    "dyn_public_seed": (Status.rejected, "reads a tensor's value on the host"),
    "dyn_thread_after_return": (Status.incorrect, "wrong values"),
    "dyn_warmup_detect": REPLAYED,
    "dyn_fd_forge": (Status.hacked, "garbage on the result channel"),
    "dyn_atexit": (Status.ok, ""),
}


@pytest.mark.parametrize("name", sorted(SIMPLE))
def test_attack_is_caught_and_next_candidate_is_healthy(name: str) -> None:
    status, phrase = SIMPLE[name]
    result = evaluate(name)
    assert result.status is status, f"{result.status}: {result.message}"
    assert phrase in result.message + result.mismatch, result.message
    assert "forged" not in result.message
    if (status, phrase) == REPLAYED:
        assert any(f.startswith("plan:kb-executor") for f in result.flags), result.flags
    assert_gone(result.sandbox_pid)
    assert_healthy_next()


def test_a_judge_reused_after_each_attack_it_survives_scores_the_next_candidate_ok() -> None:
    """Judges serve again after ok, incorrect and suspect (worker.REUSABLE): whatever those
    attacks did must not reach the next candidate evaluated by the same judge."""
    survivable = sorted(n for n, (status, _) in SIMPLE.items() if status.value in REUSABLE)
    assert len(survivable) >= 10
    with StandbyPool(size=0, device="cpu") as pool:  # no spare judge: the same one every time
        for name in survivable:
            attack = run_worker(cpu_job(HERE / f"{name}.py"), pool.take(), pool=pool)
            assert attack.status is SIMPLE[name][0] and attack.reusable, attack.message
            healthy = run_worker(cpu_job(HEALTHY), pool.take(), pool=pool)
            assert healthy.status is Status.ok, f"after {name}: {healthy.message}"
            assert healthy.judge_pid == attack.judge_pid


def test_a_python_write_past_the_input_lands_in_the_recorder_only() -> None:
    """dyn_oob_write's ctypes write runs where the file runs: the recorder, whose heap it may
    corrupt (a crash there, never in the sandbox); the judged calls replay an honest forward."""
    result = evaluate("dyn_oob_write")
    if result.status is Status.ok:
        assert any(f.startswith("plan:kb-executor") for f in result.flags), result.flags
    else:
        assert result.status is Status.runtime_error, result.message
        assert "crash" in result.message and "stage record" in result.message, result.message
    assert_gone(result.sandbox_pid)
    assert_healthy_next()


def test_nan_output_mismatch_names_the_nan() -> None:
    result = evaluate("dyn_nan_output")
    assert "NaN/Inf where the reference is finite" in result.mismatch
    assert "(0, 0)" in result.mismatch


def test_infinite_loop_is_killed_within_timeout_and_leaves_no_zombie() -> None:
    result = evaluate("dyn_infinite_loop")
    assert result.status is Status.timeout, result.message
    # The forward runs in the recorder (record_kb.py), under the load stage's timeout.
    assert "stage record" in result.message
    assert result.seconds["record"] <= LOAD_TIMEOUT + 2.0
    assert_gone(result.sandbox_pid)
    assert_gone(result.judge_pid)
    assert_healthy_next()


def test_gigabyte_on_stdout_is_truncated_without_blocking() -> None:
    t0 = time.monotonic()
    result = evaluate("dyn_gigabyte_stdout")
    assert result.status is Status.ok, result.message
    assert time.monotonic() - t0 < 30
    assert_healthy_next()


def test_patched_timers_do_not_change_the_reported_time() -> None:
    result = evaluate("dyn_patch_timers")
    assert result.status is Status.ok, result.message
    case = result.cases[0]
    # the forward computes for 2 ms or more; the honest time, whatever the patched timers say
    assert 1500 < case.time_us < 200000, case.time_us
    assert len(case.trials) == 10 and min(case.trials) > 1500
    assert_healthy_next()


# --- GPU attacks: native candidates (kernel.hip + model.py), compiled by the project's backend -----
GPU_CASE = CaseJob(name="bf16_8k", inputs={"rows": 8192, "cols": 4096, "dtype": "bfloat16"})
HEALTHY_NATIVE = HERE.parent / "data" / "candidates" / "healthy_native_softmax"
GPU_CHECK_TIMEOUT = 20.0  # 6 checked calls of 64 MB outputs


def gpu_job(folder: Path, tmp_path: Path, **fields) -> WorkerJob:
    from hipevolve.verifier.build.backends import compiler_for, gpu_backend
    from hipevolve.verifier.build.compile import build

    source = (folder / "kernel.hip").read_text()
    built = build(source, compiler_for(gpu_backend()), tmp_path / "build-cache")
    assert built.ok, built.log
    task = get_task("softmax")
    defaults = dict(
        device="cuda",
        cases=(GPU_CASE,),
        seeds=(0, 1, 2),
        trials=30,
        warmup=5,
        timeouts=Timeouts(startup=120, load=60, check=GPU_CHECK_TIMEOUT, timing=60),
    )
    defaults |= fields
    candidate = CandidateJob(
        format="native",
        model=folder / "model.py",
        library=built.library,
        source=folder / "kernel.hip",
    )
    return WorkerJob(
        task=task.name,
        reference=task.reference,
        tolerance=task.tolerance.model_dump(),
        candidate=candidate,
        **defaults,
    )


def assert_healthy_native_next(tmp_path: Path) -> WorkerResult:
    result = run_worker(gpu_job(HEALTHY_NATIVE, tmp_path))
    assert result.status is Status.ok, result.message
    return result


GPU_ATTACKS = {
    "dyn_gpu_illegal_address": (Status.runtime_error, "illegal"),
    "dyn_gpu_lds_overflow": (Status.incorrect, "wrong values"),
    "dyn_gpu_oob_write": (Status.incorrect, "out-of-bounds write"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_ATTACKS))
def test_gpu_attack_is_caught_and_next_candidate_is_healthy(name: str, tmp_path: Path) -> None:
    status, phrase = GPU_ATTACKS[name]
    result = run_worker(gpu_job(HERE / name, tmp_path))
    assert result.status is status, f"{result.status}: {result.message}"
    assert phrase in result.message.lower() + result.mismatch.lower(), result.message
    assert_gone(result.sandbox_pid)
    assert_healthy_native_next(tmp_path)


@pytest.mark.gpu
def test_gpu_outputs_reach_the_judge_by_ipc_not_through_the_pipe(tmp_path: Path) -> None:
    result = assert_healthy_native_next(tmp_path)
    assert "outputs:ipc" in result.flags, result.flags


@pytest.mark.gpu
def test_gpu_forged_ipc_handle_never_passes(tmp_path: Path) -> None:
    result = evaluate("dyn_ipc_forged_handle", device="cuda")
    # The file's patch of ipc.share runs only in its recorder (record_kb.py): the executor shares
    # its own outputs by IPC, so the forged handle never reaches the judge and the honest
    # forward's outputs are what is checked.
    assert result.status is Status.ok, f"{result.status}: {result.message}"
    assert "outputs:ipc" in result.flags, result.flags
    assert any(f.startswith("plan:kb-executor") for f in result.flags), result.flags
    assert_gone(result.sandbox_pid)
    assert_healthy_native_next(tmp_path)


@pytest.mark.gpu
def test_gpu_kernel_hang_is_killed_within_timeout(tmp_path: Path) -> None:
    result = run_worker(gpu_job(HERE / "dyn_gpu_hang", tmp_path))
    assert result.status is Status.timeout, result.message
    assert "stage check" in result.message
    assert result.seconds["check"] <= GPU_CHECK_TIMEOUT + 2.0
    assert_gone(result.sandbox_pid)
    assert_gone(result.judge_pid)
    assert_healthy_native_next(tmp_path)


@pytest.mark.gpu
def test_gpu_a_side_stream_from_model_py_is_replaced_by_the_executors_own(tmp_path: Path) -> None:
    # model.py hands the launcher a stream of its own: the plan records a stream argument, and
    # the executor passes its own stream there, so the kernel is timed where it runs.
    big = CaseJob(name="bf16_64k", inputs={"rows": 65536, "cols": 4096, "dtype": "bfloat16"})
    slow = Timeouts(startup=120, load=60, check=120, timing=120)  # 512 MB outputs per call
    result = run_worker(
        gpu_job(HERE / "dyn_gpu_side_stream", tmp_path, cases=(big,), timeouts=slow)
    )
    assert result.status is Status.ok, result.message
    assert not result.hacks and not result.window_only, result.hacks
    assert_healthy_native_next(tmp_path)


@pytest.mark.gpu
def test_gpu_a_launcher_working_on_its_own_stream_is_hacked_and_hacked_again(
    tmp_path: Path,
) -> None:
    from hipevolve.core.candidate import load_candidate
    from hipevolve.core.config import VerifierSettings
    from hipevolve.core.taskspec import Case
    from hipevolve.verifier.build.backends import compiler_for, gpu_backend
    from hipevolve.verifier.build.compile import build
    from hipevolve.verifier.isolate import StandbyPool
    from hipevolve.verifier.pipeline import Prepared, run_prepared

    folder = HERE / "dyn_gpu_side_stream_cxx"
    built = build((folder / "kernel.hip").read_text(), compiler_for("cuda"), tmp_path / "cache")
    assert built.ok and gpu_backend() == "cuda", built.log
    big = Case(name="bf16_64k", inputs={"rows": 65536, "cols": 4096, "dtype": "bfloat16"})
    # Straight to the GPU stage: the static screen already refuses this candidate's stream (the
    # library check does not: nvcc links the stream calls in from cudart, they are no imports).
    prepared = Prepared(candidate=load_candidate(folder), library=built.library)
    with StandbyPool(size=1, device="cuda") as judges:
        ev = run_prepared(prepared, get_task("softmax"), VerifierSettings(), "cuda", judges,
                          cases=(big,))  # fmt: skip
    assert ev.status is Status.hacked, ev.message
    assert "outside the timed stream" in ev.message
    assert any(f.startswith("run again: the first run was hacked") for f in ev.flags), ev.flags


@pytest.mark.gpu
def test_gpu_standby_judge_has_its_context_ready(tmp_path: Path) -> None:
    from hipevolve.verifier.isolate import StandbyPool

    job = gpu_job(HEALTHY_NATIVE, tmp_path)
    with StandbyPool(size=1, device="cuda") as pool:
        judge = pool.take()
        time.sleep(15)  # the previous evaluation, during which torch and the context come up
        result = run_worker(job, standby=judge)
    assert result.status is Status.ok, result.message
    assert result.seconds["start"] < 1.0  # the sandbox was up before the job arrived


# --- GPU attacks on the launch-plan executor (verifier/gpu/sandbox/executor.py) -------------------
PLAN_ATTACKS = {
    # honest for the first calls (the checks), then skips the kernel: timed calls are checked
    "dyn_plan_call_counter": ("behaviour changed in timed calls",),
    # skips the kernel on an input address it has seen: addresses are shifted and outputs
    # poisoned, so a checked call, or a checked timed or interleaved call, gets the stale answer:
    # whichever the random draw of checked calls reaches first
    "dyn_plan_address_cache": ("wrong values", "behaviour changed in timed calls"),
    # precomputes the answer from the random state at build time: the recorder has no seed, and
    # its buffer is no parameter of the task's Model
    "dyn_plan_rng_inputs": ("answer",),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(PLAN_ATTACKS))
def test_gpu_plan_attack_never_scores_ok_and_next_candidate_is_healthy(
    name: str, tmp_path: Path
) -> None:
    result = run_worker(gpu_job(HERE / name, tmp_path))
    assert result.status is not Status.ok, result.cases
    said = (result.message + result.mismatch).lower()
    assert any(reason in said for reason in PLAN_ATTACKS[name]), (
        f"{result.status}: {result.message} {result.mismatch}"
    )
    assert_gone(result.sandbox_pid)
    assert_healthy_native_next(tmp_path)


@pytest.mark.gpu
def test_gpu_model_py_reaching_the_harness_only_changes_its_recorder(tmp_path: Path) -> None:
    """dyn_plan_reach_harness patches the timer, the input builder and any job its stack frames
    hold, from model.py: in a recorder, so its trials are real and all of them are taken."""
    job = gpu_job(HERE / "dyn_plan_reach_harness", tmp_path)
    result = run_worker(job)
    assert result.status is Status.ok, result.message
    assert "plan:executor" in result.flags, result.flags
    (case,) = result.cases
    assert len(case.trials) == job.trials  # no job of the executor's was cut to one trial
    assert min(case.trials) > 5.0  # 64 MB read and written: no 1 us trial was forged
