"""Which backend runs candidates here, and the compiler command for it.

- cuda: HIP source through the project's HIP-to-CUDA header layer, compiled by nvcc.
- rocm: hipcc with the offload target read from the device (ROCm's amdgpu-arch, else PyTorch).
- static: no GPU run; the AMD device compile and its analysis only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from functools import cache
from pathlib import Path

from hipevolve.core.errors import UserError
from hipevolve.verifier.build.compile import Compiler

ROCM_BIN = Path("/opt/rocm/bin")


def _run(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def tool_version(tool: str, read: Callable[[str], str]) -> str:
    """`read(tool)`, the compiler's version text: part of every compile cache key, so asked
    for every candidate. It runs once per process while the binary stays the same file (size
    and modification time): an upgrade mid-run is read again, a subprocess per candidate is
    not paid (it held every batch's first GPU job back)."""
    stat = os.stat(tool)
    return _tool_version(tool, (stat.st_size, stat.st_mtime_ns), read)


@cache
def _tool_version(tool: str, stamp: tuple[int, int], read: Callable[[str], str]) -> str:
    return read(tool)


def _version_text(tool: str) -> str:
    return _run([tool, "--version"])


def gpu_backend() -> str | None:
    """rocm or cuda when PyTorch sees a GPU, else None."""
    import torch

    if not torch.cuda.is_available():
        return None
    return "rocm" if torch.version.hip else "cuda"


def resolve_backend(requested: str) -> str:
    """auto -> rocm or cuda when a GPU is visible, else static; an unusable request is an error."""
    found = gpu_backend()
    if requested == "auto":
        if found:
            return found
        from hipevolve.verifier.build.amd_static import find_toolchain

        if find_toolchain() is None:
            raise UserError(
                "no GPU and no AMD static toolchain here: nothing can verify",
                "run `evolve doctor` for what to install",
            )
        return "static"
    if requested in ("cuda", "rocm") and found != requested:
        raise UserError(
            f"backend {requested} needs a {requested.upper()} GPU; found {found or 'no GPU'}",
            "use --backend auto, or run `evolve doctor`",
        )
    return requested


@cache
def _cuda_arch() -> str:
    out = _run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]).split()
    if out:
        return "sm_" + out[0].replace(".", "")
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


@cache
def _rocm_arch() -> str:
    for tool in (shutil.which("amdgpu-arch"), ROCM_BIN.parent / "llvm/bin/amdgpu-arch"):
        if tool and Path(tool).exists():
            out = _run([str(tool)]).split()
            if out:
                return out[0]
    import torch

    return torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]


@cache
def device_name(backend: str) -> str:
    """The GPU a backend runs on, for the records; creates no device context."""
    if backend == "cuda":
        out = _run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).splitlines()
        return out[0].strip() if out else "an NVIDIA GPU"
    if backend == "rocm":
        return f"an AMD GPU ({_rocm_arch()})"
    return "no GPU"


def _layer_digest() -> str:
    """The project's headers (HIP-on-NVIDIA layer, tile layer): part of the compile cache key."""
    from hipevolve.verifier.build.includes import project_headers

    h = hashlib.sha256()
    for header in project_headers():
        h.update(header.read_bytes())
    return h.hexdigest()[:16]


def rocm_command(hipcc: str, targets: tuple[str, ...]) -> list[str]:
    """The rocm backend's compile and link of kernel.hip into lib.so, host launchers and device
    code for each of `targets` (the GPU's own on a ROCm machine; gfx942, gfx90a... in CI)."""
    from hipevolve.verifier.build.tile_headers import tile_include_dir

    arches = [f"--offload-arch={t}" for t in targets]
    return [
        hipcc,
        "-x",
        "hip",
        "-shared",
        "-fPIC",
        "-O3",
        "-std=c++17",
        *arches,
        f"-I{tile_include_dir()}",
        "kernel.hip",
        "-o",
        "lib.so",
    ]


def compiler_for(backend: str) -> Compiler:
    if backend == "cuda":
        from hipevolve.verifier.build.nvidia import find_nvcc, nvcc_command, nvcc_version

        nvcc = find_nvcc()
        if nvcc is None:
            raise UserError(
                "nvcc not found: the cuda backend compiles with it",
                "install the CUDA toolkit, or run `evolve doctor`",
            )
        argv = nvcc_command(
            nvcc, Path("kernel.hip"), Path("lib.so"), arch=_cuda_arch(), report=True
        )
        return Compiler(
            name="cuda",
            argv=tuple(argv),
            toolchain=f"{tool_version(nvcc, nvcc_version)} layer {_layer_digest()}",
        )
    if backend == "rocm":
        from hipevolve.verifier.build.rocm_build import find_hipcc

        hipcc = find_hipcc()
        if hipcc is None:
            raise UserError(
                "hipcc not found: the rocm backend compiles with it",
                "install ROCm, or run `evolve doctor`",
            )
        return Compiler(
            name="rocm",
            argv=tuple(rocm_command(hipcc, (_rocm_arch(),))),
            toolchain=f"{tool_version(hipcc, _version_text)} tiles {_layer_digest()}",
        )
    raise ValueError(f"backend {backend} has no run-time compiler")
