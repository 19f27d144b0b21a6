"""The `static` backend: an AMD device compile for gfx90a/gfx942, with no AMD GPU needed.

A candidate's kernel.hip is compiled device-only by LLVM's HIP front end; the compiler's
`-Rpass-analysis=kernel-resource-usage` remarks give each kernel's registers, LDS, scratch, spills
and occupancy, and llvm-objdump's disassembly of the code object gives its ISA facts (MFMA use,
load widths, LDS traffic). It is stage 0 of every evaluation where the toolchain exists, and the
only AMD evidence on machines without AMD GPUs.

Toolchain search (find_toolchain), first found wins:
1. ROCm's own clang: the ROCm tree named by $ROCM_PATH (ROCm's standard variable), by
   `hipconfig --rocmpath`, or /opt/rocm; clang in <rocm>/llvm/bin or <rocm>/lib/llvm/bin.
2. /opt/hipevolve-amd, made by scripts/install_amd_toolchain.sh (Debian 12, Ubuntu 24.04):
   bin/ (links to clang-19 and its tools), include/hip, amdgcn/bitcode.
No hipevolve variable overrides this.

What a compile here protects against: a hung or exploding compiler (time limit, killed with its
process group; output, file size and memory capped by verifier.build.run_limited); the source
reading secrets into the log through `#include "/proc/self/environ"` (the compiler runs with an
empty environment). What it does not: other absolute includes (verifier.static_checks screens
#include lines), or a toolchain that differs from the target machine's ROCm (counts come from this
compiler, which may schedule and allocate differently from the ROCm version users run).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import StaticFacts
from hipevolve.verifier.build import preprocessed
from hipevolve.verifier.build.compile import (
    SOURCE_NAME,
    AnalysisCompileError,
    CommandResult,
    demangle_with,
    run_limited,
)
from hipevolve.verifier.build.includes import check_includes
from hipevolve.verifier.build.tile_headers import tile_include_dir

HIPEVOLVE_PREFIX = Path("/opt/hipevolve-amd")
KNOWN_TARGETS = ("gfx90a", "gfx942", "gfx950")
INSTALL_FIX = "run scripts/install_amd_toolchain.sh (Debian 12 or Ubuntu 24.04), or install ROCm"
_COMPILE_OUTPUT = 1 << 20
_OBJECT_BYTES = 64 << 20
_PROBE = """#include <hip/hip_runtime.h>
__global__ void probe(const float* x, float* y) { y[threadIdx.x] = expf(x[threadIdx.x]); }
"""


class AmdToolchain(BaseModel):
    """A clang that compiles HIP for AMD GPUs, with the headers and device libraries it needs."""

    model_config = ConfigDict(frozen=True)

    clang: Path
    objdump: Path = Field(description="llvm-objdump that reads AMDGPU code objects")
    cxxfilt: Path | None = Field(default=None, description="llvm-cxxfilt, to demangle kernels")
    device_libs: Path = Field(description="folder with ocml.bc and oclc_isa_version_*.bc")
    hip_prefix: Path = Field(description="passed as --rocm-path: has include/hip/hip_runtime.h")
    version: str = Field(description="clang's version line and the HIP headers' version")
    targets: tuple[str, ...] = Field(description="those of gfx90a, gfx942, gfx950 that compile")
    origin: str = Field(description="rocm or hipevolve-amd")


class AmdCompileError(AnalysisCompileError):
    """The source did not compile for the target; `log` is the compiler's output (capped)."""

    failed = "AMD device compile failed"


# --- finding the toolchain -------------------------------------------------------------------


def _rocm_roots() -> list[Path]:
    roots = [Path(os.environ["ROCM_PATH"])] if os.environ.get("ROCM_PATH") else []
    if hipconfig := shutil.which("hipconfig"):
        try:
            out = subprocess.run(
                [hipconfig, "--rocmpath"], capture_output=True, text=True, timeout=20
            )
            if out.returncode == 0 and out.stdout.strip():
                roots.append(Path(out.stdout.strip().splitlines()[-1]))
        except (OSError, subprocess.TimeoutExpired):
            pass
    roots.append(Path("/opt/rocm"))
    return list(dict.fromkeys(roots))


