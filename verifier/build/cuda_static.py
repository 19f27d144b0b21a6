"""Static facts of the CUDA build: registers, shared memory, occupancy, load widths and tensor-core
use of a native candidate as nvcc builds it for the NVIDIA GPU it runs on.

Where the AMD static toolchain is absent (verifier/build/amd_static.py), these are the facts an
evaluation records and the MAP-Elites grid reads, so its axes keep their meaning on an NVIDIA
machine. Each StaticFacts carries the CUDA architecture as its target ("sm_90"): a reader (a
dataset, a prompt, the grid's report) tells them from the AMD facts ("gfx942") by it.

How: the cuda backend's library build (verifier/build/nvidia.py nvcc_command) prints ptxas's
resource report (`--resource-usage`) and keeps the PTX (`-keep`); the build reads them
(build_facts) and keeps the facts beside the library. Where a library came without them (a
cache from before), the same command line builds a cubin instead of the library (analyze).
- registers, shared memory, stack frame and spills of each kernel: ptxas's report;
- load widths and shared-memory instructions: the PTX's `ld.global` / `ldu.global` (vector
  count x element bits) and `cp.async` copies (their byte count; a TMA bulk copy counts as 128);
  the PTX rather than the SASS, since no disassembler comes with every CUDA install (this
  machine's has none), and ptxas keeps a `ld.global.v4.f32` one LDG.E.128;
- tensor-core use (the `mfma` count): `mma.sync`, `wmma.mma`, `wgmma.mma_async` and
  `tcgen05.mma` in the PTX;
- occupancy: resident warps per SM sub-partition (warp scheduler), CUDA's counterpart of the
  waves per SIMD that AMD's compiler reports (4 schedulers an SM as 4 SIMDs a CU), computed as
  CUDA's occupancy calculator does from registers per thread, static shared memory (plus the 1 KB
  a block reserves) and the block size: the kernel's launch bound (`__launch_bounds__`, the PTX's
  .maxntid or .reqntid), else ASSUMED_BLOCK threads. Dynamic shared memory is a launch argument
  and does not count.

What it protects against: the same as the AMD analysis: the command line is ours, the include
check runs first, the compiler runs with an empty environment, a time limit and capped output.
"""

from __future__ import annotations

import math
import re
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

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

ASSUMED_BLOCK = 256  # threads a block, for a kernel that declares no launch bound
_OUTPUT = 1 << 20
_OBJECT_BYTES = 64 << 20
CUBIN = "kernel.cubin"
PTX = "kernel.ptx"


class CudaAnalysisError(AnalysisCompileError):
    """The facts compile failed (the library's own build is the judge of compile errors)."""

    failed = "CUDA facts compile failed"


# --- the command -----------------------------------------------------------------------------

_LIBRARY_ONLY = {"-shared": 0, "-lineinfo": 0, "-Xcompiler": 1, "-cudart": 1, "-o": 1}
_REPORT = {"--resource-usage": 0, "-keep": 0}  # the library's own report (nvcc_command): added back


def facts_command(library_argv: tuple[str, ...] | list[str]) -> list[str]:
    """The cuda backend's library command (nvidia.nvcc_command) made to build kernel.cubin with
    ptxas's resource report and the PTX kept: the host-side and link flags (-shared, -Xcompiler
    -fPIC, -cudart static, -lineinfo, -o lib.so) go, everything that shapes the device code
    stays. ValueError when the command is not an nvcc library build."""
    argv = list(library_argv)
    if not argv or "-gencode" not in " ".join(argv) or SOURCE_NAME not in argv:
        raise ValueError("not an nvcc library command")
    out: list[str] = []
    skip = 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        if arg in _LIBRARY_ONLY or arg in _REPORT:
            skip = _LIBRARY_ONLY.get(arg, 0)
            continue
        out.append(arg)
    source = out.index(SOURCE_NAME)
    return [*out[:source], "-cubin", "--resource-usage", "-keep", "-o", CUBIN, SOURCE_NAME]


def architecture(argv: list[str]) -> str:
    """The sm_XX the command generates code for (its -gencode's code=)."""
    for arg in argv:
        if m := re.search(r"code=(sm_\d+[af]?)", arg):
            return m.group(1)
    raise ValueError("no -gencode code=sm_XX in the command")


# --- ptxas's resource report -----------------------------------------------------------------

_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>sm_\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_resource_usage(text: str) -> dict[str, dict[str, int]]:
    """Kernel (mangled) -> registers, smem (static shared bytes per block), stack (bytes of
    local memory per thread), spill_stores and spill_loads (bytes), from ptxas -v's report."""
    kernels: dict[str, dict[str, int]] = {}
    current: dict[str, int] | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = kernels.setdefault(
                m["name"],
                {"registers": 0, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0},
            )
            continue
        if current is None:
            continue
        if m := _FRAME.search(line):
            current["stack"], current["spill_stores"], current["spill_loads"] = map(int, m.groups())
        if m := _USED.search(line):
            current["registers"] = int(m.group(1))
            smem = _SMEM.search(line)
            current["smem"] = int(smem.group(1)) if smem else 0
    return kernels


