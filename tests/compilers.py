"""The two run-time compilers as the backends build them, for tests that compile without a GPU:
nvcc for sm_90 (skipped where nvcc or the HIP-to-CUDA layer is missing) and hipcc for gfx942
(scripts/install_amd_toolchain.sh; a failure under CI=true, where setup.sh installs it)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from hipevolve.verifier.build.compile import Compiler


@functools.cache
def nvcc_sm90() -> Compiler | None:
    """The cuda backend's compiler for sm_90, or None where it cannot run here."""
    from hipevolve.verifier.build import nvidia

    nvcc = nvidia.find_nvcc()
    if nvcc is None or not (nvidia.include_dir() / "hip" / "hip_runtime.h").exists():
        return None
    argv = nvidia.nvcc_command(nvcc, Path("kernel.hip"), Path("lib.so"), arch="sm_90", report=True)
    return Compiler(name="cuda", argv=tuple(argv), toolchain=nvidia.nvcc_version(nvcc))


def nvcc_sm90_or_skip() -> Compiler:
    compiler = nvcc_sm90()
    if compiler is None:
        pytest.skip("nvcc or the HIP-to-CUDA layer is missing")
    return compiler


def hipcc_gfx942() -> Compiler:
    """The rocm backend's compiler for gfx942; skips (fails under CI=true) without it."""
    from hipevolve.verifier.build.amd_static import find_toolchain
    from hipevolve.verifier.build.backends import rocm_command
    from hipevolve.verifier.build.rocm_build import find_hipcc

    tc, hipcc = find_toolchain(), find_hipcc()
    if tc is None or hipcc is None or "gfx942" not in tc.targets:
        message = "no hipcc for gfx942: run scripts/install_amd_toolchain.sh"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI ran setup.sh, which should have installed it)")
        pytest.skip(message)
    argv = rocm_command(hipcc, ("gfx942",))
    return Compiler(name="rocm", argv=tuple(argv), toolchain="hipcc gfx942")
