"""The rocm backend's build, as a ROCm machine does it, and what the built library holds.

The rocm backend compiles a native candidate's kernel.hip, host launchers and device code alike,
into one shared library with hipcc (backends.rocm_command), linked against the HIP runtime
(libamdhip64). On a machine with ROCm that is ROCm's hipcc; elsewhere it is the hipcc of
/opt/hipevolve-amd (scripts/install_amd_toolchain.sh): clang-19 with Debian's HIP headers, device
libraries and libamdhip64, linking with --no-undefined, so every call the host code makes must
resolve in the HIP runtime. That is how CI builds the ROCm path without an AMD GPU (docs/ROCM.md).

`inspect_library` reads a built library back: the offload bundle in its .hip_fatbin section (one
AMDGPU code object per --offload-arch), each code object's kernel metadata (llvm-readelf --notes:
LDS, VGPRs, AGPRs, SGPRs, scratch, wavefront size), and the HIP runtime symbols it calls. Nothing
here runs the library: loading it would register its kernels with a HIP runtime that has no GPU.

What this protects against: a candidate (or seed, or prompt example) that compiles device-only
but whose host code does not build or link for ROCm; a library missing one of the targets asked
for. What it does not: anything that happens at run time on an AMD GPU (docs/ROCM.md lists it).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from hipevolve.verifier.build.amd_static import HIPEVOLVE_PREFIX

_BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
_TARGET = re.compile(r"amdgcn-amd-amdhsa-[^-]*-(?P<target>gfx\w+)")


def find_hipcc() -> str | None:
    """hipcc on PATH, else ROCm's (/opt/rocm/bin), else the hipevolve-amd prefix's; or None."""
    found = shutil.which("hipcc")
    if found:
        return found
    for candidate in (Path("/opt/rocm/bin/hipcc"), HIPEVOLVE_PREFIX / "bin" / "hipcc"):
        if candidate.is_file():
            return str(candidate)
    return None


class KernelMetadata(BaseModel):
    """One kernel of a code object, as its AMDGPU metadata note declares it to the runtime."""

    model_config = ConfigDict(frozen=True)

    name: str
    readable: str = Field(default="", description="the demangled name (llvm-cxxfilt)")
    lds_bytes: int = Field(description=".group_segment_fixed_size: static LDS per workgroup")
    vgprs: int
    agprs: int = 0
    sgprs: int
    scratch_bytes: int = Field(description=".private_segment_fixed_size, per lane")
    spills_vgpr: int = 0
    wavefront_size: int
    max_workgroup_size: int


class CodeObject(BaseModel):
    model_config = ConfigDict(frozen=True)

    target: str
    bytes: int
    kernels: tuple[KernelMetadata, ...]


class RocmLibrary(BaseModel):
    """What a rocm-backend build produced: the artefact CI lists (docs/ROCM.md)."""

    model_config = ConfigDict(frozen=True)

    library: Path
    bytes: int
    code_objects: tuple[CodeObject, ...]
    hip_symbols: tuple[str, ...] = Field(description="HIP runtime functions the library calls")
    needed: tuple[str, ...] = Field(description="its DT_NEEDED shared libraries")

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(c.target for c in self.code_objects)

    def describe(self) -> str:
        """A few lines: the library, then each target's kernels and their static facts."""
        lines = [
            f"{self.library.name}: {self.bytes} bytes, needs {', '.join(self.needed)}; "
            f"calls {', '.join(self.hip_symbols)}"
        ]
        for co in self.code_objects:
            lines.append(f"  {co.target}: code object {co.bytes} bytes")
            for k in co.kernels:
                lines.append(
                    f"    {k.readable or k.name}: LDS {k.lds_bytes} B, VGPRs {k.vgprs}, AGPRs {k.agprs}, "
                    f"SGPRs {k.sgprs}, scratch {k.scratch_bytes} B/lane, wave{k.wavefront_size}, "
                    f"max workgroup {k.max_workgroup_size}"
                )
        return "\n".join(lines)


