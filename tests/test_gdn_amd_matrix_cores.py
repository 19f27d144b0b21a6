"""The GDN prefill seed's AMD path on MFMA (hipevolve/tile.h), proven without an AMD GPU.

The seed compiled as AMD's code path (__HIP_PLATFORM_AMD__, MATRIX_CORES 1) runs on CPU threads
in wave64 with v_mfma_f32_16x16x16bf16_1k emulated from its documented lane layout
(tests/gemm_emulation.py) and must match the task's reference as the fp32 vector path does;
compiled for gfx942 it must use MFMA without spilling at every value of its AMD tunables.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from gdn_cpu_threads import CPU_HIP_RUNTIME, CPU_SMS, launcher
from gdn_seed_support import GDN, PREFILL_SEED, rel_rms, source_of, with_define
from gemm_emulation import EMULATED_MFMA
from test_lowering import CPU_FP16

from hipevolve.verifier.build.amd_static import analyze, find_toolchain
from hipevolve.verifier.build.tile_headers import tile_include_dir

TOOLCHAIN = find_toolchain()


def amd_cpu_library(source: str, folder: Path) -> ctypes.CDLL:
    """The AMD path of `source` on CPU threads (clang++: the tile layer uses clang's vector
    types), wave64, the MFMA builtin emulated."""
    clang = shutil.which("clang++-19") or shutil.which("clang++")
    if clang is None:
        pytest.skip("no clang++ for the MFMA path on CPU threads")
    (folder / "hip").mkdir(parents=True, exist_ok=True)
    (folder / "hip" / "hip_runtime.h").write_text(CPU_HIP_RUNTIME)
    (folder / "hip" / "hip_fp16.h").write_text(CPU_FP16)
    (folder / "kernel.cpp").write_text("#define __HIP_PLATFORM_AMD__ 1\n" + EMULATED_MFMA + source)
    argv = [clang, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w",
            "-DCPU_WARP=64", f"-DCPU_SMS={CPU_SMS}", f"-I{folder}", f"-I{tile_include_dir()}",
            "kernel.cpp", "-o", "lib.so"]  # fmt: skip
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return ctypes.CDLL(str(folder / "lib.so"))


def amd_source(**defines: int) -> str:
    source = source_of(PREFILL_SEED)
    for name, value in defines.items():
        source = with_define(source, name, value)
    return source


# (BV, MFMA_KSTEP, AMD_STATE_BF16) -> the largest relative RMS errors (o, state) allowed: the
# fp32 operands (0) and their hi + lo bf16 terms (2, measured 5.1e-5 on o and 2.5e-6 on the
# state) at the vector path's bounds (its CPU test's); one bf16 term (1, measured 2.4e-3 and
# 1.7e-3) inside the task's 5e-3.
AMD_RUNS = [((16, 16, 0), (1e-4, 1e-5)), ((32, 32, 0), (1e-4, 1e-5)), ((64, 64, 0), (1e-4, 1e-5)),
            ((16, 32, 1), (3.5e-3, 3e-3)), ((32, 32, 1), (3.5e-3, 3e-3)), ((64, 16, 1), (3.5e-3, 3e-3)),
            ((32, 32, 2), (1e-4, 1e-5)), ((64, 64, 2), (1e-4, 1e-5))]  # fmt: skip


def _run_id(value: tuple) -> str:
    return "BV{}-KSTEP{}-STATE_BF16_{}".format(*value) if len(value) == 3 else "bounds"


@pytest.mark.parametrize("config, bounds", AMD_RUNS, ids=_run_id)
def test_prefill_amd_mfma_path_matches_reference_on_cpu_threads(config, bounds, tmp_path):
    bv, kstep, state_bf16 = config
    source = amd_source(BV=bv, MATRIX_CORES=1, MFMA_KSTEP=kstep, AMD_STATE_BF16=state_bf16)
    run = launcher(amd_cpu_library(source, tmp_path), "gdn_chunk_fwd", 9, 4)
    for b, t, h, hv in [(1, 100, 1, 2)]:  # GVA with a padded chunk
        torch.manual_seed(t)
        inputs = GDN.get_inputs(B=b, T=t, H=h, HV=hv, initial_state="random")
        o = torch.full((b, t, hv, 128), float("nan"), dtype=torch.bfloat16)
        ht = torch.full((b, hv, 128, 128), float("nan"))
        assert run(*(x.data_ptr() for x in (*inputs, o, ht)), None, b, t, h, hv, None) == 0
        want_o, want_h = GDN.Model()(*inputs)
        assert rel_rms(o, want_o) < bounds[0]
        assert rel_rms(ht, want_h) < bounds[1]


def test_prefill_amd_mfma_path_runs_packed_sequences_each_from_its_own_state(tmp_path):
    run = launcher(amd_cpu_library(amd_source(MATRIX_CORES=1), tmp_path), "gdn_chunk_fwd_varlen",
                    10, 4)  # fmt: skip
    lengths = [65, 1, 64, 40]
    t, n = sum(lengths), len(lengths)
    torch.manual_seed(11)
    inputs = GDN.get_inputs(B=1, T=t, H=1, HV=2, initial_state="random",
                            seqlens=",".join(map(str, lengths)))  # fmt: skip
    q, k, v, g, beta, h0, cu = inputs
    o = torch.full((1, t, 2, 128), float("nan"), dtype=torch.bfloat16)
    ht = torch.full((n, 2, 128, 128), float("nan"))
    assert run(*(x.data_ptr() for x in (q, k, v, g, beta, h0, cu, o, ht)), None, n, t, 1, 2,
               None) == 0  # fmt: skip
    want_o, want_h = GDN.Model()(*inputs)
    assert rel_rms(o, want_o) < 1e-4  # the default (AMD_STATE_BF16 2) at the vector path's bounds
    assert all(rel_rms(ht[i], want_h[i]) < 1e-5 for i in range(n))


@pytest.mark.skipif(TOOLCHAIN is None or "gfx942" not in TOOLCHAIN.targets,
                    reason="no gfx942 device compiler")  # fmt: skip
@pytest.mark.parametrize("bv, kstep, state_bf16", [(16, 16, 0), (32, 32, 0), (64, 64, 0),
                                                  (64, 16, 0), (16, 64, 1), (64, 64, 2)])  # fmt: skip
def test_prefill_amd_path_uses_mfma_without_spills_on_gfx942(bv, kstep, state_bf16, tmp_path):
    source = amd_source(BV=bv, MATRIX_CORES=1, MFMA_KSTEP=kstep, AMD_STATE_BF16=state_bf16)
    # The fused kernel in its three modes (plain, the CP summary's c and M halves:
    # gdn_chunk_kernel<0..2>), beside the CP plan, fixup and final-state kernels (no MFMA;
    # tests/test_gdn_context_parallel.py).
    facts = analyze(source, "gfx942", tmp_path)
    fused = [f for f in facts if "gdn_chunk_kernel<" in f.kernel]
    assert len(fused) == 3, [f.kernel for f in facts]
    for f in fused:
        assert f.mfma > 0 and f.spills == 0 and f.scratch_bytes == 0, f
    assert all(f.spills == 0 and f.scratch_bytes == 0 for f in facts), facts


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_amd_only_tunables_leave_the_nvidia_code_byte_identical(tmp_path):
    """The NVIDIA tensor-core kernels are untouched by the AMD path: its tunables at other
    values give the same sm_90 cubin (no -lineinfo: line numbers are not code)."""
    from hipevolve.verifier.build.nvidia import include_dir

    cubins = []
    for i, defines in enumerate([{}, {"MFMA_KSTEP": 16, "AMD_STATE_BF16": 0}]):
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / "kernel.hip").write_text(amd_source(**defines))
        argv = ["nvcc", "-x", "cu", "-cubin", "-O3", "-std=c++17", "--expt-relaxed-constexpr",
                "-gencode=arch=compute_90,code=sm_90", f"-I{include_dir()}",
                f"-I{tile_include_dir()}", "-D__HIP_PLATFORM_NVIDIA__", "-o", "k.cubin",
                "kernel.hip"]  # fmt: skip
        done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        cubins.append((folder / "k.cubin").read_bytes())
    assert cubins[0] == cubins[1]
