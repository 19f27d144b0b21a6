"""Reading a rocm-backend library back (verifier/build/rocm_build.py) without the toolchain: the
ELF section reader, the clang offload bundle and the AMDGPU metadata note, on a real ELF of this
machine, a bundle laid out as clang writes it, and llvm-readelf output captured here."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from hipevolve.verifier.build.rocm_build import elf_section, offload_bundle, parse_kernel_notes

# llvm-readelf-19 --notes of the softmax example's gfx942 code object, cut to one kernel.
NOTES = """\
Displaying notes found in: .note
  Owner                Data size 	Description
  AMDGPU               0x00001f65	NT_AMDGPU_METADATA (AMDGPU Metadata)
    AMDGPU Metadata:
        ---
amdhsa.kernels:
  - .agpr_count:     0
    .args:
      - .actual_access:  read_only
        .address_space:  global
        .offset:         0
        .size:           8
        .value_kind:     global_buffer
    .group_segment_fixed_size: 128
    .kernarg_segment_align: 8
    .max_flat_workgroup_size: 512
    .name:           _ZN12_GLOBAL__N_114softmax_cachedIfLi4EEEvPKT_PS1_i
    .private_segment_fixed_size: 0
    .sgpr_count:     26
    .sgpr_spill_count: 0
    .vgpr_count:     35
    .vgpr_spill_count: 0
    .wavefront_size: 64
amdhsa.target:   amdgcn-amd-amdhsa--gfx942
amdhsa.version:
  - 1
  - 2
"""


def test_kernel_metadata_is_read_from_the_notes():
    (k,) = parse_kernel_notes(NOTES)
    assert (k.name, k.lds_bytes, k.vgprs, k.agprs, k.sgprs, k.scratch_bytes) == (
        "_ZN12_GLOBAL__N_114softmax_cachedIfLi4EEEvPKT_PS1_i", 128, 35, 0, 26, 0)
    assert (k.wavefront_size, k.max_workgroup_size) == (64, 512)


def test_offload_bundle_entries_are_split_by_their_triples():
    payload = [("host-x86_64-unknown-linux--", b""), ("hipv4-amdgcn-amd-amdhsa--gfx90a", b"A" * 5),
               ("hipv4-amdgcn-amd-amdhsa--gfx942", b"B" * 7)]  # fmt: skip
    header_size = 24 + 8 + sum(24 + len(t) for t, _ in payload)
    header, body, offset = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", 3), b"", header_size
    for triple, code in payload:
        header += struct.pack("<QQQ", offset, len(code), len(triple)) + triple.encode()
        body += code
        offset += len(code)
    assert offload_bundle(header + body) == payload
    with pytest.raises(ValueError):
        offload_bundle(b"not a bundle")


def test_elf_sections_are_found_by_name_in_a_real_elf():
    data = Path(sys.executable).resolve().read_bytes()
    interp = elf_section(data, ".interp")
    assert interp is not None and interp.rstrip(b"\0").endswith(b".so.2")  # the dynamic loader
    assert elf_section(data, ".hip_fatbin") is None
    with pytest.raises(ValueError):
        elf_section(b"#!/bin/sh\n", ".text")
