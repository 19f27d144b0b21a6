"""Writes STATIC_FACTS.md next to each task's seed kernels: their AMD facts, from the static compile.

    python scripts/static_facts.py                       # every task that ships seed kernels
    python scripts/static_facts.py gated_delta_net       # one task

Each seed is compiled for gfx942 and gfx90a at its declared default tunable values (the same
static stage every evaluation runs); the table records VGPRs, AGPRs, SGPRs, LDS, scratch, spills,
occupancy, MFMA and load widths per kernel.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hipevolve.app.views import short_kernel_name
from hipevolve.core.candidate import load_candidate
from hipevolve.core.config import load_settings
from hipevolve.problems import discover
from hipevolve.verifier.build.amd_static import find_toolchain
from hipevolve.verifier.static_facts import static_analysis

TARGETS = ("gfx942", "gfx90a")
NOTES = "\n## Notes"
HEADER = (
    "| seed | kernel | target | VGPR | AGPR | SGPR | LDS bytes | scratch | spills | "
    "occupancy | MFMA | global loads (bits x n) |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
)


def rows(seed: Path, settings) -> str:
    candidate = load_candidate(seed)
    result = static_analysis(candidate.hip_source, settings)
    if result.error:
        return f"| {seed.name} | does not compile: {result.error.splitlines()[0]} |\n"
    out = ""
    for f in result.facts:
        loads = " ".join(f"{w}x{n}" for w, n in f.global_loads.items()) or "-"
        out += (
            f"| {seed.name} | `{short_kernel_name(f.kernel)}` | {f.target} | {f.vgprs} | "
            f"{f.agprs} | {f.sgprs} | {f.lds_bytes} | {f.scratch_bytes} | {f.spills} | "
            f"{f.occupancy} | {f.mfma} | {loads} |\n"
        )
    return out


def main(names: list[str]) -> int:
    tc = find_toolchain()
    if tc is None:
        print("no AMD static toolchain: run scripts/install_amd_toolchain.sh", file=sys.stderr)
        return 2
    settings = load_settings().verifier.model_copy(update={"amd_targets": TARGETS})
    for task in discover().values():
        if not task.seeds or (names and task.name not in names):
            continue
        path = task.reference.parent / "STATIC_FACTS.md"
        text = (
            f"# {task.name}: static AMD facts of the seed kernels\n\n"
            f"Regenerate with `python scripts/static_facts.py {task.name}`. "
            f"Compiler: {tc.version.splitlines()[0]}.\n\n" + HEADER
        )
        text += "".join(rows(seed, settings) for seed in task.seeds)
        # Hand-written notes under "## Notes" (what the numbers mean, other tunable values) stay.
        old = path.read_text() if path.exists() else ""
        text += old[old.index(NOTES) :] if NOTES in old else ""
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
