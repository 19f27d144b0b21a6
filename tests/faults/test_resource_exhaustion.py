"""FAULTS.md 6 (host and device out-of-memory, thread bombs), device memory freed after a killed
hang (1), the wrong-device half of 9 and the garbage-collector search of 12, through the real
judge and sandbox, like tests/hostile/test_hostile.py (whose job builders and
checks these reuse): each fault gets its recorded outcome, leaves no process behind, and a
healthy candidate evaluated next still scores ok.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HOSTILE = HERE.parent / "hostile"
sys.path.insert(0, str(HOSTILE))

from test_hostile import (  # noqa: E402
    GPU_CHECK_TIMEOUT,
    LOAD_TIMEOUT,
    assert_gone,
    assert_healthy_native_next,
    assert_healthy_next,
    cpu_job,
    gpu_job,
)

from hipevolve.core.evaluation import Status  # noqa: E402
from hipevolve.verifier.isolate import WorkerResult, run_worker  # noqa: E402


def evaluate(name: str, **fields) -> WorkerResult:
    return run_worker(cpu_job(HERE / f"{name}.py", **fields))


def test_searching_the_garbage_collector_and_frames_finds_no_expected_output() -> None:
    result = evaluate("dyn_gc_search")
    assert result.status is Status.incorrect, f"{result.status}: {result.message}"
    assert "wrong values" in result.message, result.message
    assert_healthy_next()


def test_python_memory_error_is_resource_exhaustion_and_the_next_candidate_is_healthy() -> None:
    result = evaluate("dyn_memory_error")
    assert result.status is Status.runtime_error, result.message
    assert "resource exhaustion" in result.message, result.message
    assert_gone(result.sandbox_pid)
    assert_healthy_next()


def test_host_allocator_failure_is_a_runtime_error_never_a_pass() -> None:
    result = evaluate("dyn_host_oom")
    assert result.status is Status.runtime_error, result.message
    assert "can't allocate memory" in result.message, result.message
    assert_gone(result.sandbox_pid)
    assert_healthy_next()


def test_host_allocator_failure_is_labelled_resource_exhaustion() -> None:
    assert "resource exhaustion" in evaluate("dyn_host_oom").message


def test_thread_bomb_is_bounded_and_leaves_nothing_running() -> None:
    result = evaluate("dyn_thread_bomb")
    # RLIMIT_NPROC stops it (runtime_error); root is exempt, so there the stage timeout does.
    assert result.status in (Status.runtime_error, Status.timeout), result.message
    # The forward runs in the recorder (record_kb.py), under the load stage's timeout.
    assert result.seconds["record"] <= LOAD_TIMEOUT + 2.0
    assert_gone(result.sandbox_pid)
    assert_gone(result.judge_pid)
    assert_healthy_next()


@pytest.mark.gpu
def test_device_out_of_memory_is_resource_exhaustion_and_frees_the_device(tmp_path) -> None:
    import torch

    free_before = torch.cuda.mem_get_info()[0]
    result = evaluate("dyn_host_oom", device="cuda")  # the same pebibyte, on the device
    assert result.status is Status.runtime_error, result.message
    assert "resource exhaustion" in result.message, result.message
    assert_gone(result.sandbox_pid)
    assert_gone(result.judge_pid)
    # The sandbox and judge contexts are gone with their processes: their memory is back.
    assert _device_free_bytes_back_to(free_before)
    assert_healthy_native_next(tmp_path)


@pytest.mark.gpu
def test_output_on_the_wrong_device_is_incorrect(tmp_path) -> None:
    result = evaluate("dyn_wrong_device", device="cuda")
    assert result.status is Status.incorrect, f"{result.status}: {result.message}"
    assert "on device cpu" in result.message + result.mismatch, result.message
    assert_healthy_native_next(tmp_path)


def _device_free_bytes_back_to(level: int) -> bool:
    """Whether the device's free memory returns to `level` (less a little) within 5 s: the
    driver releases a killed process's memory shortly after it is reaped."""
    import time

    import torch

    deadline = time.monotonic() + 5
    while torch.cuda.mem_get_info()[0] < level - (256 << 20):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.gpu
def test_gpu_hang_killed_at_the_timeout_gives_its_device_memory_back(tmp_path) -> None:
    import torch

    free_before = torch.cuda.mem_get_info()[0]
    result = run_worker(gpu_job(HOSTILE / "dyn_gpu_hang", tmp_path))
    assert result.status is Status.timeout, result.message
    assert result.seconds["check"] <= GPU_CHECK_TIMEOUT + 2.0
    assert_gone(result.sandbox_pid)
    assert_gone(result.judge_pid)
    assert _device_free_bytes_back_to(free_before)
    assert_healthy_native_next(tmp_path)