def _first_existing(paths: list[Path]) -> Path | None:
    return next((p for p in paths if p.exists()), None)


def _rocm_candidate(root: Path) -> dict | None:
    bin_dir = _first_existing([root / "llvm" / "bin", root / "lib" / "llvm" / "bin"])
    if bin_dir is None or not (bin_dir / "clang").exists():
        return None
    # ROCm moved the device libraries from <rocm>/amdgcn into clang's resource folder in 6.x.
    libs = [
        root / "amdgcn" / "bitcode",
        *sorted(root.glob("llvm/lib/clang/*/lib/amdgcn/bitcode")),
        *sorted(root.glob("lib/llvm/lib/clang/*/lib/amdgcn/bitcode")),
    ]
    device_libs = next((p for p in libs if (p / "ocml.bc").exists()), None)
    if device_libs is None or not (root / "include" / "hip" / "hip_runtime.h").exists():
        return None
    return {
        "clang": bin_dir / "clang",
        "objdump": bin_dir / "llvm-objdump",
        "cxxfilt": bin_dir / "llvm-cxxfilt",
        "device_libs": device_libs,
        "hip_prefix": root,
        "origin": "rocm",
    }


def _prefix_candidate(prefix: Path) -> dict | None:
    parts = {
        "clang": prefix / "bin" / "clang",
        "objdump": prefix / "bin" / "llvm-objdump",
        "cxxfilt": prefix / "bin" / "llvm-cxxfilt",
        "device_libs": prefix / "amdgcn" / "bitcode",
        "hip_prefix": prefix,
        "origin": "hipevolve-amd",
    }
    needed = [
        parts["clang"],
        parts["objdump"],
        parts["device_libs"] / "ocml.bc",
        prefix / "include" / "hip" / "hip_runtime.h",
    ]
    return parts if all(p.exists() for p in needed) else None


def _version(clang: Path, hip_prefix: Path) -> str:
    out = subprocess.run([str(clang), "--version"], capture_output=True, text=True, timeout=30)
    clang_line = out.stdout.splitlines()[0].strip() if out.stdout else "clang (unknown version)"
    header = hip_prefix / "include" / "hip" / "hip_version.h"
    text = header.read_text(errors="replace") if header.exists() else ""
    parts = [
        re.search(rf"#define\s+HIP_VERSION_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")
    ]
    hip = ".".join(m.group(1) for m in parts if m) or "unknown"
    return f"{clang_line}; HIP headers {hip}"


def _compiles(parts: dict, target: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="hipevolve-amd-probe-") as tmp:
        work = Path(tmp)
        (work / SOURCE_NAME).write_text(_PROBE)
        tc = AmdToolchain(version="", targets=(), **parts)
        cmd = device_compile_command(tc, Path(SOURCE_NAME), Path("probe.co"), target)
        result = _run(cmd, work, timeout_s=120, max_output=1 << 16)
        return result.returncode == 0 and (work / "probe.co").exists()


@functools.cache
def find_toolchain() -> AmdToolchain | None:
    """The AMD device toolchain here (ROCm first, then /opt/hipevolve-amd), or None.

    Probes which of gfx90a, gfx942 and gfx950 actually compile (about a second, once per process).
    """
    found = [c for c in map(_rocm_candidate, _rocm_roots()) if c]
    found.append(_prefix_candidate(HIPEVOLVE_PREFIX))
    parts = next((c for c in found if c), None)
    if parts is None:
        return None
    if not Path(parts["cxxfilt"]).exists():
        parts["cxxfilt"] = None
    with ThreadPoolExecutor(max_workers=len(KNOWN_TARGETS)) as pool:
        ok = list(pool.map(lambda t: _compiles(parts, t), KNOWN_TARGETS))
    targets = tuple(t for t, good in zip(KNOWN_TARGETS, ok, strict=True) if good)
    return AmdToolchain(
        version=_version(parts["clang"], parts["hip_prefix"]), targets=targets, **parts
    )


