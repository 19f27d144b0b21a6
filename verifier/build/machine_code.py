"""A normalised digest of the device code a built library will run: two candidates whose sources
differ (an `#define` that only the other platform reads) but whose machine code is the same get
the same digest, so the run loop can answer the second without a GPU evaluation (issue 33).

What differs between two builds of code that compiles alike, and is removed here:
- nvcc's module id: the `_INTERNAL_<hex>` and `_GLOBAL__N__<hex>` parts of internal names
  (static functions, anonymous namespaces), which nvcc draws per compile;
- clang's compilation-unit id (`__hip_cuid_<hex>`), and the build folder's path;
- debug sections (-lineinfo's line tables: they hash the source, comments included), the ELF
  build-id and other notes;
- string and hash tables and the dynamic section, which an id's length (clang's cuid drops
  leading zeros) shifts: symbols are read as entries, each with its name normalised.
What is kept: every other section of each device ELF (code, constant banks, kernel info and
descriptors, the symbol tables as entries), in order; and the host code
and data of the library itself (.text, .rodata, .data, .data.rel.ro): a tunable the launchers
read (a grid size, which of two compiled kernels to launch) changes only those. A build folder's
name has the same length every time in one cache folder (compile.build), so host code that is
the same does not move there; under a cache folder of another path length it can (the line
tables' paths change the fat binary's size, which can move the later sections by a page).

cuda: the cubins inside the library's .nv_fatbin section (one fat binary per compiled unit).
rocm: the amdgcn code objects of the library's .hip_fatbin offload bundle.
No cuobjdump or nvdisasm is needed (this machine has neither); the standard library reads ELF.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterator
from pathlib import Path

from hipevolve.verifier.build.rocm_build import elf_section, offload_bundle

_FATBIN_MAGIC = 0xBA55ED50
_IDS = re.compile(rb"(_INTERNAL_|_GLOBAL__N__|__hip_cuid_)[0-9a-fA-F]{6,}")
_SHT_SYMTAB, _SHT_STRTAB, _SHT_HASH, _SHT_DYNAMIC, _SHT_NOTE, _SHT_NOBITS = 2, 3, 5, 6, 7, 8
_SHT_DYNSYM, _SHT_GNU_HASH = 11, 0x6FFFFFF6
# Hash tables hash the names; string tables are read through the symbols that name them; the
# dynamic section holds the string table's size (which an id's length changes) for the loader.
_SKIPPED = (_SHT_STRTAB, _SHT_HASH, _SHT_DYNAMIC, _SHT_GNU_HASH, _SHT_NOTE)
_DEBUG = (".debug", ".rela.debug", ".rel.debug", ".nv_debug", ".note")
_HOST = (".text", ".rodata", ".data", ".data.rel.ro")


def _normalise(data: bytes, build_dir: str = "") -> bytes:
    """Module and unit ids collapsed to a marker (clang's cuid varies in length); the build
    path gone."""
    data = _IDS.sub(lambda m: m.group(1) + b"#", data)
    return data.replace(build_dir.encode(), b"<build>") if build_dir else data


def _symbols(table: bytes, strings: bytes) -> bytes:
    """A symbol table as (normalised name, info, other, section, value, size) entries: the
    names' offsets into the string table move when an id's length does. A table that holds
    clang's compilation-unit id (a translation unit with device globals) is sorted: the linker
    places that symbol by its name, so its slot moved from build to build (a gfx942 build of
    the same source gave three digests in four builds)."""
    out = []
    for pos in range(0, len(table) - 23, 24):
        name, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", table, pos)
        text = strings[name : strings.find(b"\0", name)] if name < len(strings) else b""
        out.append(_normalise(text) + struct.pack("<BBHQQ", info, other, shndx, value, size))
    if any(entry.startswith(b"__hip_cuid_#") for entry in out):
        out.sort()
    return b"\1".join(out)


def elf_sections(data: bytes) -> Iterator[tuple[str, int, int, bytes]]:
    """(name, type, linked section, contents) of each section of a little-endian ELF64 file,
    in file order."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQI", data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx]
    strings = data[names[4] : names[4] + names[5]]
    for sh_name, sh_type, _flags, _addr, offset, size, link in headers:
        name = strings[sh_name : strings.index(b"\0", sh_name)].decode(errors="replace")
        yield name, sh_type, link, b"" if sh_type == _SHT_NOBITS else data[offset : offset + size]


