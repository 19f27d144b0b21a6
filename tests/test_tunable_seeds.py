"""The tunable seed kernels of softmax, rmsnorm and silu_and_mul (problems/<task>/seeds/tunable).

Each seed declares a space of 360 to 1,440 configurations (block size, vector width, rows per
block or tile width, unroll, row sets per block, the exp precision path) and must be correct at
every one of them, with warps of 32 (NVIDIA)
and 64 (CDNA) lanes; the search space is exactly that grid (no catalogue transform leads out).

Without a GPU:
- the declared space, the task.toml entries, and the catalogue transforms at every configuration;
- the verifier's static screen passes each seed;
- the real kernel sources run on CPU threads through a small HIP shim (below: one OS thread per
  GPU thread, __syncthreads a barrier, shuffles exchanged through memory) at a sample of
  configurations, both warp widths, on shapes that take the vector path and the scalar one,
  against the task's reference within its tolerance;
- a sample of 8 configurations per task compiles with nvcc through the HIP-to-CUDA layer
  (verifier.build, as the pipeline builds) and for gfx942 with the static toolchain (amd_static),
  without spills.
With a GPU (marked): a sample of 64 configurations per task compiles for the GPU's backend (and
for gfx942 where the static toolchain exists), and a handful per task are `ok` through
verifier.pipeline.evaluate_many (tests/test_seed_spaces.py builds a larger sample on the CPU).
"""

from __future__ import annotations

import functools
import importlib.util
import random
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.reference import build_inputs, build_model, load_module
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.offline.transforms import CATALOGUE
from hipevolve.evolution.offline.tunables import (
    Configuration,
    configuration_key,
    configurations,
    current_configuration,
    parse_tunables,
    space_size,
    with_values,
)
from hipevolve.problems import get_task
from hipevolve.runtime import Kernels

TASKS = ("softmax", "rmsnorm", "silu_and_mul")
SAMPLE = 8  # configurations per task compiled in the CPU-only tests


@functools.cache
def seed_of(name: str) -> tuple[TaskSpec, Candidate]:
    task = get_task(name)
    return task, load_candidate(task.reference.parent / "seeds" / "tunable")


@functools.cache
def space(name: str) -> tuple[Configuration, ...]:
    return tuple(configurations(parse_tunables(seed_of(name)[1].hip_source)))


def source_at(name: str, config: Configuration) -> str:
    return with_values(seed_of(name)[1].hip_source, config)


def sample(name: str, k: int = SAMPLE) -> list[Configuration]:
    """The seed's own configuration, the two corners of the grid, and random others (fixed)."""
    every = space(name)
    current = current_configuration(parse_tunables(seed_of(name)[1].hip_source))
    chosen = [current, every[0], every[-1]]
    rest = [c for c in every if c not in chosen]
    return chosen + random.Random(name).sample(rest, k - len(chosen))


# ----------------------------------------------------------------------------- the space


@pytest.mark.parametrize("name", TASKS)
def test_task_declares_its_tunable_seed(name):
    task, seed = seed_of(name)
    assert task.seeds == (task.reference.parent / "seeds" / "tunable",)
    assert seed.format == "native" and "from hipevolve.runtime import kernels" in seed.python_source


@pytest.mark.parametrize("name", TASKS)
def test_seed_space_holds_360_to_1440_configurations_of_the_declared_kinds(name):
    tunables = parse_tunables(seed_of(name)[1].hip_source)
    assert 360 <= space_size(tunables) <= 1440
    assert {"BLOCK", "VEC", "UNROLL", "ROWS"} <= {t.name for t in tunables}
    assert {t.name for t in tunables} <= {"BLOCK", "VEC", "UNROLL", "ROWS", "LOOPS", "FAST_EXP"}
    assert {t.name: t.values for t in tunables}["VEC"] == ("1", "2", "4", "8")


@pytest.mark.parametrize("name", TASKS)
def test_no_catalogue_transform_leads_out_of_the_tunable_grid(name):
    """At 64 sampled configurations, each transform either does not apply or only moves
    tunables (widen_vector / narrow_vector): the search space is exactly the declared grid."""
    keys = {configuration_key(c) for c in space(name)}
    for config in sample(name, 64):
        source = source_at(name, config)
        for transform in CATALOGUE:
            out = transform.apply(source)
            if out is None:
                continue
            moved = current_configuration(parse_tunables(out))
            assert configuration_key(moved) in keys, (transform.name, config)
            assert with_values(out, config) == source, (transform.name, config)