# --- compiling -------------------------------------------------------------------------------


def device_compile_command(tc: AmdToolchain, source: Path, output: Path, target: str) -> list[str]:
    """clang's HIP device-only compile of `source` for `target` into a code object at `output`.

    The host launchers still parse (they must be valid HIP), but only device code is generated;
    --no-gpu-bundle-output leaves a plain AMDGPU ELF that llvm-objdump disassembles.
    """
    return [
        str(tc.clang),
        "-x",
        "hip",
        "--offload-device-only",
        "--no-gpu-bundle-output",
        f"--offload-arch={target}",
        "-O3",
        "-Rpass-analysis=kernel-resource-usage",
        "-D__HIP_PLATFORM_AMD__",
        "-fno-crash-diagnostics",
        f"--rocm-path={tc.hip_prefix}",
        f"--rocm-device-lib-path={tc.device_libs}",
        f"-I{tile_include_dir()}",
        str(source),
        "-o",
        str(output),
    ]


def _run(cmd: list[str], cwd: Path, timeout_s: float, max_output: int) -> CommandResult:
    # An empty environment, so nothing secret is there to #include from /proc/self/environ.
    env = ["env", "-i", "PATH=/usr/bin:/bin", "LC_ALL=C", f"TMPDIR={cwd.resolve()}"]
    return run_limited([*env, *cmd], cwd, timeout_s, _OBJECT_BYTES, max_output=max_output)


def _preprocessor(cwd: Path, timeout_s: float):
    """Runs the include check's `-M` command the way `_run` runs the compile."""

    def run(argv: list[str]) -> tuple[int | None, str]:
        result = _run(argv, cwd, timeout_s, _COMPILE_OUTPUT)
        return result.returncode, result.output

    return run


# --- reading the compiler's remarks ----------------------------------------------------------

_REMARK = re.compile(r"remark:\s+(?P<key>[A-Za-z][A-Za-z ]*?)\s*(?:\[[^\]]*\])?:\s+(?P<value>\S+)")
_REMARK_KEYS = {
    "VGPRs": "vgprs",
    "AGPRs": "agprs",
    "SGPRs": "sgprs",
    "ScratchSize": "scratch_bytes",
    "Occupancy": "occupancy",
    "SGPRs Spill": "spills_sgpr",
    "VGPRs Spill": "spills_vgpr",
    "LDS Size": "lds_bytes",
    "Dynamic Stack": "dynamic_stack",
}


def parse_resource_usage(text: str) -> dict[str, dict]:
    """Kernel symbol -> resource usage, from clang's kernel-resource-usage remarks.

    Keys are StaticFacts' names (vgprs, agprs, sgprs, scratch_bytes (per lane), occupancy (waves
    per SIMD), spills_sgpr, spills_vgpr, lds_bytes (per block)) plus dynamic_stack (bool).
    """
    kernels: dict[str, dict] = {}
    current: dict | None = None
    for line in text.splitlines():
        m = _REMARK.search(line)
        if not m:
            continue
        key, value = m["key"].strip(), m["value"]
        if key == "Function Name":
            current = kernels.setdefault(value, {})
        elif current is not None and key in _REMARK_KEYS:
            if key == "Dynamic Stack":
                current["dynamic_stack"] = value.lower() == "true"
            elif value.isdigit():
                current[_REMARK_KEYS[key]] = int(value)
    return kernels


# --- reading the ISA -------------------------------------------------------------------------

