"""The tile layer's fragment maps against the documented matrix instructions, on CPU.

hipevolve/tile_layout.h says, for each atom (AMD v_mfma_f32_16x16x16bf16_1k, NVIDIA
mma.sync m16n8k16 bf16), which element of A, B and C/D a lane's register item holds; it is
compiled on the host and read back (tests/tile_emulation.py), then checked against the layouts as
AMD's matrix instruction calculator and the PTX ISA tabulate them. Then tile.h itself runs: a
GEMM on it (tests/data/tile_gemm.hip) on CPU threads, its instruction emulated (the MFMA builtin
and the mma.sync PTX of tests/gemm_emulation.py), against numpy.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np
import pytest
from tile_emulation import (
    INSTRUCTIONS,
    MFMA_16X16X16_BF16,
    MMA_M16N8K16_BF16,
    header_layout,
    header_tile_gemm,
)

from hipevolve.verifier.build.tile_headers import tile_include_dir

GEMM = Path(__file__).parent / "data" / "tile_gemm.hip"


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    return header_layout(tmp_path_factory.mktemp("layout"))


def bf16(x: np.ndarray) -> np.ndarray:
    """Rounded to bf16 (nearest even) and back, as float64."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("atom", INSTRUCTIONS, ids=lambda a: a.name)
def test_header_maps_every_lane_item_to_the_documented_element_once(atom, layout):
    header = layout[atom.name]
    assert (header.m, header.n, header.k, header.lanes) == (atom.m, atom.n, atom.k, atom.lanes)
    for operand in "abc":
        rows, cols = atom.shape(operand)
        assert header.items[operand] == atom.items(operand), operand
        seen = set()
        for lane in range(atom.lanes):
            for item in range(header.items[operand]):
                row, col = header.at[(operand, lane, item)]
                assert 0 <= row < rows and 0 <= col < cols, (operand, lane, item)
                assert atom.where(operand)(row, col) == (lane, item), (operand, lane, item)
                seen.add((row, col))
        assert len(seen) == rows * cols, operand


def test_documented_layouts_hold_the_calculators_worked_entries():
    # Lane 17 of the 16x16x16 MFMA: A row 1, k 4..7; B k 4..7, column 1; D rows 4..7, column 1.
    mfma = MFMA_16X16X16_BF16
    assert [mfma.a(1, k) for k in range(4, 8)] == [(17, i) for i in range(4)]
    assert [mfma.b(k, 1) for k in range(4, 8)] == [(17, i) for i in range(4)]
    assert [mfma.c(i, 1) for i in range(4, 8)] == [(17, i) for i in range(4)]
    # mma.m16n8k16, lane 5 (groupID 1, tig 1): a0..a7 = (1, 2), (1, 3), (9, 2), (9, 3),
    # (1, 10), (1, 11), (9, 10), (9, 11); c0..c3 = (1, 2), (1, 3), (9, 2), (9, 3).
    mma = MMA_M16N8K16_BF16
    a = [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]
    assert [mma.a(r, c) for r, c in a] == [(5, i) for i in range(8)]
    assert [mma.c(r, c) for r, c in a[:4]] == [(5, i) for i in range(4)]
    assert [mma.b(k, 1) for k in (2, 3, 10, 11)] == [(5, i) for i in range(4)]


@pytest.mark.parametrize("atom", INSTRUCTIONS, ids=lambda a: a.name)
def test_emulated_instruction_computes_a_times_b_plus_c(atom):
    rng = np.random.default_rng(1)
    a, b = bf16(rng.standard_normal((atom.m, atom.k))), bf16(rng.standard_normal((atom.k, atom.n)))
    c = rng.standard_normal((atom.m, atom.n)).astype(np.float32).astype(np.float64)
    d = atom.run(atom.scatter("a", a), atom.scatter("b", b), atom.scatter("c", c))
    np.testing.assert_allclose(atom.gather("c", d), a @ b + c, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("atom", INSTRUCTIONS, ids=lambda a: a.name)
def test_tile_gemm_with_the_header_maps_equals_matmul(atom, layout):
    rng = np.random.default_rng(2)
    a, b = bf16(rng.standard_normal((32, 48))), bf16(rng.standard_normal((48, 32)))
    got = header_tile_gemm(atom, layout[atom.name], a, b)
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def inlined(source: str) -> str:
    """kernel source with hipevolve/tile.h pasted in (and tile_layout.h into it), so the CPU
    build's PTX replacement (between the PTX primitives markers) reaches the header's asm."""
    root = tile_include_dir() / "hipevolve"
    header = (root / "tile.h").read_text()
    header = header.replace('#include "tile_layout.h"', (root / "tile_layout.h").read_text())
    return source.replace("#include <hipevolve/tile.h>", header)


# The header's atom on the emulated PTX of tests/gemm_emulation.py (mma.m16n8k16, bf16 = 1).
MMA_ATOM = """
HVT_DEV void atom_mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    gemm_mma16816<1>(d, a, b);
}
"""


@pytest.mark.parametrize("path, warp", [("mfma", 64), ("mma", 32)])
def test_tile_gemm_on_cpu_threads_with_the_instruction_emulated_equals_matmul(path, warp, tmp_path):
    from gemm_emulation import PRIMITIVES, build_cpu

    source = inlined(GEMM.read_text())
    if path == "mfma":
        source = "#define __HIP_PLATFORM_AMD__ 1\n" + source
    else:
        source = source.replace(PRIMITIVES[1], PRIMITIVES[1] + "\n" + MMA_ATOM)
    assert not re.search(r"#include <hipevolve", source)
    lib = ctypes.CDLL(str(build_cpu(source, tmp_path, warp, path)))
    rng = np.random.default_rng(3)
    m, n, k = 64, 128, 64
    a, b = bf16(rng.standard_normal((m, k))), bf16(rng.standard_normal((k, n)))
    a16 = (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    b16 = (b.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    c = np.full((m, n), np.nan, dtype=np.float32)
    ptr = ctypes.c_void_p
    err = lib.tile_gemm_launch(ptr(a16.ctypes.data), ptr(b16.ctypes.data), ptr(c.ctypes.data),
                               m, n, k, None)  # fmt: skip
    assert err == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-4)
