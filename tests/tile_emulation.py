"""The matrix instructions under hipevolve/tile.h, emulated on CPU from the vendors' documents.

Each instruction is written the way its document tabulates it, from a matrix element to the
lane and register item holding it (AMD's matrix instruction calculator prints exactly that for
v_mfma_f32_16x16x16bf16_1k; the PTX ISA draws it for mma.m16n8k16), and its math is D = A B + C
in fp32 over bf16 inputs. The tile layer's own index arithmetic (hipevolve/tile_layout.h, the
inverse direction: lane and item to element) is compiled on the host and read back by
`header_layout`, never retyped here; tests/test_tile_layout.py checks one against the other.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from hipevolve.verifier.build.tile_headers import tile_include_dir

Where = Callable[[int, int], tuple[int, int]]  # (row, col) -> (lane, item)


@dataclass(frozen=True)
class Instruction:
    """One matrix instruction of one wave: shapes, items per lane, and the documented maps."""

    name: str  # the struct in tile_layout.h
    m: int
    n: int
    k: int
    lanes: int
    a: Where  # A[row][k]   -> (lane, item)
    b: Where  # B[k][col]   -> (lane, item)
    c: Where  # C/D[row][col] -> (lane, item)

    def items(self, operand: str) -> int:
        rows, cols = {"a": (self.m, self.k), "b": (self.k, self.n), "c": (self.m, self.n)}[operand]
        return rows * cols // self.lanes

    def shape(self, operand: str) -> tuple[int, int]:
        return {"a": (self.m, self.k), "b": (self.k, self.n), "c": (self.m, self.n)}[operand]

    def where(self, operand: str) -> Where:
        return {"a": self.a, "b": self.b, "c": self.c}[operand]

    def gather(self, operand: str, regs: np.ndarray) -> np.ndarray:
        """The operand matrix from its per-lane registers, as the hardware reads them."""
        rows, cols = self.shape(operand)
        where = self.where(operand)
        return np.array([[regs[where(r, c)] for c in range(cols)] for r in range(rows)])

    def scatter(self, operand: str, matrix: np.ndarray) -> np.ndarray:
        regs = np.full((self.lanes, self.items(operand)), np.nan)
        rows, cols = self.shape(operand)
        where = self.where(operand)
        for r in range(rows):
            for c in range(cols):
                regs[where(r, c)] = matrix[r, c]
        return regs

    def run(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """D registers from A, B, C registers: D = A B + C (bf16 products are exact in fp32;
        the sum is formed in float64 and rounded once, the order the hardware uses unknown)."""
        d = self.gather("a", a) @ self.gather("b", b) + self.gather("c", c)
        return self.scatter("c", d.astype(np.float32).astype(np.float64))


# AMD v_mfma_f32_16x16x16bf16_1k, wave64 (matrix instruction calculator, CDNA3):
#   A[i][k] in lane i + 16 (k // 4), item k % 4; B[k][j] in lane j + 16 (k // 4), item k % 4;
#   D[i][j] in lane j + 16 (i // 4), item i % 4.
MFMA_16X16X16_BF16 = Instruction(
    name="Mfma16x16x16Bf16", m=16, n=16, k=16, lanes=64,
    a=lambda i, k: (i + 16 * (k // 4), k % 4),
    b=lambda k, j: (j + 16 * (k // 4), k % 4),
    c=lambda i, j: (j + 16 * (i // 4), i % 4),
)  # fmt: skip

# NVIDIA mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, warp32 (PTX ISA, matrix fragments
# for mma.m16n8k16; groupID = lane >> 2, threadID_in_group = lane % 4):
#   A: a_i for i = 0..7, row = groupID (+8 for a2, a3, a6, a7), col = tig * 2 + (i & 1)
#      (+8 for i >= 4)            -> A[r][c] in lane 4 (r % 8) + (c % 8) // 2,
#      item (c % 2) + 2 (r // 8) + 4 (c // 8);
#   B: b_i for i = 0..3, row = tig * 2 + (i & 1) (+8 for i >= 2), col = groupID
#                                 -> B[k][j] in lane 4 j + (k % 8) // 2, item k % 2 + 2 (k // 8);
#   C/D: c_i, row = groupID (+8 for i >= 2), col = tig * 2 + (i & 1)
#                                 -> C[r][c] in lane 4 (r % 8) + c // 2, item c % 2 + 2 (r // 8).
MMA_M16N8K16_BF16 = Instruction(
    name="MmaM16n8k16Bf16", m=16, n=8, k=16, lanes=32,
    a=lambda r, c: (4 * (r % 8) + (c % 8) // 2, c % 2 + 2 * (r // 8) + 4 * (c // 8)),
    b=lambda k, j: (4 * j + (k % 8) // 2, k % 2 + 2 * (k // 8)),
    c=lambda r, c: (4 * (r % 8) + c // 2, c % 2 + 2 * (r // 8)),
)  # fmt: skip

INSTRUCTIONS = (MFMA_16X16X16_BF16, MMA_M16N8K16_BF16)

_DUMP = r"""
#include <cstdio>
#include <hipevolve/tile_layout.h>
template <class T> void dump(const char* name) {
    std::printf("%s %d %d %d %d %d %d %d\n", name, T::M, T::N, T::K, T::LANES, T::A_ITEMS,
                T::B_ITEMS, T::C_ITEMS);
    for (int l = 0; l < T::LANES; ++l) {
        for (int i = 0; i < T::A_ITEMS; ++i) std::printf("a %d %d %d %d\n", l, i, T::a_row(l, i), T::a_col(l, i));
        for (int i = 0; i < T::B_ITEMS; ++i) std::printf("b %d %d %d %d\n", l, i, T::b_row(l, i), T::b_col(l, i));
        for (int i = 0; i < T::C_ITEMS; ++i) std::printf("c %d %d %d %d\n", l, i, T::c_row(l, i), T::c_col(l, i));
    }
}
// Every map is constexpr: evaluated at compile time too.
static_assert(hvt::Mfma16x16x16Bf16::c_row(17, 2) == 6 && hvt::MmaM16n8k16Bf16::a_col(5, 7) == 11);
int main() {
    dump<hvt::Mfma16x16x16Bf16>("Mfma16x16x16Bf16");
    dump<hvt::MmaM16n8k16Bf16>("MmaM16n8k16Bf16");
}
"""


@dataclass(frozen=True)
class HeaderAtom:
    """One atom as tile_layout.h computes it: shapes and (operand, lane, item) -> (row, col)."""

    m: int
    n: int
    k: int
    lanes: int
    items: dict[str, int]
    at: dict[tuple[str, int, int], tuple[int, int]]


@cache
def header_layout(folder: Path) -> dict[str, HeaderAtom]:
    """tile_layout.h's maps for every atom, from a host program compiled against the header."""
    compiler = shutil.which("g++") or shutil.which("clang++-19")
    if compiler is None:
        raise RuntimeError("no host C++ compiler")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "dump.cpp").write_text(_DUMP)
    argv = [compiler, "-std=c++17", "-O0", f"-I{tile_include_dir()}", "dump.cpp", "-o", "dump"]
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    out = subprocess.run([str(folder / "dump")], capture_output=True, text=True, timeout=60)
    atoms: dict[str, HeaderAtom] = {}
    current: HeaderAtom | None = None
    for line in out.stdout.splitlines():
        word, *nums = line.split()
        values = list(map(int, nums))
        if word in ("a", "b", "c"):
            lane, item, row, col = values
            current.at[(word, lane, item)] = (row, col)
        else:
            m, n, k, lanes, ia, ib, ic = values
            current = HeaderAtom(m, n, k, lanes, {"a": ia, "b": ib, "c": ic}, {})
            atoms[word] = current
    return atoms


