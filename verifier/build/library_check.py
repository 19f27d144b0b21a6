"""Refusing a candidate library whose host code can reach the process that loads it.

A native candidate's kernel.hip is C++: besides kernels and launchers it could hold host code
that runs when the library is loaded (a static initialiser, a constructor function) or calls
into the loading process's Python (PyRun_SimpleString through an extern declaration or dlsym)
or the kernel directly (a raw syscall instruction). nvcc links cudart statically, so a healthy
library already imports dlopen, dlsym, mprotect, open and pthread_*: a fixed list of forbidden
imports cannot work. So the candidate library is compared with a baseline library built from a
minimal kernel.hip by the same compiler and flags (cached per toolchain and command line):
- an imported symbol the baseline lacks, outside a small allowlist (libm, memcpy/memset, the
  printf family, the C++ runtime's allocation and exception support, the HIP runtime's launch,
  registration and device queries), is refused;
- a call site of an imported function, counted over the host text, beyond the baseline's count
  for that function is refused (a launcher calling dlsym where only cudart did);
- an .init_array/.ctors entry beyond the baseline's (a static initialiser of the candidate's
  own, an __attribute__((constructor))) is refused;
- a `syscall`, `sysenter` or `int $0x80` instruction in host text beyond the baseline's count
  is refused.
A refusal is the verdict `hacked`, with the reason. Where the toolchain cannot build the
minimal kernel or its library cannot be read, there is nothing to compare with and the check
passes; only the run-time compilers (cuda, rocm) are checked, not a test's stand-in compiler.

Tools: binutils (readelf, objdump) through subprocess. Imports the standard library and
pydantic only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel

BASELINE_SOURCE = """\
#include <hip/hip_runtime.h>

__global__ void zero_kernel(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.0f;
}

extern "C" hipError_t zero(float* y, int n, hipStream_t stream) {
    hipLaunchKernelGGL(zero_kernel, dim3((n + 255) / 256), dim3(256), 0, stream, y, n);
    return hipGetLastError();
}
"""

_ALLOWED = re.compile(
    r"^(?:"
    # libm
    r"(?:acos|asin|atan2?|cos|sin|tan|cosh|sinh|tanh|acosh|asinh|atanh|exp|exp2|expm1|log|"
    r"log2|log10|log1p|pow|sqrt|cbrt|hypot|erf|erfc|tgamma|lgamma|ceil|floor|round|lround|"
    r"llround|rint|lrint|nearbyint|trunc|fmod|remainder|fma|fmax|fmin|fdim|frexp|ldexp|modf|"
    r"scalbn|ilogb|logb|nextafter|copysign|nan)[fl]?|"
    # memory and strings that only move bytes
    r"memcpy|memmove|memset|memcmp|__memcpy_chk|__memset_chk|__memmove_chk|strlen|"
    # the printf family (to the standard streams or a buffer)
    r"printf|puts|putchar|snprintf|sprintf|vsnprintf|vsprintf|__printf_chk|__sprintf_chk|"
    r"__snprintf_chk|__vsnprintf_chk|__vsprintf_chk|"
    # the C++ runtime: allocation, exceptions, stack protection, ending the process
    # (nvcc's host stubs of device functions call exit)
    r"_Znwm|_Znam|_ZdlPv|_ZdaPv|_ZdlPvm|_ZdaPvm|_ZnwmSt11align_val_t|_ZdlPvSt11align_val_t|"
    r"_ZdlPvmSt11align_val_t|__cxa_\w+|_Unwind_\w+|__gxx_personality_v0|__stack_chk_fail|"
    r"_ZSt\d+__throw_\w+|_ZSt9terminatev|malloc|calloc|realloc|free|abort|exit|"
    # the HIP runtime's launch, registration and device-query calls, which a ROCm build imports
    # from libamdhip64 once per kernel and launch (nvcc links cudart's statically: no imports)
    r"__hip\w+|hipLaunchKernel|hipLaunchKernelExC|hipExtLaunchKernel|hipModuleLaunchKernel|"
    r"hipGetLastError|hipPeekAtLastError|hipGetErrorString|hipGetErrorName|"
    r"hipFuncSetAttribute|hipFuncGetAttributes?|hipFuncSetCacheConfig|hipGetDevice|"
    r"hipGetDeviceCount|hipGetDeviceProperties\w*|hipDeviceGetAttribute|hipOccupancy\w+|"
    r"hipMemsetAsync|hipMemsetD\w+Async|hipMemcpyAsync|hipMemcpy2DAsync"
    r")$"
)
_SYSCALL = re.compile(r"\t(?:syscall|sysenter|int\s+\$0x80)\b")
_CALL = re.compile(r"\t(?:call|jmp)q?\s+[0-9a-f]+ <([^@>+]+)@plt>")
_TOOL_S = 60.0
_BASELINE = threading.Lock()
CHECKED = ("cuda", "rocm")  # the run-time compilers; a test's stand-in compiler is not checked


class LibraryFacts(BaseModel):
    """What the check compares, of one library."""

    imports: list[str]  # undefined dynamic symbols, without versions
    calls: dict[str, int]  # imported function -> call (or tail-jump) sites in the text
    initialisers: int  # .init_array entries plus .ctors entries
    syscalls: int  # syscall / sysenter / int $0x80 instructions


class ToolError(Exception):
    """binutils could not read the library."""


def _run(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TOOL_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolError(f"{argv[0]}: {e}") from None
    if done.returncode != 0:
        raise ToolError(f"{argv[0]} failed: {done.stderr.strip()[:200]}")
    return done.stdout


def facts(library: Path) -> LibraryFacts:
    """Reads a shared library's imports, call sites, initialisers and syscall instructions."""
    imports = set()
    for line in _run(["readelf", "-W", "--dyn-syms", str(library)]).splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[6] == "UND" and cols[7]:
            imports.add(cols[7].split("@")[0])
    initialisers = 0
    for line in _run(["readelf", "-W", "-S", str(library)]).splitlines():
        m = re.search(r"\]\s+(\.init_array|\.ctors)\s+\S+\s+\S+\s+\S+\s+([0-9a-f]+)", line)
        if m:
            initialisers += int(m.group(2), 16) // 8
    text = _run(["objdump", "-d", "--no-show-raw-insn", "-j", ".text", str(library)])
    calls = Counter(m.group(1) for m in _CALL.finditer(text))
    return LibraryFacts(
        imports=sorted(imports),
        calls=dict(sorted(calls.items())),
        initialisers=initialisers,
        syscalls=len(_SYSCALL.findall(text)),
    )


