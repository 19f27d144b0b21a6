"""The offline translator's lowering (agents/lowering/lower.py): PyTorch reference -> native candidate.

Without a GPU:
- which built-in tasks and test tasks (tests/data/lowering/) lower, and the one-line reason for
  those that do not;
- each lowered candidate passes the verifier's static screen and declares its tunables;
- every lowered candidate compiles with nvcc through the HIP-to-CUDA layer, and for gfx942
  without spills (amd_static);
- the lowered kernel and model.py compute the reference on CPU threads (the HIP shim of
  test_tunable_seeds: one OS thread per GPU thread), at warps of 32 and 64 lanes and at
  configurations with rows shorter than a warp, on shapes that take the vector and scalar paths;
- a seedless task starts offline from its lowered candidate.
With a GPU (marked): each lowered candidate is `ok` through verifier.pipeline.evaluate_many.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from hipevolve.agents.lowering.lower import Unlowered, lower
from hipevolve.core.candidate import Candidate
from hipevolve.core.reference import build_inputs, build_model, load_module
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.offline.tunables import parse_tunables, with_values
from hipevolve.problems import get_task, load_task_folder
from hipevolve.runtime import Kernels

DATA = Path(__file__).parent / "data" / "lowering"
BUILTIN = ("gelu", "silu_and_mul", "softmax", "log_softmax", "layernorm", "rmsnorm",
           "fused_add_rmsnorm")  # fmt: skip
TEST_TASKS = ("l1_bias_relu", "l1_row_sum", "l1_row_max", "l2_scale_tanh_clamp", "l2_center_gelu")
NOT_LOWERED = {"cross_entropy": "nll_loss_forward"}  # GEMM tasks: test_lowering_gemm.py

_TASKS: dict[str, TaskSpec] = {}
_LOWERED: dict[str, Candidate | Unlowered] = {}


def task_named(name: str) -> TaskSpec:
    if name not in _TASKS:
        folder = DATA / name
        _TASKS[name] = load_task_folder(folder, "user") if folder.is_dir() else get_task(name)
    return _TASKS[name]


def lowered(name: str) -> Candidate | Unlowered:
    if name not in _LOWERED:
        _LOWERED[name] = lower(task_named(name))
    return _LOWERED[name]


LOWERS = BUILTIN + TEST_TASKS


@pytest.mark.parametrize("name", LOWERS)
def test_task_lowers_to_a_native_candidate_that_passes_the_static_screen(name):
    from hipevolve.verifier.screen.screening import screen

    got = lowered(name)
    assert isinstance(got, Candidate), got
    assert got.format == "native" and "from hipevolve.runtime import kernels" in got.python_source
    screening = screen(got)
    assert screening.passed and not screening.warnings, screening.flags


@pytest.mark.parametrize("name", LOWERS)
def test_lowered_candidate_declares_block_and_vector_tunables(name):
    tunables = {t.name: t.values for t in parse_tunables(lowered(name).hip_source)}
    assert tunables["BLOCK"] == ("64", "128", "256", "512", "1024")
    assert tunables["VEC"] == ("1", "2", "4", "8")
    assert ("ROWS" in tunables) != ("UNROLL" in tunables)  # row kernels tune ROWS, pointwise UNROLL


@pytest.mark.parametrize("name,reason", sorted(NOT_LOWERED.items()))
def test_unsupported_graph_is_refused_in_one_line_naming_the_op(name, reason):
    got = lowered(name)
    assert isinstance(got, Unlowered) and reason in got.reason and "\n" not in got.reason


def test_cases_of_different_dtypes_get_one_launcher_each():
    source = lowered("l1_bias_relu").hip_source
    assert 'extern "C" hipError_t lowered_l1_bias_relu_v0(' in source
    assert 'extern "C" hipError_t lowered_l1_bias_relu_v1(' in source
    assert "hip/hip_fp16.h" in source


def test_model_float_attributes_are_runtime_arguments_not_constants():
    """fused_add_rmsnorm's cases use eps 1e-5 and 1e-6: one kernel, eps passed from self.eps."""
    got = lowered("fused_add_rmsnorm")
    assert got.hip_source.count('extern "C"') == 1
    assert "float(self.eps)" in got.python_source and "1e-06" not in got.hip_source


# ----------------------------------------------------------------------------- compiles


def all_lowered() -> dict[str, str]:
    return {name: lowered(name).hip_source for name in LOWERS}


def test_lowered_candidates_compile_with_nvcc_through_the_hip_layer(tmp_path):
    from test_tunable_seeds import assert_all_compile, nvcc_compiler

    assert_all_compile(all_lowered(), nvcc_compiler(), tmp_path)