def elf_section(data: bytes, name: str) -> bytes | None:
    """The contents of section `name` of a little-endian ELF64 file, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
    strings = data[str_off : str_off + str_size]
    for sh_name, sh_type, _flags, _addr, offset, size in headers:
        end = strings.index(b"\0", sh_name)
        if strings[sh_name:end].decode() == name and sh_type != 8:  # 8: SHT_NOBITS
            return data[offset : offset + size]
    return None


def offload_bundle(data: bytes) -> list[tuple[str, bytes]]:
    """(triple, code object) for each entry of a clang offload bundle (the .hip_fatbin)."""
    if not data.startswith(_BUNDLE_MAGIC):
        raise ValueError("not a clang offload bundle")
    (count,) = struct.unpack_from("<Q", data, len(_BUNDLE_MAGIC))
    pos, entries = len(_BUNDLE_MAGIC) + 8, []
    for _ in range(count):
        offset, size, triple_size = struct.unpack_from("<QQQ", data, pos)
        pos += 24
        triple = data[pos : pos + triple_size].decode()
        pos += triple_size
        entries.append((triple, data[offset : offset + size]))
    return entries


_META = re.compile(r"^(?:  - |    )\.(?P<key>\w+):\s+(?P<value>\S+)\s*$")
_META_KEYS = {
    "name": "name",
    "group_segment_fixed_size": "lds_bytes",
    "vgpr_count": "vgprs",
    "agpr_count": "agprs",
    "sgpr_count": "sgprs",
    "private_segment_fixed_size": "scratch_bytes",
    "vgpr_spill_count": "spills_vgpr",
    "wavefront_size": "wavefront_size",
    "max_flat_workgroup_size": "max_workgroup_size",
}


def parse_kernel_notes(text: str) -> list[KernelMetadata]:
    """The kernels of llvm-readelf --notes output (the amdhsa.kernels list of the metadata)."""
    kernels: list[dict] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("amdhsa."):
            inside = line.startswith("amdhsa.kernels:")
            continue
        if not inside:
            continue
        if line.startswith("  - "):
            kernels.append({})
        m = _META.match(line)
        if m and kernels and m["key"] in _META_KEYS:
            value = m["value"]
            kernels[-1][_META_KEYS[m["key"]]] = value if m["key"] == "name" else int(value)
    return [KernelMetadata(**k) for k in kernels]


def _readelf(objdump: Path) -> Path:
    """llvm-readelf beside the toolchain's llvm-objdump (a link into LLVM's bin folder)."""
    return objdump.resolve().parent / "llvm-readelf"


def _dynamic(readelf: Path, library: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    syms = subprocess.run(
        [str(readelf), "--dyn-syms", "--wide", str(library)],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    hip = sorted({m.group(1) for m in re.finditer(r"UND\s+(\w*hip\w*)(?:@\S+)?\s*$", syms, re.M)})
    dyn = subprocess.run(
        [str(readelf), "--dynamic", str(library)], capture_output=True, text=True, timeout=60
    ).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    return tuple(hip), tuple(needed)


def _demangle(objdump: Path, names: list[str]) -> dict[str, str]:
    cxxfilt = objdump.resolve().parent / "llvm-cxxfilt"
    if not names or not cxxfilt.exists():
        return {}
    out = subprocess.run([str(cxxfilt), *names], capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    return dict(zip(names, lines, strict=True)) if len(lines) == len(names) else {}


def inspect_library(library: Path, objdump: Path, workdir: Path) -> RocmLibrary:
    """Reads a rocm-backend library: its code objects per target and their kernels' facts."""
    data = library.read_bytes()
    fatbin = elf_section(data, ".hip_fatbin")
    if fatbin is None:
        raise ValueError(f"{library} has no .hip_fatbin section: no device code was linked in")
    readelf = _readelf(objdump)
    objects = []
    for triple, code in offload_bundle(fatbin):
        m = _TARGET.search(triple)
        if not m or not code:
            continue  # the host entry is empty
        path = workdir / f"{library.stem}-{m['target']}.co"
        path.write_bytes(code)
        notes = subprocess.run(
            [str(readelf), "--notes", str(path)], capture_output=True, text=True, timeout=60
        )
        if notes.returncode != 0:
            raise RuntimeError(f"llvm-readelf --notes {path}: {notes.stderr[:300]}")
        kernels = parse_kernel_notes(notes.stdout)
        readable = _demangle(objdump, [k.name for k in kernels])
        kernels = [k.model_copy(update={"readable": readable.get(k.name, "")}) for k in kernels]
        objects.append(CodeObject(target=m["target"], bytes=len(code), kernels=tuple(kernels)))
    hip, needed = _dynamic(readelf, library)
    return RocmLibrary(
        library=library,
        bytes=len(data),
        code_objects=tuple(objects),
        hip_symbols=hip,
        needed=needed,
    )