def header_tile_gemm(atom: Instruction, header: HeaderAtom, a: np.ndarray, b: np.ndarray
                     ) -> np.ndarray:  # fmt: skip
    """tile.h's load_a, load_b, mma and each, step for step, with the header's compiled maps
    and the emulated instruction: one wave's TileC = TileA (R x K) TileB (K x N)."""
    tm, tk, tn = a.shape[0] // atom.m, a.shape[1] // atom.k, b.shape[1] // atom.n
    lanes = range(atom.lanes)

    def regs(operand: str, matrix: np.ndarray, r0: int, c0: int) -> np.ndarray:
        return np.array([[matrix[r0 + header.at[(operand, lane, i)][0],
                                 c0 + header.at[(operand, lane, i)][1]]
                          for i in range(header.items[operand])] for lane in lanes])  # fmt: skip

    out = np.full((a.shape[0], b.shape[1]), np.nan)
    for m in range(tm):
        for n in range(tn):
            acc = np.zeros((atom.lanes, header.items["c"]))
            for kk in range(tk):
                acc = atom.run(regs("a", a, m * atom.m, kk * atom.k),
                               regs("b", b, kk * atom.k, n * atom.n), acc)  # fmt: skip
            for lane in lanes:
                for i in range(header.items["c"]):
                    row, col = header.at[("c", lane, i)]
                    out[m * atom.m + row, n * atom.n + col] = acc[lane, i]
    return out