def _device_elf_digest(elf: bytes, h, build_dir: str) -> None:
    """Feeds the code-carrying sections of one device ELF into `h`."""
    sections = list(elf_sections(elf))
    for name, sh_type, link, contents in sections:
        if sh_type in _SKIPPED or name.startswith(_DEBUG):
            continue
        if sh_type in (_SHT_SYMTAB, _SHT_DYNSYM) and link < len(sections):
            contents = _symbols(contents, sections[link][3])
        h.update(_normalise(name.encode()) + b"\0" + str(sh_type).encode() + b"\0")
        h.update(hashlib.sha256(_normalise(contents, build_dir)).digest())


def _host_digest(library: bytes, h, build_dir: str) -> None:
    """Feeds the library's own host code and data sections into `h`."""
    for name, _type, _link, contents in elf_sections(library):
        if name in _HOST:
            h.update(
                name.encode() + b"\0" + hashlib.sha256(_normalise(contents, build_dir)).digest()
            )


def _fatbin_entries(section: bytes) -> Iterator[bytes]:
    """The payloads (cubins, PTX) of the fat binaries in an .nv_fatbin section."""
    pos = 0
    while pos + 16 <= len(section):
        magic, _version, header, size = struct.unpack_from("<IHHQ", section, pos)
        if magic != _FATBIN_MAGIC:
            pos += 8  # fat binaries are 8-byte aligned; padding between them
            continue
        entry, end = pos + header, pos + header + size
        while entry + 16 <= end:
            _kind, _ev, entry_header, payload = struct.unpack_from("<HHIQ", section, entry)
            yield section[entry + entry_header : entry + entry_header + payload]
            entry += entry_header + payload
        pos = end


def cuda_digest(library: bytes, build_dir: str = "") -> str | None:
    """The digest of an nvcc-built library's device code; None without an .nv_fatbin."""
    section = elf_section(library, ".nv_fatbin")
    if not section:
        return None
    h = hashlib.sha256(b"cuda\0")
    for payload in _fatbin_entries(section):
        if payload[:4] == b"\x7fELF":
            _device_elf_digest(payload, h, build_dir)
        else:  # PTX or a compressed entry: its bytes, ids normalised
            h.update(hashlib.sha256(_normalise(payload, build_dir)).digest())
    _host_digest(library, h, build_dir)
    return h.hexdigest()


def amd_digest(code_objects: list[tuple[str, bytes]], build_dir: str = "") -> str | None:
    """The digest of amdgcn code objects ((triple, ELF) pairs); None when there is none."""
    device = [(t, co) for t, co in code_objects if t.startswith("hip") and "amdgcn" in t]
    if not device:
        return None
    h = hashlib.sha256(b"rocm\0")
    for triple, code_object in sorted(device):
        h.update(triple.encode() + b"\0")
        if code_object[:4] == b"\x7fELF":
            _device_elf_digest(code_object, h, build_dir)
    return h.hexdigest()


def rocm_digest(library: bytes, build_dir: str = "") -> str | None:
    """The digest of a hipcc-built library's code objects; None without a .hip_fatbin."""
    bundle = elf_section(library, ".hip_fatbin")
    if not bundle:
        return None
    device = amd_digest(offload_bundle(bundle), build_dir)
    if device is None:
        return None
    h = hashlib.sha256(device.encode())
    _host_digest(library, h, build_dir)
    return h.hexdigest()


def library_digest(library: Path, backend: str, build_dir: str = "") -> str | None:
    """The normalised digest of the device code in a built library of `backend` (cuda or rocm);
    None where it holds none this module can read (then the candidate is simply evaluated)."""
    try:
        data = library.read_bytes()
        if backend == "cuda":
            return cuda_digest(data, build_dir)
        if backend == "rocm":
            return rocm_digest(data, build_dir)
    except (OSError, ValueError, struct.error):
        return None
    return None
