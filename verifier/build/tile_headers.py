"""Where the project's own portable headers live: hipevolve/tile.h (register tiles over MFMA and
mma.sync) and hipevolve/tile_layout.h, under tiles/. Every backend passes the folder as -I, an
exported package carries a copy, and the include check counts it among the folders a compile may
read (includes.py)."""

from __future__ import annotations

from pathlib import Path


def tile_include_dir() -> Path:
    """The folder every backend passes as -I for the project's own portable headers:
    hipevolve/tile.h (register tiles over MFMA and mma.sync) and hipevolve/tile_layout.h."""
    return Path(__file__).resolve().parent / "tiles"