@pytest.mark.parametrize("name", TASKS)
def test_seed_passes_the_verifier_static_screen(name):
    from hipevolve.verifier.screen.screening import screen

    screening = screen(seed_of(name)[1])
    assert screening.passed and not screening.warnings, screening.flags


@pytest.mark.parametrize("name", TASKS)
def test_model_refuses_cpu_tensors_before_any_launch(name):
    task = seed_of(name)[0]
    module = import_model(name)
    reference = load_module(task.reference)
    case = task.small_cases[0]
    model = build_model_new(module, reference, case.init)
    with pytest.raises(ValueError, match="GPU"):
        model(*build_inputs(reference, case.inputs, "cpu", 0))


def import_model(name: str):
    """The seed's model.py under a private module name (it imports hipevolve.runtime only)."""
    path = seed_of(name)[0].seeds[0] / "model.py"
    spec = importlib.util.spec_from_file_location(f"tunable_seed_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_model_new(module, reference, init: dict):
    """ModelNew built the way the sandbox builds it: seed 0, the reference's init arguments."""
    torch.manual_seed(0)
    return module.ModelNew(*reference.get_init_inputs(**init))


@pytest.mark.parametrize(
    "name,bad,match",
    [
        ("softmax", torch.zeros(4, 8, dtype=torch.float16), "float32 or bfloat16"),
        ("rmsnorm", torch.zeros(4, 1024), "bfloat16"),
        ("rmsnorm", torch.zeros(4, 512, dtype=torch.bfloat16), "hidden = 1024"),
        ("silu_and_mul", torch.zeros(4, 8), "bfloat16"),
        ("silu_and_mul", torch.zeros(4, 7, dtype=torch.bfloat16), "even"),
    ],
)
def test_model_refuses_inputs_the_kernel_was_not_written_for(name, bad, match):
    task = seed_of(name)[0]
    model = build_model_new(import_model(name), load_module(task.reference), task.cases[0].init)
    with pytest.raises(ValueError, match=match):
        model(bad)


def test_rmsnorm_model_draws_the_reference_weight():
    task = seed_of("rmsnorm")[0]
    reference = load_module(task.reference)
    for case in task.cases:
        mine = build_model_new(import_model("rmsnorm"), reference, case.init)
        theirs = build_model(reference, case.init, "cpu", 0)
        assert torch.equal(mine.weight, theirs.weight), case.name


# ----------------------------------------------------------------------------- CPU threads

# Enough of HIP to run the seeds on CPU threads: one std::thread per GPU thread, blocks one after
# another, __syncthreads a std::barrier, shuffles exchanged through memory between two barriers
# (right because every thread of the block shuffles together, as in the seeds). warpSize is
# CPU_WARP. The kernels' own code, indexing and barriers run unchanged. The shim's state is
# `static`: g++ makes `inline` variables (and a template's static locals, unless -fno-gnu-unique)
# process-wide STB_GNU_UNIQUE symbols, so two libraries loaded at once would share them.
CPU_HIP_RUNTIME = r"""
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define HIP_KERNEL_NAME(...) __VA_ARGS__
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
struct cpu_index { unsigned x, y, z; };
static thread_local cpu_index threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static int warpSize = CPU_WARP;
typedef int hipError_t;
typedef void* hipStream_t;
constexpr hipError_t hipSuccess = 0;
inline hipError_t hipGetLastError() { return hipSuccess; }
inline float __uint_as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float __expf(float x) { return std::exp(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static std::barrier<>* cpu_barrier;
static std::vector<float> cpu_exchange;
inline void __syncthreads() { cpu_barrier->arrive_and_wait(); }
inline float __shfl_xor(float value, int mask, int width) {
    const unsigned t = threadIdx.x;
    cpu_exchange[t] = value;
    __syncthreads();
    const float out = cpu_exchange[t - t % width + ((t % width) ^ mask) % width];
    __syncthreads();
    return out;
}
template <class F> void cpu_launch(dim3 grid, dim3 block, F body) {
    blockDim = block;
    gridDim = grid;
    const unsigned n = block.x * block.y * block.z;
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                std::barrier<> bar(n);
                cpu_barrier = &bar;
                cpu_exchange.assign(n, std::numeric_limits<float>::quiet_NaN());
                std::vector<std::thread> threads;
                for (unsigned i = 0; i < n; ++i)
                    threads.emplace_back([&, i] {
                        threadIdx = {i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
                        blockIdx = {x, y, z};
                        body();
                    });
                for (auto& th : threads) th.join();
            }
}
#define hipLaunchKernelGGL(kernel, grid, block, lds, stream, ...) \
    cpu_launch((grid), (block), [=] { kernel(__VA_ARGS__); })
"""

# Small shapes per task: the first takes the vector path at every VEC, the second is not a
# multiple of 2 (the scalar path); row counts leave the last block of ROWS rows part-empty.
CPU_SHAPES = {
    "softmax": [
        {"rows": 5, "cols": 1000, "dtype": "float32"},
        {"rows": 3, "cols": 1001, "dtype": "bfloat16"},
        {"rows": 7, "cols": 4096, "dtype": "bfloat16"},
    ],
    "rmsnorm": [
        {"init": {"hidden": 1000}, "inputs": {"tokens": 5, "hidden": 1000}},
        {"init": {"hidden": 333}, "inputs": {"tokens": 3, "hidden": 333}},
    ],
    "silu_and_mul": [
        {"tokens": 5, "d": 1000},
        {"tokens": 3, "d": 333},
    ],
}


def cpu_library(source: str, folder: Path, warp: int) -> Path:
    """kernel.hip built by g++ against the CPU shim."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    (folder / "hip").mkdir(parents=True, exist_ok=True)
    (folder / "hip" / "hip_runtime.h").write_text(CPU_HIP_RUNTIME)
    (folder / "kernel.cpp").write_text(source)
    # -fno-gnu-unique: a template kernel's __shared__ (static) arrays stay this library's own.
    argv = [gxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-fno-gnu-unique"]
    argv += ["-Wno-unknown-pragmas"]
    argv += [f"-DCPU_WARP={warp}", f"-I{folder}", "kernel.cpp", "-o", "lib.so"]
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "lib.so"


def run_on_cpu(name: str, kernels: Kernels, shape: dict, seed: int) -> None:
    """One small case through the CPU-built kernel (launchers called as model.py calls them, the
    stream passed as null), checked against the task's reference within its tolerance."""
    task = get_task(name)
    reference = load_module(task.reference)
    init, inputs = shape.get("init", {}), shape.get("inputs", shape)
    model = build_model(reference, init, "cpu", seed)
    args = build_inputs(reference, inputs, "cpu", seed)
    x = args[0]
    with torch.no_grad():
        want = model(*args)
    got = torch.full_like(want, float("nan"))
    if name == "softmax":
        launcher = kernels.softmax_f32 if x.dtype == torch.float32 else kernels.softmax_bf16
        launcher(x, got, x.shape[0], x.shape[1], None)
    elif name == "rmsnorm":
        weight = model.weight.detach()
        kernels.rmsnorm_bf16(x, weight, got, x.shape[0], x.shape[1], model.eps, None)
    else:
        kernels.silu_and_mul_bf16(x, got, x.shape[0], x.shape[1] // 2, None)
    atol, rtol = task.tolerance.for_dtype(str(want.dtype).removeprefix("torch."))
    torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol, equal_nan=False)


def check_on_cpu_threads(name: str, config: Configuration, folder: Path, warp: int) -> None:
    source = source_at(name, config)
    kernels = Kernels()
    kernels.bind(cpu_library(source, folder, warp), source)
    for i, shape in enumerate(CPU_SHAPES[name]):
        run_on_cpu(name, kernels, shape, seed=i)


def cpu_configurations(name: str, warp: int) -> list[Configuration]:
    """Three sampled configurations per warp width (different ones for 32 and 64), and the
    narrowest row groups (BLOCK 64 over the most ROWS), which shuffle below the warp width."""
    picked = sample(name, k=6)
    narrow = {"BLOCK": "64", "ROWS": max(space_values(name, "ROWS"), key=int)}
    narrowest = next(c for c in space(name) if narrow.items() <= c.items())
    return (picked[:3] if warp == 32 else picked[3:]) + [narrowest]


def space_values(name: str, tunable: str) -> tuple[str, ...]:
    return {t.name: t.values for t in parse_tunables(seed_of(name)[1].hip_source)}[tunable]


@pytest.mark.parametrize("warp", [32, 64])
@pytest.mark.parametrize("name", TASKS)
def test_seed_matches_the_reference_on_cpu_threads_at_sampled_configurations(name, warp, tmp_path):
    for i, config in enumerate(cpu_configurations(name, warp)):
        check_on_cpu_threads(name, config, tmp_path / str(i), warp)


# ----------------------------------------------------------------------------- compiles


def nvcc_compiler():
    nvidia_layer = pytest.importorskip("hipevolve.verifier.build.nvidia")
    from hipevolve.verifier.build.compile import Compiler

    nvcc = nvidia_layer.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    argv = nvidia_layer.nvcc_command(nvcc, Path("kernel.hip"), Path("lib.so"), arch="sm_90")
    return Compiler(name="cuda", argv=tuple(argv), toolchain=nvidia_layer.nvcc_version(nvcc))


def assert_all_compile(sources: dict[str, str], compiler, cache: Path) -> None:
    from hipevolve.verifier.build.compile import build_many

    results = build_many(list(sources.values()), compiler, cache)
    failed = {label: r.log for label, r in zip(sources, results, strict=True) if not r.ok}
    assert not failed, failed


def assert_gfx942_clean(sources: dict[str, str], cache: Path) -> None:
    """Through the pipeline's static stage (cached, one thread per core): compiles, no spills,
    no scratch, LDS within 64 KiB."""
    from hipevolve.verifier.build.amd_static import find_toolchain
    from hipevolve.verifier.static_facts import static_analysis

    toolchain = find_toolchain()
    if toolchain is None or "gfx942" not in toolchain.targets:
        pytest.skip("no AMD static toolchain for gfx942 (scripts/install_amd_toolchain.sh)")
    settings = VerifierSettings(cache_dir=cache, amd_targets=("gfx942",))
    with ThreadPoolExecutor() as pool:
        results = dict(zip(sources, pool.map(lambda s: static_analysis(s, settings),
                                             sources.values()), strict=True))  # fmt: skip
    for label, result in results.items():
        assert not result.error and result.facts, f"{label}: {result.error or result.note}"
        for f in result.facts:
            assert f.spills == 0 and f.scratch_bytes == 0, f"{label}: {f}"
            assert f.lds_bytes <= 65536, f"{label}: {f.lds_bytes} bytes of LDS"


def sampled_sources() -> dict[str, str]:
    return {
        f"{name}@{configuration_key(c)}": source_at(name, c) for name in TASKS for c in sample(name)
    }


def every_source() -> dict[str, str]:
    """64 configurations per task (the spaces hold up to 1,440: building all takes hours)."""
    return {
        f"{name}@{configuration_key(c)}": source_at(name, c)
        for name in TASKS
        for c in sample(name, 64)
    }


def test_sampled_configurations_compile_with_nvcc_through_the_hip_layer(tmp_path):
    assert_all_compile(sampled_sources(), nvcc_compiler(), tmp_path)


@pytest.mark.amd_static
def test_sampled_configurations_compile_for_gfx942_without_spills(tmp_path):
    assert_gfx942_clean(sampled_sources(), tmp_path)


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_64_configurations_per_task_compile_for_the_gpu_backend(tmp_path):
    from hipevolve.verifier.build.backends import compiler_for, gpu_backend

    assert_all_compile(every_source(), compiler_for(gpu_backend()), tmp_path)


@pytest.mark.gpu
@pytest.mark.amd_static
def test_64_configurations_per_task_compile_for_gfx942_without_spills(tmp_path):
    assert_gfx942_clean(every_source(), tmp_path)


GPU_SAMPLE = 4  # configurations per task through the whole pipeline


@pytest.mark.gpu
@pytest.mark.parametrize("name", TASKS)
def test_sampled_configurations_are_ok_through_the_verifier_pipeline(name, tmp_path):
    from hipevolve.verifier.build.backends import gpu_backend
    from hipevolve.verifier.pipeline import evaluate_many

    task, seed = seed_of(name)
    chosen = sample(name, k=GPU_SAMPLE)
    candidates = [
        seed.model_copy(
            update={"hip_source": source_at(name, c), "name": configuration_key(c), "origin": None}
        )
        for c in chosen
    ]
    settings = VerifierSettings(cache_dir=tmp_path, trials=10)
    for config, evaluation in zip(
        chosen, evaluate_many(candidates, task, settings, gpu_backend()), strict=True
    ):
        assert evaluation.ok, (configuration_key(config), evaluation.status, evaluation.message,
                               evaluation.mismatch, evaluation.compile_log)  # fmt: skip
        assert evaluation.fitness > 0
