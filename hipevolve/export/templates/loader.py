"""Builds kernel.hip into a shared library on first use and binds its launchers.

- ROCm (a ROCm build of PyTorch): hipcc --offload-arch=<the GPU's gfx target>; ROCm's hipcc, or
  on a machine without ROCm the one hipevolve's install_amd_toolchain.sh makes (ahead of time).
- NVIDIA (a CUDA build of PyTorch): nvcc through the HIP-to-CUDA headers carried in include/,
  for the GPU's sm_XY.
Both pass -I tiles/, the tile layer's headers (hipevolve/tile.h) a kernel may include.

The library is cached by the hash of the source, the command line and the compiler's version,
under $HIPEVOLVE_KERNEL_CACHE, else $XDG_CACHE_HOME/hipevolve-kernels, else
~/.cache/hipevolve-kernels; it is published by an atomic rename, so concurrent first uses never
load half a library. Nothing compiles at import: `kernels.<name>` builds and binds on first use,
so the package imports on a machine without a GPU. To build ahead of time (or for a machine with
no GPU), run `python -m PACKAGE.loader --backend cuda --arch sm_90`.

Imports torch and the standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from .runtime import Kernels

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "kernel.hip"
INCLUDE = HERE / "include"
TILES = HERE / "tiles"
ROCM_BIN = Path("/opt/rocm/bin")
AMD_PREFIX_HIPCC = Path("/opt/hipevolve-amd/bin/hipcc")
COMPILE_TIMEOUT_S = 600


def gpu_backend() -> str:
    """rocm or cuda, by the PyTorch build and the GPU it sees."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no GPU visible to PyTorch: the kernels need a ROCm or CUDA GPU")
    return "rocm" if torch.version.hip else "cuda"


def device_arch(backend: str) -> str:
    """The current GPU's target: gfx942 and the like on ROCm, sm_90 and the like on NVIDIA."""
    import torch

    if backend == "rocm":
        return torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName.split(":")[
            0
        ]
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def find_compiler(backend: str) -> str:
    if backend == "rocm":
        # ROCm's hipcc, else the hipcc that hipevolve's scripts/install_amd_toolchain.sh makes
        # (clang with Debian's HIP headers and runtime): builds ahead of time without ROCm.
        found = shutil.which("hipcc") or next(
            (str(p) for p in (ROCM_BIN / "hipcc", AMD_PREFIX_HIPCC) if p.is_file()), None
        )
        hint = "install ROCm (hipcc)"
    else:
        found = shutil.which("nvcc")
        for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if not found and root and (Path(root) / "bin" / "nvcc").is_file():
                found = str(Path(root) / "bin" / "nvcc")
        hint = "install the CUDA toolkit (nvcc) or set CUDA_HOME"
    if not found or not Path(found).is_file():
        raise RuntimeError(f"no {'hipcc' if backend == 'rocm' else 'nvcc'} found: {hint}")
    return found


def command(backend: str, arch: str, compiler: str, source: Path, output: Path) -> list[str]:
    """The compile command: the same flags hipevolve's verifier built and measured with."""
    if backend == "rocm":
        return [
            compiler,
            "-x",
            "hip",
            "-shared",
            "-fPIC",
            "-O3",
            "-std=c++17",
            f"--offload-arch={arch}",
            f"-I{TILES}",
            str(source),
            "-o",
            str(output),
        ]
    if backend != "cuda":
        raise ValueError(f"unknown backend {backend!r}: rocm or cuda")
    digits = arch.removeprefix("sm_")
    return [
        compiler,
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
        f"-gencode=arch=compute_{digits},code={arch}",
        f"-I{INCLUDE}",
        f"-I{TILES}",
        "-D__HIP_PLATFORM_NVIDIA__",
        "-o",
        str(output),
        str(source),
    ]


def cache_root() -> Path:
    if os.environ.get("HIPEVOLVE_KERNEL_CACHE"):
        return Path(os.environ["HIPEVOLVE_KERNEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hipevolve-kernels"


def _version(compiler: str) -> str:
    try:
        run = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return run.stdout


def build_library(
    backend: str | None = None, arch: str | None = None, cache_dir: Path | None = None
) -> Path:
    """The compiled library for this GPU (or for `backend` and `arch`), compiling if needed."""
    backend = backend or gpu_backend()
    arch = arch or device_arch(backend)
    compiler = find_compiler(backend)
    source = SOURCE.read_text()
    key_parts = [source, " ".join(command(backend, arch, "CC", Path("k"), Path("o")))]
    key_parts += [_version(compiler)]
    if backend == "cuda":
        key_parts += [p.read_text() for p in sorted(INCLUDE.rglob("*.h"))]
    key_parts += [p.read_text() for p in sorted(TILES.rglob("*.h"))]
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:32]
    root = cache_dir or cache_root()
    target = root / f"{key}-{backend}-{arch}.so"
    if target.exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build-", dir=root) as tmp:
        output = Path(tmp) / "lib.so"
        # The source is compiled where it lies so that messages name kernel.hip's own lines.
        run = subprocess.run(
            command(backend, arch, compiler, SOURCE, output),
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT_S,
            cwd=tmp,
        )
        if run.returncode != 0 or not output.exists():
            raise RuntimeError(f"compiling {SOURCE} failed:\n{run.stdout}{run.stderr}")
        os.replace(output, target)  # atomic publish
    return target


class LazyKernels(Kernels):
    """hipevolve's launcher table, built and bound on the first launcher looked up."""

    def __init__(self) -> None:
        super().__init__()
        self._loading = threading.Lock()

    def load(self, library: Path | None = None) -> None:
        """Binds `library`, or the one build_library makes for the current GPU."""
        with self._loading:
            if self._lib is None or library is not None:
                self.bind(library or build_library(), SOURCE.read_text())

    def __getattr__(self, name: str):  # noqa: ANN204 (a Launcher)
        if name.startswith("_"):
            raise AttributeError(name)
        if self._lib is None:
            self.load()
        return super().__getattr__(name)


kernels = LazyKernels()


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the kernel library ahead of time.")
    parser.add_argument("--backend", choices=("rocm", "cuda"), help="default: this machine's GPU")
    parser.add_argument("--arch", help="gfx942, sm_90, ... (default: this machine's GPU)")
    parser.add_argument("--cache-dir", type=Path, help="default: " + str(cache_root()))
    args = parser.parse_args()
    print(build_library(args.backend, args.arch, args.cache_dir))


if __name__ == "__main__":
    main()
