"""The tile layer (verifier/build/tiles/hipevolve/tile.h) reaches every backend's compile.

A candidate writes `#include <hipevolve/tile.h>`; that must pass the static screen and the
compiler's dependency check and compile on each path a kernel takes: the static gfx942 analysis
(clang device-only), the cuda backend (nvcc through the HIP-on-NVIDIA layer), the rocm backend
(hipcc, host and device, linked) and an exported package's own loader (nvcc and hipcc, run where
hipevolve is not importable). The kernel is tests/data/tile_gemm.hip: a GEMM on the layer.
On a GPU: the same GEMM against torch's matmul (mma.sync on NVIDIA, MFMA on AMD).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from hipevolve.verifier.build.amd_static import analyze, find_toolchain
from hipevolve.verifier.build.backends import rocm_command
from hipevolve.verifier.build.compile import Compiler, build
from hipevolve.verifier.build.includes import system_roots
from hipevolve.verifier.build.nvidia import find_nvcc, nvcc_command
from hipevolve.verifier.build.rocm_build import find_hipcc, inspect_library
from hipevolve.verifier.build.tile_headers import tile_include_dir

GEMM = (Path(__file__).parent / "data" / "tile_gemm.hip").read_text()
TOOLCHAIN = find_toolchain()
needs_gfx942 = pytest.mark.skipif(
    TOOLCHAIN is None or "gfx942" not in TOOLCHAIN.targets, reason="no gfx942 device compiler"
)
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc not installed")
needs_hipcc = pytest.mark.skipif(
    find_hipcc() is None or TOOLCHAIN is None, reason="no hipcc (scripts/install_amd_toolchain.sh)"
)


def test_tile_headers_lie_in_an_allowed_header_folder():
    assert (tile_include_dir() / "hipevolve" / "tile.h").is_file()
    assert (tile_include_dir() / "hipevolve" / "tile_layout.h").is_file()
    assert tile_include_dir() in system_roots()


def test_static_screen_accepts_the_tile_header_and_still_refuses_other_project_paths():
    from hipevolve.core.candidate import Candidate
    from hipevolve.verifier.screen.screening import screen

    def screened(source: str):
        return screen(
            Candidate(
                format="native",
                name="tile_gemm",
                hip_source=source,
                python_source="class ModelNew: pass\n",
            )
        )

    flags = screened(GEMM).flags
    assert not any("include" in str(f) for f in flags), flags
    other = screened("#include <hipevolve/../secret.h>\n" + GEMM)
    assert any("parent paths" in str(f) for f in other.flags), other.flags


@needs_gfx942
def test_static_gfx942_compile_of_a_tile_gemm_uses_mfma_without_spills(tmp_path):
    (facts,) = analyze(GEMM, "gfx942", tmp_path)
    assert facts.kernel.startswith("tile_gemm")
    assert facts.mfma >= 8  # two k-steps of 32 over four 16-column atoms per wave
    assert facts.spills == 0 and facts.scratch_bytes == 0
    assert facts.occupancy >= 4 and facts.lds_bytes == 8192


@needs_nvcc
def test_cuda_backend_builds_a_tile_gemm_through_its_include_check(tmp_path):
    nvcc = Compiler(name="cuda", toolchain="nvcc (test)",
                    argv=tuple(nvcc_command(find_nvcc(), Path("kernel.hip"), Path("lib.so"))))  # fmt: skip
    result = build(GEMM, nvcc, tmp_path / "cache", timeout_s=300)
    assert result.ok, result.log


@needs_hipcc
def test_rocm_backend_builds_and_links_a_tile_gemm_for_gfx942(tmp_path):
    compiler = Compiler(name="rocm", toolchain="hipcc (test)",
                        argv=tuple(rocm_command(find_hipcc(), ("gfx942",))))  # fmt: skip
    result = build(GEMM, compiler, tmp_path / "cache", timeout_s=600)
    assert result.ok, result.log
    lib = inspect_library(result.library, TOOLCHAIN.objdump, tmp_path)
    assert lib.targets == ("gfx942",)
    assert [k.readable.split("(")[0] for k in lib.code_objects[0].kernels] == ["tile_gemm"]


@pytest.mark.parametrize("backend, arch", [("cuda", "sm_90"), ("rocm", "gfx942")])
def test_exported_loader_builds_a_tile_kernel_with_the_headers_it_carries(backend, arch, tmp_path):
    if (find_nvcc() if backend == "cuda" else find_hipcc()) is None:
        pytest.skip(f"no compiler for {backend}")
    from test_export import PACKAGE, TASK_NAME, export_package, standin_run, without_hipevolve

    out = tmp_path / "kernel"
    export_package(standin_run(tmp_path), TASK_NAME, out)
    (out / PACKAGE / "kernel.hip").write_text(GEMM)
    code = f"""
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from {PACKAGE} import loader

print(loader.build_library({backend!r}, {arch!r}, cache_dir=Path(sys.argv[2])))
"""
    done = without_hipevolve(code, str(out), str(tmp_path / "cache"), cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    library = Path(done.stdout.split()[-1])
    assert library.is_file()
    if backend == "cuda":
        assert b"tile_gemm_launch" in library.read_bytes()
    else:
        assert inspect_library(library, TOOLCHAIN.objdump, tmp_path).targets == ("gfx942",)


@pytest.mark.gpu
def test_tile_gemm_matches_torch_matmul_on_the_gpu(tmp_path):
    import torch

    from hipevolve.verifier.build.backends import compiler_for, gpu_backend

    backend = gpu_backend()
    if backend is None:
        pytest.skip("no GPU")
    result = build(GEMM, compiler_for(backend), tmp_path / "cache", timeout_s=600)
    assert result.ok, result.log
    lib = ctypes.CDLL(str(result.library))
    gen = torch.Generator().manual_seed(0)
    for m, n, k in [(64, 64, 32), (128, 192, 256)]:
        a = torch.randn(m, k, generator=gen).bfloat16().cuda()
        b = torch.randn(k, n, generator=gen).bfloat16().cuda()
        c = torch.full((m, n), float("nan"), device="cuda")
        err = lib.tile_gemm_launch(ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()),
                                   ctypes.c_void_p(c.data_ptr()), m, n, k, None)  # fmt: skip
        torch.cuda.synchronize()
        assert err == 0
        want = a.double() @ b.double()
        torch.testing.assert_close(c.double(), want, rtol=1e-4, atol=1e-3)  # fp32 sums