def test_bf16_stores_round_with_one_cvt_on_nvidia_and_in_software_elsewhere(tmp_path):
    """l2_scale_tanh_clamp writes bf16: the sm_90 device pass rounds with cvt.rn.bf16.f32 (the
    HIP layer's hip_bf16.h), the host pass keeps the integer rounding the CPU tests check."""
    import re
    import subprocess

    nvidia_layer = pytest.importorskip("hipevolve.verifier.build.nvidia")
    nvcc = nvidia_layer.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    source = lowered("l2_scale_tanh_clamp").hip_source
    assert "#include <hip/hip_bf16.h>" in source
    (tmp_path / "kernel.hip").write_text(source)
    include = Path(nvidia_layer.__file__).parent / "hip_nvidia" / "include"
    argv = [str(nvcc), "-x", "cu", "-ptx", "-O3", "-std=c++17", "-arch=sm_90", f"-I{include}",
            "-D__HIP_PLATFORM_NVIDIA__", "kernel.hip", "-o", "kernel.ptx"]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    ptx = (tmp_path / "kernel.ptx").read_text()
    assert "cvt.rn.bf16.f32" in ptx
    assert not re.search(r"add\.s32\s+%r\d+, %r\d+, 32767;", ptx)  # the software rounding's


@pytest.mark.amd_static
def test_lowered_candidates_compile_for_gfx942_without_spills(tmp_path):
    from test_tunable_seeds import assert_gfx942_clean

    assert_gfx942_clean(all_lowered(), tmp_path)


# ----------------------------------------------------------------------------- CPU threads

# Names the CPU shim of test_tunable_seeds lacks; the lowering's kernels use them.
SHIM_EXTRAS = "#define hipErrorInvalidValue 1\n#define __logf logf\n"
# hip_bf16.h for the CPU shim: no bf16 type, so the lowered helpers keep their software rounding
# (the one the AMD pass compiles too); the NVIDIA device pass's cvt runs in the GPU tests.
CPU_BF16 = "#pragma once\n"
# hip_fp16.h for the CPU shim: g++'s _Float16 converts with round-to-nearest-even, as the GPU.
CPU_FP16 = r"""
#pragma once
#include <cstdint>
#include <cstring>
typedef _Float16 __half;
inline float __half2float(__half h) { return static_cast<float>(h); }
inline __half __float2half_rn(float f) { return static_cast<__half>(f); }
inline __half __ushort_as_half(uint16_t u) { __half h; std::memcpy(&h, &u, 2); return h; }
inline uint16_t __half_as_ushort(__half h) { uint16_t u; std::memcpy(&u, &h, 2); return u; }
"""
# (task, configuration): small blocks (CPU threads are costly), and narrow row groups (GROUP 16 < both warp widths).
CPU_RUNS = [
    ("softmax", {"BLOCK": "64"}), ("softmax", {"BLOCK": "64", "ROWS": "4", "VEC": "8"}),
    ("log_softmax", {"VEC": "2", "BLOCK": "64"}), ("layernorm", {"BLOCK": "128", "ROWS": "2"}),
    ("fused_add_rmsnorm", {"BLOCK": "64", "ROWS": "4"}), ("gelu", {"UNROLL": "2"}),
    ("silu_and_mul", {"VEC": "8"}), ("l1_bias_relu", {}), ("l1_row_sum", {"ROWS": "2"}),
    ("l1_row_max", {"BLOCK": "64", "ROWS": "4"}), ("l2_scale_tanh_clamp", {"VEC": "8"}),
    ("l2_center_gelu", {"BLOCK": "64", "ROWS": "2"}),
]  # fmt: skip