# --- the PTX ---------------------------------------------------------------------------------

_PTX_ENTRY = re.compile(r"\.entry\s+(?P<name>[\w$.]+)\s*\(")
_BOUND = re.compile(r"\.(?:maxntid|reqntid)\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?")
_GLOBAL_LOAD = re.compile(r"^(?:ld|ldu)\.global\S*")
_CP_ASYNC = re.compile(
    r"^cp\.async\.(?:ca|cg)\.shared(?:::cta)?\.global\S*\s+[^,]+,\s*[^,]+,\s*(\d+)"
)
_BULK = re.compile(r"^cp\.async\.bulk\S*\.shared\S*\.global")
_MMA = re.compile(r"^(?:mma\.sync|wmma\.mma|wgmma\.mma_async|tcgen05\.mma)\b")
_SHARED = re.compile(r"^(?:ld|st|atom|red)\.shared\b")
_BITS = {"8": 8, "16": 16, "32": 32, "64": 64, "128": 128}


def ptx_load_bits(mnemonic: str) -> str:
    """Bits per thread of a PTX load (ld.global.nc.v4.f32 -> "128"; ld.global.v2.bf16x2 -> "64")."""
    parts = mnemonic.split(".")
    lanes = next((int(p[1:]) for p in parts if re.fullmatch(r"v\d", p)), 1)
    kind = parts[-1]
    if m := re.fullmatch(r"[a-z]+(\d+)(?:x(\d+))?", kind):
        bits = int(m.group(1)) * int(m.group(2) or 1)
        return str(lanes * bits)
    return kind


def ptx_facts(ptx: str) -> dict[str, dict]:
    """Kernel (mangled) -> threads (its launch bound, 0 when none), global_loads {bits: count},
    mfma (tensor-core instructions), lds_ops (shared-memory instructions), from its PTX body.
    Loads in a .func that a kernel calls are not counted (nvcc inlines nearly all of them)."""
    facts: dict[str, dict] = {}
    current: dict | None = None
    depth = 0
    for raw in ptx.splitlines():
        line = raw.split("//")[0].strip()
        if not line:
            continue
        if m := _PTX_ENTRY.search(line):
            current = facts.setdefault(
                m["name"], {"threads": 0, "global_loads": Counter(), "mfma": 0, "lds_ops": 0}
            )
            depth = 0
            continue
        if depth == 0 and ".func" in line.split():
            current = None
            continue
        if current is None:
            continue
        if depth == 0 and (m := _BOUND.match(line)):
            current["threads"] = math.prod(int(g) for g in m.groups() if g)
        depth += line.count("{") - line.count("}")
        instruction = re.sub(r"^@!?%\w+\s+", "", line)  # a predicate guard
        mnemonic = instruction.split()[0] if instruction.split() else ""
        if _GLOBAL_LOAD.match(mnemonic):
            current["global_loads"][ptx_load_bits(mnemonic)] += 1
        elif m := _CP_ASYNC.match(instruction):
            current["global_loads"][str(8 * int(m.group(1)))] += 1
        elif _BULK.match(mnemonic):
            current["global_loads"]["128"] += 1
        elif _MMA.match(mnemonic):
            current["mfma"] += 1
        elif _SHARED.match(mnemonic):
            current["lds_ops"] += 1
        if depth == 0 and "}" in line:
            current = None
    for entry in facts.values():
        loads = entry["global_loads"]
        entry["global_loads"] = dict(sorted(loads.items(), key=lambda kv: (len(kv[0]), kv[0])))
    return facts


# --- occupancy -------------------------------------------------------------------------------

# Per SM: resident warps, resident blocks, shared memory (bytes) usable by blocks. Every listed
# architecture has 65536 32-bit registers an SM in 4 sub-partitions, allocated 256 a warp.
SM_LIMITS: dict[int, tuple[int, int, int]] = {
    80: (64, 32, 164 << 10),  # A100
    86: (48, 16, 100 << 10),
    87: (48, 16, 164 << 10),
    89: (48, 24, 100 << 10),  # L40, RTX 40
    90: (64, 32, 228 << 10),  # H100, H200
    100: (64, 32, 228 << 10),  # B200
    120: (48, 32, 100 << 10),  # RTX 50
}
_REGISTERS_PER_SCHEDULER = 16384
_REGISTER_UNIT = 256  # registers allocated a warp at a time
_SHARED_UNIT = 128
_BLOCK_RESERVED = 1024  # shared memory the driver reserves a block (sm_80 and later)


def sm_limits(arch: str) -> tuple[int, int, int]:
    """The listed architecture at or below `arch` (sm_90a -> sm_90), else the lowest listed."""
    number = int(re.sub(r"\D", "", arch) or 0)
    known = [n for n in SM_LIMITS if n <= number]
    return SM_LIMITS[max(known) if known else min(SM_LIMITS)]


