"""The cuda backend's compiler: HIP source built by nvcc through the project's HIP-to-CUDA headers.

The official HIP-on-NVIDIA headers shipped by Debian fail against CUDA 13, so the project carries
its own thin layer in hip_nvidia/include (what it covers: hip_nvidia/COVERAGE.md). A native
candidate's kernel.hip is built as a plain shared library, without PyTorch headers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from hipevolve.core.errors import UserError
from hipevolve.verifier.build.tile_headers import tile_include_dir

_ARCH = re.compile(r"sm_(\d+)([af]?)")
_RELEASE = re.compile(r"release\s+[\d.]+,\s+V(\d+\.\d+\.\d+)")


def include_dir() -> Path:
    """The folder to pass as -I: it holds hip/hip_runtime.h and the rest of the layer."""
    return Path(__file__).resolve().parent / "hip_nvidia" / "include"


def find_nvcc() -> str | None:
    """nvcc on PATH, else under CUDA_HOME / CUDA_PATH, else /usr/local/cuda; None if absent."""
    found = shutil.which("nvcc")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        candidate = Path(root) / "bin" / "nvcc"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def nvcc_version(nvcc: str) -> str:
    """The full version nvcc reports (for example 13.0.88): part of every compile cache key."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(
            f"cannot run {nvcc} --version: {exc}",
            "check the CUDA toolkit install, or run `evolve doctor`",
        ) from exc
    match = _RELEASE.search(out)
    if match:
        return match.group(1)
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if not lines:
        raise UserError(f"{nvcc} --version printed nothing", "check the CUDA toolkit install")
    return lines[-1]


def nvcc_command(
    nvcc: str, source: Path, output: Path, arch: str = "sm_90", report: bool = False
) -> list[str]:
    """argv that builds source (HIP) into the shared library output for one GPU architecture.

    SASS for the one architecture only (no PTX): the library runs where it was built, and one
    code object keeps the compile near a second. --expt-relaxed-constexpr lets device code call
    constexpr host functions (std::min and friends), as clang's HIP does. `report`: the
    verifier's build (backends.compiler_for, run in its build folder) also prints ptxas's
    report and keeps the PTX and the other intermediate files in the current folder
    (--resource-usage -keep), from which it reads the kernels' static facts
    (cuda_static.build_facts) at no cost to the compile.
    """
    match = _ARCH.fullmatch(arch)
    if not match:
        raise UserError(
            f"not an NVIDIA architecture: {arch!r}", "use a name like sm_90 (H100/H200) or sm_100a"
        )
    virtual = f"compute_{match.group(1)}{match.group(2)}"
    return [
        nvcc,
        "-x",
        "cu",
        "-shared",
        "-Xcompiler",
        "-fPIC",
        "-O3",
        "-std=c++17",
        "-lineinfo",
        "--expt-relaxed-constexpr",
        "-cudart",
        "static",
        f"-gencode=arch={virtual},code={arch}",
        f"-I{include_dir()}",
        f"-I{tile_include_dir()}",
        "-D__HIP_PLATFORM_NVIDIA__",
        *(("--resource-usage", "-keep") if report else ()),
        "-o",
        str(output),
        str(source),
    ]