_SYMBOL = re.compile(r"^(?:[0-9a-fA-F]+\s+)?<(?P<name>[^>]+)>:\s*$")
_LOAD = re.compile(r"^(?P<kind>global|buffer|flat)_load_(?P<suffix>\w+)$")
_LDS_PREFIXES = ("ds_read", "ds_write", "ds_load", "ds_store")


def load_width(suffix: str) -> str:
    """Bits per lane of a vector-memory load, from its mnemonic suffix (dwordx4 -> "128").

    Covers GCN/CDNA names (dword, dwordx2..x4, ubyte, sshort, short_d16_hi, lds_dword) and
    RDNA/gfx12 names (b32..b128, u8, i16, d16_b16); format loads are "format".
    """
    if m := re.search(r"dwordx(\d)", suffix):
        return str(32 * int(m.group(1)))
    if "dword" in suffix:
        return "32"
    if m := re.search(r"(?:^|_)b(\d+)(?:_|$)", suffix):
        return m.group(1)
    if re.search(r"(?:^|_)(?:ubyte|sbyte|byte|u8|i8)(?:_|$)", suffix):
        return "8"
    if re.search(r"(?:^|_)(?:ushort|sshort|short|u16|i16)(?:_|$)", suffix):
        return "16"
    if "format" in suffix:
        return "format"
    return suffix


def _width_order(item: tuple[str, int]) -> tuple[int, str]:
    return (int(item[0]), "") if item[0].isdigit() else (1 << 30, item[0])


def _operand(line: str, index: int) -> str:
    operands = line.split("//")[0].split(None, 1)[1:]
    parts = [p.strip() for p in operands[0].split(",")] if operands else []
    return parts[index] if index < len(parts) else ""


def isa_facts(disassembly: str) -> dict[str, dict]:
    """Symbol -> ISA facts, from llvm-objdump -d of an AMDGPU code object.

    Per symbol: instructions (through the last s_endpgm: the s_nop padding after it is not code);
    mfma (v_mfma* and v_smfmac*); global_loads, buffer_loads and flat_loads as {bits per lane:
    count}; lds_ops (ds_read/ds_write/ds_load/ds_store, not the
    cross-lane ds_bpermute/ds_swizzle); scratch_ops (spills and private arrays: scratch_load/
    scratch_store on gfx942, and on gfx90a buffer loads and stores with no VGPR address
    (`buffer_load_dword v1, off, s[8:11], 0 offset:4`), the private-segment path; a uniform user
    buffer load without a VGPR offset is counted there too).
    """
    facts: dict[str, dict] = {}
    current: dict | None = None
    for line in disassembly.splitlines():
        if m := _SYMBOL.match(line):
            current = facts.setdefault(
                m["name"],
                {
                    "instructions": 0,
                    "mfma": 0,
                    "global_loads": Counter(),
                    "buffer_loads": Counter(),
                    "flat_loads": Counter(),
                    "lds_ops": 0,
                    "scratch_ops": 0,
                    "_seen": 0,
                },
            )
            continue
        if current is None or not line[:1].isspace() or not line.strip():
            continue
        mnemonic = line.split()[0]
        if mnemonic.startswith(("//", ";")):
            continue
        current["_seen"] += 1
        if mnemonic == "s_endpgm":
            current["instructions"] = current["_seen"]
        if mnemonic.startswith(("v_mfma", "v_smfmac")):
            current["mfma"] += 1
        elif mnemonic.startswith(("buffer_load", "buffer_store")) and _operand(line, 1) == "off":
            current["scratch_ops"] += 1
        elif m := _LOAD.match(mnemonic):
            current[f"{m['kind']}_loads"][load_width(m["suffix"])] += 1
        elif mnemonic.startswith(_LDS_PREFIXES):
            current["lds_ops"] += 1
        elif mnemonic.startswith(("scratch_load", "scratch_store")):
            current["scratch_ops"] += 1
    for entry in facts.values():
        seen = entry.pop("_seen")
        entry["instructions"] = entry["instructions"] or seen  # functions end in s_setpc_b64
        for key in ("global_loads", "buffer_loads", "flat_loads"):
            entry[key] = dict(sorted(entry[key].items(), key=_width_order))
    return facts


