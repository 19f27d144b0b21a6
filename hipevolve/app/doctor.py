"""`evolve doctor`: what works on this machine, and the command that fixes each missing piece."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

INSTALL_AMD = "sudo bash scripts/install_amd_toolchain.sh"


class Check(BaseModel):
    name: str
    ok: bool
    detail: str
    fix: str = ""


def _gpus() -> Check:
    import torch

    build = f"torch {torch.__version__}"
    if not torch.cuda.is_available():
        return Check(
            name="GPU",
            ok=False,
            detail=f"none visible to {build}",
            fix="a ROCm or CUDA build of PyTorch and a GPU; the static backend still works",
        )
    backend = "rocm" if torch.version.hip else "cuda"
    names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return Check(name="GPU", ok=True, detail=f"{names}: backend {backend} ({build})")


def _hipcc() -> Check:
    """The rocm backend's hipcc: ROCm's on an AMD machine; elsewhere the prefix's (clang-19 with
    Debian's HIP headers and runtime), which builds and links the ROCm path but runs nothing."""
    from hipevolve.verifier.build.amd_static import HIPEVOLVE_PREFIX
    from hipevolve.verifier.build.rocm_build import find_hipcc

    hipcc = find_hipcc()
    if not hipcc:
        return Check(
            name="hipcc (rocm backend)",
            ok=False,
            detail="not found",
            fix="install ROCm on an AMD GPU machine; elsewhere "
            + INSTALL_AMD
            + " builds and links the ROCm path without running it",
        )
    out = subprocess.run([hipcc, "--version"], capture_output=True, text=True, timeout=30)
    version = next((ln for ln in out.stdout.splitlines() if "HIP version" in ln), out.stdout[:60])
    detail = f"{hipcc}: {version.strip()}"
    if not Path(hipcc).is_relative_to(HIPEVOLVE_PREFIX):
        return Check(name="hipcc (rocm backend)", ok=True, detail=detail)
    runtime = (HIPEVOLVE_PREFIX / "lib" / "libamdhip64.so").resolve()
    return Check(
        name="hipcc (rocm build and link only)",
        ok=runtime.exists(),
        detail=f"{detail}; links against {runtime}; builds gfx942/gfx90a libraries "
        "(docs/ROCM.md), runs nothing",
        fix="" if runtime.exists() else INSTALL_AMD,
    )


def _nvcc() -> Check:
    from hipevolve.verifier.build.nvidia import find_nvcc, nvcc_version

    nvcc = find_nvcc()
    if not nvcc:
        return Check(
            name="nvcc (cuda backend)",
            ok=False,
            detail="not found",
            fix="install the CUDA toolkit (NVIDIA's install guide); needed only on NVIDIA",
        )
    import torch

    found = f"{nvcc}: {nvcc_version(nvcc)}"
    if torch.version.cuda is None:  # nvcc alone builds nothing the cuda backend can load
        return Check(
            name="nvcc (cuda backend)",
            ok=False,
            detail=f"{found}, but torch {torch.__version__} is not a CUDA build",
            fix="install a CUDA build of PyTorch (PyTorch's install guide); the static "
            "backend works without it",
        )
    return Check(name="nvcc (cuda backend)", ok=True, detail=found)


def _amd_static() -> Check:
    from hipevolve.verifier.build.amd_static import find_toolchain

    tc = find_toolchain()
    if tc is None:
        return Check(name="AMD static compiler", ok=False, detail="not found", fix=INSTALL_AMD)
    targets = ", ".join(tc.targets) or "none"
    return Check(
        name="AMD static compiler",
        ok=bool(tc.targets),
        detail=f"{tc.clang} ({tc.version}); targets: {targets}",
        fix="" if tc.targets else INSTALL_AMD,
    )


CPU_SHARE = "CPU share"


def _cpu_share() -> Check:
    """The core split a run here will use: judges' cores, and where and how nicely CPU work runs
    (hipevolve/core/cpu_share.py, settings verifier.quiet_judge and the two after it)."""
    import torch

    from hipevolve.core import cpu_share
    from hipevolve.core.config import load_settings

    slots = torch.cuda.device_count() if torch.cuda.is_available() else 0
    share = cpu_share.plan(load_settings().verifier.cpu_policy(), max(1, slots))
    return Check(name=CPU_SHARE, ok=True, detail=share.describe())


def run_checks() -> list[Check]:
    checks = [Check(name="Python", ok=True, detail=platform.python_version())]
    for probe in (_gpus, _hipcc, _nvcc, _amd_static, _cpu_share):
        try:
            checks.append(probe())
        except Exception as e:  # a broken probe is a finding, not a crash of doctor
            checks.append(Check(name=probe.__name__.strip("_"), ok=False, detail=str(e)[:200]))
    return checks


def usable(checks: list[Check]) -> list[str]:
    """The pieces that work, Python and the CPU share aside: at least one backend must, for exit code 0."""
    return [c.name for c in checks if c.ok and c.name not in ("Python", CPU_SHARE)]


def exit_code(checks: list[Check]) -> int:
    """0 when at least one backend can run or analyse candidates."""
    return 0 if usable(checks) else 1


def report_json(checks: list[Check]) -> dict:
    """What `evolve doctor --json` prints."""
    return {"checks": [c.model_dump() for c in checks], "usable": usable(checks)}


def print_report(console: Console, checks: list[Check]) -> None:
    table = Table(title="evolve doctor")
    for column in ("piece", "", "found", "fix"):
        table.add_column(column, overflow="fold")
    for c in checks:
        table.add_row(
            c.name, "[green]ok[/green]" if c.ok else "[red]missing[/red]", c.detail, c.fix
        )
    console.print(table)
    found = usable(checks)
    console.print("usable: " + (", ".join(found) if found else "nothing yet"))