def import_model(candidate: Candidate, folder: Path):
    path = folder / "model.py"
    path.write_text(candidate.python_source)
    spec = importlib.util.spec_from_file_location(f"lowered_{folder.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("warp", [32, 64])
@pytest.mark.parametrize("name,config", CPU_RUNS, ids=[f"{n}-{i}" for i, (n, _) in
                                                        enumerate(CPU_RUNS)])  # fmt: skip
def test_lowered_candidate_matches_the_reference_on_cpu_threads(name, config, warp, tmp_path,
                                                                 monkeypatch):  # fmt: skip
    task = task_named(name)
    module = model_on_cpu_threads(lowered(name), config, warp, tmp_path, monkeypatch)
    for seed in (0, 1):
        assert_matches_reference(task, module, task.small_cases[0], seed)


def model_on_cpu_threads(candidate: Candidate, config: dict, warp: int, folder: Path,
                         monkeypatch):  # fmt: skip
    """The candidate's model.py as written, over its kernel built for CPU threads (with
    `config`): the launchers get the null stream and CPU tensors (the shim's memory is the
    host's); the model's device check is the one thing skipped."""
    from test_tunable_seeds import cpu_library

    import hipevolve.runtime as runtime

    source = SHIM_EXTRAS + with_values(candidate.hip_source, config)
    (folder / "build" / "hip").mkdir(parents=True)
    (folder / "build" / "hip" / "hip_fp16.h").write_text(CPU_FP16)
    (folder / "build" / "hip" / "hip_bf16.h").write_text(CPU_BF16)
    bound = Kernels()
    bound.bind(cpu_library(source, folder / "build", warp), source)
    monkeypatch.setattr(runtime, "kernels", bound)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: type("S", (), {"cuda_stream": 0}))
    module = import_model(candidate, folder)
    monkeypatch.setattr(module, "kernels", bound)
    ready = module._ready
    monkeypatch.setattr(module, "_ready", lambda ts: ready([_OnGpu(t) for t in ts]))
    return module


def assert_matches_reference(task: TaskSpec, module, case, seed: int) -> None:  # noqa: ANN001
    """ModelNew of `module` against the reference on `case`, both built from `seed`."""
    reference = load_module(task.reference)
    want_model = build_model(reference, case.init, "cpu", seed)
    torch.manual_seed(seed)
    mine = module.ModelNew(*reference.get_init_inputs(**case.init))
    args = build_inputs(reference, case.inputs, "cpu", seed)
    with torch.no_grad():
        want, got = want_model(*args), mine(*args)
    want = want if isinstance(want, (tuple, list)) else (want,)
    got = got if isinstance(got, (tuple, list)) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype, case.name
        atol, rtol = task.tolerance.for_dtype(str(w.dtype).removeprefix("torch."))
        torch.testing.assert_close(g.float(), w.float(), atol=atol, rtol=rtol, msg=case.name)


class _OnGpu:
    """A CPU tensor that answers is_cuda (for the model's device check only)."""

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t
        self.is_cuda = True
        self.device = t.device

    def is_contiguous(self) -> bool:
        return self.t.is_contiguous()

    def data_ptr(self) -> int:
        return self.t.data_ptr()


# ----------------------------------------------------------------------------- the search


def test_seedless_task_starts_offline_from_its_lowered_candidate(tmp_path):
    """softmax without its seeds, no model: generation 0 is the translator's lowering, compiled
    by the real nvcc (the stand-in evaluator of the agents' tests scores what builds)."""
    import shutil

    from agents_support import CompilingStandIn

    from hipevolve.app.run_job import first_candidates
    from hipevolve.archive.store import Archive
    from hipevolve.evolution.islands import EvolutionSettings
    from hipevolve.evolution.run import run_evolution

    source = get_task("softmax")
    folder = tmp_path / "softmax_seedless"
    folder.mkdir()
    shutil.copy(source.reference, folder / "reference.py")
    toml = (source.reference.parent / "task.toml").read_text().splitlines()
    kept = ['name = "softmax_seedless"'] + [t for t in toml[1:] if not t.startswith("seeds")]
    (folder / "task.toml").write_text("\n".join(kept) + "\n")
    task = load_task_folder(folder, "user")
    assert not task.seeds
    evaluate = CompilingStandIn(tmp_path / "cache", task=task.name)
    with Archive.open(tmp_path / "a.db") as archive:
        summary = run_evolution(task, archive, EvolutionSettings(islands=1), evaluate,
                                first=first_candidates(task), budget=1, seed=0)  # fmt: skip
        rows = archive.db.execute(
            "SELECT c.agent, c.generation, e.status FROM candidates c JOIN evaluations e"
            " ON e.id = c.evaluation_id WHERE c.run = ?", [summary.run]).fetchall()  # fmt: skip
    assert summary.reason == "budget", summary.message
    assert [tuple(r) for r in rows] == [("translator", 0, "ok")]
    assert evaluate.calls == [lower(task).source_hash]


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", LOWERS)
def test_lowered_candidate_is_ok_through_the_verifier_pipeline(name, tmp_path):
    from hipevolve.core.config import VerifierSettings
    from hipevolve.verifier.build.backends import gpu_backend
    from hipevolve.verifier.pipeline import evaluate_many

    settings = VerifierSettings(cache_dir=tmp_path, trials=10)
    [evaluation] = evaluate_many([lowered(name)], task_named(name), settings, gpu_backend())
    assert evaluation.ok, (evaluation.status, evaluation.message, evaluation.mismatch,
                           evaluation.compile_log)  # fmt: skip


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