def demangle(tc: AmdToolchain, names: list[str]) -> dict[str, str]:
    """Mangled -> readable names (extern "C" names pass through); unchanged without cxxfilt."""
    return demangle_with(tc.cxxfilt, names)


# --- the whole stage -------------------------------------------------------------------------


def preprocessed_key(
    source_text: str, target: str, tc: AmdToolchain, workdir: Path, timeout_s: float
) -> str | None:
    """The digest of what the device compile of `source_text` for `target` reads after
    preprocessing (verifier/build/preprocessed.py): sources with one digest have the same
    facts. Writes kernel.hip into `workdir`; None where it cannot be told."""
    cmd = device_compile_command(tc, Path(SOURCE_NAME), Path(f"kernel-{target}.co"), target)
    return preprocessed.digest(
        workdir,
        preprocessed.clang_hip_passes(cmd),
        cmd,
        tc.version,
        lambda argv: _run(argv, workdir, timeout_s, _COMPILE_OUTPUT).returncode,
        source_text,
    )


def analyze(
    source_text: str,
    target: str,
    workdir: Path,
    timeout_s: float = 60,
    toolchain: AmdToolchain | None = None,
) -> list[StaticFacts]:
    """Static facts of each kernel in `source_text` compiled for `target`, in source order.

    Writes kernel.hip and the code object into `workdir` (so compiler messages name kernel.hip and
    the candidate's line numbers). Raises AmdCompileError when the source does not compile or the
    compile passes `timeout_s`; UserError when there is no toolchain or it lacks `target`.
    """
    tc = toolchain or find_toolchain()
    if tc is None:
        raise UserError("no AMD device compiler found for the static backend", INSTALL_FIX)
    if target not in tc.targets:
        raise UserError(
            f"{target} does not compile with {tc.version} (it has: "
            f"{', '.join(tc.targets) or 'none'})",
            INSTALL_FIX,
        )
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / SOURCE_NAME).write_text(source_text)
    code_object = Path(f"kernel-{target}.co")
    cmd = device_compile_command(tc, Path(SOURCE_NAME), code_object, target)
    refused = check_includes(cmd, workdir, _preprocessor(workdir, timeout_s))
    if refused is not None:
        raise AmdCompileError(refused.log, timed_out=refused.timed_out)
    compiled = _run(cmd, workdir, timeout_s, _COMPILE_OUTPUT)
    if compiled.returncode is None:
        raise AmdCompileError(
            f"compile killed after {timeout_s:.0f} s\n{compiled.output}", timed_out=True
        )
    if compiled.returncode != 0 or not (workdir / code_object).exists():
        raise AmdCompileError(compiled.output or f"compiler exited with {compiled.returncode}")
    usage = parse_resource_usage(compiled.output)
    listing = _run(
        [str(tc.objdump), "-d", "--no-show-raw-insn", str(code_object)],
        workdir,
        timeout_s,
        _OBJECT_BYTES,
    )
    if listing.returncode != 0:
        raise RuntimeError(f"llvm-objdump failed on {code_object}: {listing.output[:500]}")
    isa = isa_facts(listing.output)
    names = demangle(tc, list(usage))
    facts = []
    for symbol, resources in usage.items():
        code = isa.get(symbol, {})
        facts.append(
            StaticFacts(
                kernel=names[symbol],
                target=target,
                **{k: v for k, v in resources.items() if k != "dynamic_stack"},
                mfma=code.get("mfma", 0),
                global_loads=code.get("global_loads", {}),
                buffer_loads=code.get("buffer_loads", {}),
                lds_ops=code.get("lds_ops", 0),
            )
        )
    return facts