def occupancy(registers: int, smem: int, threads: int, arch: str) -> int:
    """Resident warps per SM sub-partition (4 an SM) for a kernel of `registers` per thread and
    `smem` static shared bytes in blocks of `threads`; 0 when a block does not fit."""
    max_warps, max_blocks, shared = sm_limits(arch)
    warps_per_block = max(1, math.ceil(threads / 32))
    blocks = min(max_blocks, max_warps // warps_per_block)
    if registers > 0:
        per_warp = math.ceil(registers * 32 / _REGISTER_UNIT) * _REGISTER_UNIT
        warps_by_registers = 4 * (_REGISTERS_PER_SCHEDULER // per_warp)
        blocks = min(blocks, warps_by_registers // warps_per_block)
    per_block = math.ceil((smem + _BLOCK_RESERVED) / _SHARED_UNIT) * _SHARED_UNIT
    blocks = min(blocks, shared // per_block)
    return math.ceil(blocks * warps_per_block / 4)


# --- the whole stage -------------------------------------------------------------------------


def _run(argv: list[str], cwd: Path, timeout_s: float) -> CommandResult:
    # An empty environment (nothing secret to #include from /proc/self/environ); nvcc's own
    # folder on PATH for the wrapper scripts that call it by name.
    tool_dir = str(Path(argv[0]).resolve().parent)
    env = ["env", "-i", f"PATH={tool_dir}:/usr/bin:/bin", "LC_ALL=C", f"TMPDIR={cwd.resolve()}"]
    return run_limited([*env, *argv], cwd, timeout_s, _OBJECT_BYTES, max_output=_OUTPUT)


def preprocessed_key(
    source_text: str, library_argv: Sequence[str], toolchain: str, workdir: Path, timeout_s: float
) -> str | None:
    """The digest of what the facts compile of `source_text` reads after preprocessing
    (verifier/build/preprocessed.py): sources with one digest have the same facts. Writes
    kernel.hip into `workdir`; None where it cannot be told."""
    cmd = facts_command(library_argv)
    return preprocessed.digest(
        workdir,
        preprocessed.nvcc_passes(cmd),
        cmd,
        toolchain,
        lambda argv: _run(argv, workdir, timeout_s).returncode,
        source_text,
    )


def analyze(
    source_text: str,
    library_argv: tuple[str, ...] | list[str],
    workdir: Path,
    timeout_s: float = 120,
) -> list[StaticFacts]:
    """Static facts of each kernel of `source_text` as the cuda backend's `library_argv` builds
    it (target: its sm_XX). Raises CudaAnalysisError when the compile fails or times out,
    ValueError when `library_argv` is not an nvcc library command."""
    cmd = facts_command(library_argv)
    arch = architecture(cmd)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / SOURCE_NAME).write_text(source_text)

    def preprocess(argv: list[str]) -> tuple[int | None, str]:
        result = _run(argv, workdir, timeout_s)
        return result.returncode, result.output

    refused = check_includes(cmd, workdir, preprocess)
    if refused is not None:
        raise CudaAnalysisError(refused.log, timed_out=refused.timed_out)
    compiled = _run(cmd, workdir, timeout_s)
    if compiled.returncode is None:
        raise CudaAnalysisError(f"compile killed after {timeout_s:.0f} s", timed_out=True)
    if compiled.returncode != 0 or not (workdir / PTX).exists():
        raise CudaAnalysisError(compiled.output or f"nvcc exited with {compiled.returncode}")
    return facts_of(compiled.output, (workdir / PTX).read_text(errors="replace"), arch)


def build_facts(
    output: str, build_dir: Path, library_argv: Sequence[str]
) -> list[StaticFacts] | None:
    """The facts of the library nvcc just built in `build_dir` with its report and PTX kept
    (nvidia.nvcc_command's --resource-usage and -keep): `output` is the build's output. One
    compile then gives the library and its facts, where a second, facts-only compile cost a
    GDN child 3 s of CPU and a softmax one 0.4 s. None where the command kept neither."""
    ptx = build_dir / PTX
    if "--resource-usage" not in library_argv or not ptx.is_file():
        return None
    try:
        arch = architecture(list(library_argv))
    except ValueError:
        return None
    return facts_of(output, ptx.read_text(errors="replace"), arch)


def facts_of(report: str, ptx: str, arch: str) -> list[StaticFacts]:
    """Each kernel's facts from ptxas's resource report and the PTX, for `arch` (sm_XX)."""
    usage = parse_resource_usage(report)
    code = ptx_facts(ptx)
    names = demangle_with(shutil.which("c++filt"), list(usage))
    facts = []
    for symbol, resources in usage.items():
        isa = code.get(symbol, {})
        threads = isa.get("threads") or ASSUMED_BLOCK
        facts.append(
            StaticFacts(
                kernel=names[symbol],
                target=arch,
                vgprs=resources["registers"],
                lds_bytes=resources["smem"],
                scratch_bytes=resources["stack"],
                occupancy=occupancy(resources["registers"], resources["smem"], threads, arch),
                spills_vgpr=math.ceil(resources["spill_stores"] / 4),
                mfma=isa.get("mfma", 0),
                global_loads=isa.get("global_loads", {}),
                lds_ops=isa.get("lds_ops", 0),
            )
        )
    return facts
