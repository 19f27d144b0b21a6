"""The built-in task library: every task loads, its small case runs on a CPU, and its metadata
(rooflines, families) is complete and consistent with its reference."""

from __future__ import annotations

import time

import pytest
import torch

from hipevolve.core.reference import as_outputs, build_model, load_module, run_case
from hipevolve.core.taskspec import TaskSpec
from hipevolve.problems import BUILTIN_DIR, discover

TASKS: dict[str, TaskSpec] = discover()
NAMES = sorted(TASKS)

# The starter suite (this folder's own tasks, besides gated_delta_net*): their rooflines count
# exactly the bytes of inputs, parameters, buffers and outputs, which the test below recomputes.
STARTER = (
    "softmax",
    "gelu",
    "silu_and_mul",
    "layernorm",
    "rmsnorm",
    "fused_add_rmsnorm",
    "cross_entropy",
    "log_softmax",
    "gemm_bf16",
    "gemm_bias_gelu",
    "linear_residual_rmsnorm",
    "causal_sdpa_gqa",
    "conv2d",
    "rotary_embedding",
    "moe_topk_softmax",
)
FAMILIES = {"elementwise", "reduction", "matmul", "fusion", "attention", "conv", "other"}
KNOWN_FAMILIES = FAMILIES | {"recurrence"}
CPU_SECONDS = 2.0


def _small_outputs(task: TaskSpec, seed: int) -> list[torch.Tensor]:
    case = task.small_cases[0]
    return run_case(task.reference, case.init, case.inputs, "cpu", seed)


def test_library_has_at_least_sixteen_tasks_including_the_starter_suite():
    assert len(TASKS) >= 14
    missing = [n for n in STARTER if n not in TASKS]
    assert not missing, f"starter tasks not discovered: {missing}"
    assert len(TASKS) >= 16 or not (BUILTIN_DIR / "gated_delta_net").is_dir()


@pytest.mark.parametrize("name", ["gated_delta_net", "gated_delta_net_decode"])
def test_gated_delta_net_tasks_are_in_the_library(name: str):
    if not (BUILTIN_DIR / name / "task.toml").is_file():
        pytest.skip(f"problems/{name}/ is not written yet")
    assert name in TASKS


@pytest.mark.parametrize("name", NAMES)
def test_task_has_a_small_untimed_case(name: str):
    task = TASKS[name]
    assert task.small_cases, f"{name} has no small case"
    assert all(not c.timed for c in task.small_cases), f"{name}: a small case is timed"
    assert task.timed_cases, f"{name} has no timed case"


@pytest.mark.parametrize("name", NAMES)
def test_every_timed_case_has_a_roofline(name: str):
    task = TASKS[name]
    missing = [c.name for c in task.timed_cases if c.roofline is None]
    assert not missing, f"{name}: timed cases without a roofline: {missing}"


def test_families_cover_every_kind_of_operator():
    families = {t.family for t in TASKS.values()}
    assert families >= FAMILIES, f"families not covered: {FAMILIES - families}"
    unknown = {t.name: t.family for t in TASKS.values() if t.family not in KNOWN_FAMILIES}
    assert not unknown, f"unknown families: {unknown}"


@pytest.mark.parametrize("name", NAMES)
def test_small_case_runs_on_cpu_within_two_seconds(name: str):
    task = TASKS[name]
    load_module(task.reference)  # the import is paid once per process, not per case
    # CPU time of one thread, not wall time: other processes on a loaded machine do not count.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = time.process_time()
        _small_outputs(task, seed=0)
        elapsed = time.process_time() - start
    finally:
        torch.set_num_threads(threads)
    assert elapsed < CPU_SECONDS, f"{name}: small case took {elapsed:.2f} s on the CPU"


@pytest.mark.parametrize("name", NAMES)
def test_small_case_outputs_are_finite(name: str):
    for i, out in enumerate(_small_outputs(TASKS[name], seed=0)):
        if out.is_floating_point():
            assert torch.isfinite(out).all(), f"{name}: output {i} has NaN or Inf"


@pytest.mark.parametrize("name", NAMES)
def test_small_case_is_deterministic_for_a_seed(name: str):
    first = _small_outputs(TASKS[name], seed=3)
    second = _small_outputs(TASKS[name], seed=3)
    assert len(first) == len(second)
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        assert torch.equal(a, b), f"{name}: output {i} differs between two runs of seed 3"


@pytest.mark.parametrize("name", NAMES)
def test_small_case_depends_on_the_seed(name: str):
    a = _small_outputs(TASKS[name], seed=0)
    b = _small_outputs(TASKS[name], seed=1)
    same = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if torch.equal(x, y)]
    assert len(same) < len(a), f"{name}: seeds 0 and 1 give identical outputs"
    assert not same, f"{name}: outputs {same} do not depend on the seed"


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _compulsory_bytes(task: TaskSpec, init: dict, inputs: dict) -> int:
    """Bytes of every input, parameter, buffer and output once, found on the meta device (no
    memory, no compute), so the full-size timed cases are checked too."""
    module = load_module(task.reference)
    with torch.device("meta"):
        model = build_model(module, init, "meta")
        args = list(module.get_inputs(**inputs))
        with torch.no_grad():
            outputs = as_outputs(model(*args))
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    tensors += list(model.parameters()) + list(model.buffers()) + outputs
    return sum(_nbytes(t) for t in tensors)


@pytest.mark.parametrize("name", [n for n in STARTER if n in TASKS])
def test_starter_rooflines_count_each_input_and_output_once(name: str):
    task = TASKS[name]
    wrong = {}
    for case in task.cases:
        assert case.roofline is not None, f"{name}/{case.name} has no roofline"
        expected = _compulsory_bytes(task, case.init, case.inputs)
        if case.roofline.bytes != expected:
            wrong[case.name] = (case.roofline.bytes, expected)
    assert not wrong, f"{name}: roofline bytes (toml, computed): {wrong}"


@pytest.mark.parametrize("name", [n for n in STARTER if n in TASKS])
def test_bare_get_inputs_and_get_init_inputs_use_defaults(name: str):
    # Defaults are full-size shapes: built on the meta device so nothing is allocated.
    module = load_module(TASKS[name].reference)
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        args = module.get_inputs()
        with torch.no_grad():
            assert as_outputs(model(*args))