def baseline(argv: tuple[str, ...], toolchain: str, cache_dir: Path) -> LibraryFacts | None:
    """The minimal kernel's facts for this compiler and command line, built once and cached;
    None where it cannot be built or read (nothing to compare with)."""
    with _BASELINE:  # parallel first builds (build_many) wait for one baseline
        return _baseline(argv, toolchain, cache_dir)


def _baseline(argv: tuple[str, ...], toolchain: str, cache_dir: Path) -> LibraryFacts | None:
    key = hashlib.sha256(json.dumps([list(argv), toolchain, BASELINE_SOURCE]).encode()).hexdigest()
    cached = cache_dir / "library_check" / f"{key}.json"
    if cached.exists():
        data = json.loads(cached.read_text())
        return LibraryFacts.model_validate(data) if data else None
    folder = Path(tempfile.mkdtemp(prefix="baseline-"))
    try:
        (folder / "kernel.hip").write_text(BASELINE_SOURCE)
        try:
            done = subprocess.run(list(argv), cwd=folder, capture_output=True, timeout=300)
            result = facts(folder / "lib.so") if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ToolError):
            result = None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    cached.parent.mkdir(parents=True, exist_ok=True)
    partial = cached.with_suffix(f".{os.getpid()}-{threading.get_ident()}")
    partial.write_text(result.model_dump_json() if result else "null")
    partial.replace(cached)
    return result


def compare(candidate: LibraryFacts, base: LibraryFacts) -> str:
    """Why the candidate's host code is refused, or '' if it does nothing the baseline's does
    not."""
    known = set(base.imports)
    extra = [s for s in candidate.imports if s not in known and not _ALLOWED.match(s)]
    if extra:
        return f"the library imports {', '.join(extra[:5])}: host code may not reach the process"
    more_calls = [
        f"{name} ({n} call sites, the minimal kernel has {base.calls.get(name, 0)})"
        for name, n in candidate.calls.items()
        if n > base.calls.get(name, 0) and not _ALLOWED.match(name)
    ]
    if more_calls:
        return f"host code calls {', '.join(more_calls[:3])}: host code may not reach the process"
    if candidate.initialisers > base.initialisers:
        return (
            f"the library has {candidate.initialisers - base.initialisers} load-time "
            "initialiser(s) of its own (a static initialiser or constructor function)"
        )
    if candidate.syscalls > base.syscalls:
        return f"the library's host code makes {candidate.syscalls - base.syscalls} raw syscall(s)"
    return ""


def refusal(library: Path, compiler: Any, cache_dir: Path) -> str:  # noqa: ANN401
    """'' if the library `compiler` (compile.Compiler) built from a candidate may be loaded, else
    why it is `hacked`."""
    if compiler.name not in CHECKED:
        return ""
    base = baseline(compiler.argv, compiler.toolchain, cache_dir)
    if base is None:
        return ""
    try:
        theirs = facts(library)
    except ToolError as e:
        return f"the library cannot be read as a shared object ({e})"
    return compare(theirs, base)
