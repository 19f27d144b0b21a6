"""MAP-Elites descriptors: the grid cell of a candidate, in terms a kernel engineer reasons with.

A cell is a tuple of five labelled strings, one per axis of AXES, for example
("occ:5-8", "lds:<16K", "vec:128", "mfma:no", "tile:33-64"). The labels read on their own in a
report and a prompt. Every axis has a "?" bin, so a candidate with no static facts or no
tile-like tunable still gets a cell.

Where the facts come from: the AMD static compile (gfx targets) where its toolchain exists, else
the CUDA build that runs (verifier/build/cuda_static.py, target sm_XX): registers, shared memory,
occupancy (warps per SM sub-partition, CUDA's waves per SIMD), PTX load widths and tensor-core
instructions fill the same bins. `axes_source` says which, for the run's report.

Bins, per axis:
- occ  (waves per SIMD the compiler reports; on CUDA, resident warps per SM sub-partition): "1-2", "3-4", "5-8", "9+"; "?" if no kernel reports
  one. With several kernels the lowest occupancy counts: the most constrained kernel is the one a
  register or LDS change would move.
- lds  (static LDS bytes, largest kernel): "none" (0), "<16K", "<48K", "48K+" (48 KB and more;
  gfx942 has 64 KB per workgroup, gfx950 160 KB); "?" without facts.
- vec  (widest global or buffer load per lane, any kernel): "<=32" (scalar dword or narrower),
  "64" (dwordx2), "128" (dwordx3/x4, the 16-byte loads that saturate HBM); "?" without facts or
  when no load width was counted (flat loads through generic pointers are not in StaticFacts).
- mfma (matrix-core instructions in any kernel): "yes", "no"; "?" without facts.
- tile (largest value among tunables named like a tile or block size: BLOCK, BLOCK_M, TILE_K,
  BV, BK, ...): "<=16", "17-32", "33-64", "65-128", ">128"; "?" when no such integer tunable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from hipevolve.core.evaluation import StaticFacts

Cell = tuple[str, ...]

AXES: tuple[str, ...] = ("occ", "lds", "vec", "mfma", "tile")

BINS: dict[str, tuple[str, ...]] = {
    "occ": ("1-2", "3-4", "5-8", "9+", "?"),
    "lds": ("none", "<16K", "<48K", "48K+", "?"),
    "vec": ("<=32", "64", "128", "?"),
    "mfma": ("yes", "no", "?"),
    "tile": ("<=16", "17-32", "33-64", "65-128", ">128", "?"),
}

# BLOCK, BLOCK_SIZE, BLOCK_M, TILE, TILE_K, and two-letter block names (BV, BK, BM, BN, BT).
_TILE_NAME = re.compile(r"^(?:BLOCK|TILE)(?:_?[A-Z0-9]+)*$|^B[A-Z]$")


def _label(axis: str, value: str) -> str:
    return f"{axis}:{value}"


def occupancy_bin(facts: Sequence[StaticFacts]) -> str:
    waves = [f.occupancy for f in facts if f.occupancy > 0]
    if not waves:
        return "?"
    low = min(waves)
    if low <= 2:
        return "1-2"
    if low <= 4:
        return "3-4"
    return "5-8" if low <= 8 else "9+"


def lds_bin(facts: Sequence[StaticFacts]) -> str:
    if not facts:
        return "?"
    most = max(f.lds_bytes for f in facts)
    if most == 0:
        return "none"
    if most < 16 * 1024:
        return "<16K"
    return "<48K" if most < 48 * 1024 else "48K+"


def widest_load_bits(facts: Sequence[StaticFacts]) -> int | None:
    """Widest counted global or buffer load, in bits per lane; None when none was counted."""
    widths = [
        int(width)
        for f in facts
        for loads in (f.global_loads, f.buffer_loads)
        for width, count in loads.items()
        if count > 0 and width.isdigit()  # "format" loads have no fixed width
    ]
    return max(widths, default=None)


def vector_bin(facts: Sequence[StaticFacts]) -> str:
    bits = widest_load_bits(facts)
    if bits is None:
        return "?"
    if bits <= 32:
        return "<=32"
    return "64" if bits <= 64 else "128"


def mfma_bin(facts: Sequence[StaticFacts]) -> str:
    if not facts:
        return "?"
    return "yes" if any(f.mfma > 0 for f in facts) else "no"


def tile_size(tunables: Mapping[str, object]) -> int | None:
    """Largest integer value among the tile-like tunables, or None."""
    sizes = []
    for name, value in tunables.items():
        if not _TILE_NAME.match(name.upper()) or isinstance(value, bool):
            continue
        if isinstance(value, int):
            sizes.append(value)
        elif isinstance(value, str):
            try:  # tunables.py keeps values as C tokens: "64", "0x40"
                sizes.append(int(value.strip(), 0))
            except ValueError:
                continue
    return max(sizes, default=None)


def tile_bin(tunables: Mapping[str, object]) -> str:
    size = tile_size(tunables)
    if size is None:
        return "?"
    for upper, label in ((16, "<=16"), (32, "17-32"), (64, "33-64"), (128, "65-128")):
        if size <= upper:
            return label
    return ">128"


def cell_of(facts: Sequence[StaticFacts], tunables: Mapping[str, object] | None = None) -> Cell:
    """The MAP-Elites cell of a candidate from its static facts and declared tunable values
    (AMD facts first: CUDA facts count only where there are none)."""
    amd = [f for f in facts if f.platform == "amd"]
    facts = amd or list(facts)
    values = (
        occupancy_bin(facts),
        lds_bin(facts),
        vector_bin(facts),
        mfma_bin(facts),
        tile_bin(tunables or {}),
    )
    return tuple(_label(axis, v) for axis, v in zip(AXES, values, strict=True))


def axes_source(facts: Sequence[StaticFacts]) -> str:
    """Where a cell's fact axes (occ, lds, vec, mfma) come from: "AMD static compile (gfx942)",
    "CUDA build (sm_90)", or "" without facts."""
    amd = sorted({f.target for f in facts if f.platform == "amd"})
    if amd:
        return f"AMD static compile ({', '.join(amd)})"
    cuda = sorted({f.target for f in facts if f.platform == "cuda"})
    return f"CUDA build ({', '.join(cuda)})" if cuda else ""


def cell_key(cell: Cell) -> str:
    """The cell as one string (the archive's elites.cell column): labels joined by "|"."""
    return "|".join(cell)


def cell_from_key(key: str) -> Cell:
    return tuple(key.split("|"))


def hamming(a: Cell, b: Cell) -> int:
    """Axes on which two cells differ (cells of different lengths differ everywhere)."""
    if len(a) != len(b):
        return max(len(a), len(b))
    return sum(x != y for x, y in zip(a, b, strict=True))


def all_labels() -> dict[str, tuple[str, ...]]:
    """Axis -> its labelled bins, in order: for reports that draw the grid."""
    return {axis: tuple(_label(axis, v) for v in BINS[axis]) for axis in AXES}
