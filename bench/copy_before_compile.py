"""Compiles that a run on NVIDIA no longer pays: a seed's one-knob neighbours built with nvcc,
with and without recognising a source that preprocesses as one already built
(verifier/build/preprocessed.py). No GPU needed.

    python bench/copy_before_compile.py                          # gated_delta_net's seed, sm_90
    python bench/copy_before_compile.py --seed problems/softmax/seeds/tunable --arch sm_90

The offline tuner moves one tunable at a time; this builds the seed and every such move (each
value of each `@tunable` but the current one), each source twice, side by side: in a cache that
only knows exact sources (the build as it was) and in one that also knows preprocessed text.
Each build is the library (verifier/build/compile.py build) and its CUDA facts
(verifier/static_facts.py), as prepare() does on the cuda backend. Prints, per arm, the
compiles run and the CPU seconds they took, and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from hipevolve.core.config import VerifierSettings
from hipevolve.evolution.offline.tunables import parse_tunables, with_values
from hipevolve.verifier import static_facts
from hipevolve.verifier.build import amd_static, cuda_static, nvidia, preprocessed
from hipevolve.verifier.build.compile import Compiler, build

ROOT = Path(__file__).resolve().parents[1]


def neighbours(source: str) -> dict[str, str]:
    """The seed and each one-knob move from it, by name."""
    found = {"seed": source}
    for tunable in parse_tunables(source):
        for value in tunable.values:
            if value != tunable.current:
                found[f"{tunable.name}={value}"] = with_values(source, {tunable.name: value})
    return found


def build_both(source: str, compiler: Compiler, settings: VerifierSettings) -> tuple[bool, float]:
    """Library and facts of `source`, as prepare() builds them: (whether either compiled,
    seconds)."""
    start = time.monotonic()
    library = build(source, compiler, settings.cache_dir, timeout_s=900)
    if not library.ok:
        sys.exit(f"does not build: {library.log[:400]}")
    facts_compiled = []
    real = cuda_static.analyze
    cuda_static.analyze = lambda *a, **k: facts_compiled.append(1) or real(*a, **k)
    try:
        static_facts.static_analysis(source, settings, compiler=compiler)
    finally:
        cuda_static.analyze = real
    return (not library.cached) or bool(facts_compiled), time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seed",
        type=Path,
        default=ROOT / "problems/gated_delta_net/seeds/chunked",
        help="a native seed folder (its kernel.hip declares @tunable knobs)",
    )
    parser.add_argument("--arch", default="sm_90", help="the NVIDIA architecture to build for")
    args = parser.parse_args()
    nvcc = nvidia.find_nvcc()
    if nvcc is None:
        sys.exit("nvcc not found: this bench builds with the cuda backend's compiler")
    argv = nvidia.nvcc_command(nvcc, Path("kernel.hip"), Path("lib.so"), arch=args.arch)
    compiler = Compiler(name="cuda", argv=tuple(argv), toolchain=nvidia.nvcc_version(nvcc))
    amd_static.find_toolchain = lambda: None  # the CUDA facts, as on an NVIDIA machine
    sources = neighbours((args.seed / "kernel.hip").read_text())
    passes = preprocessed.nvcc_passes
    totals = {"exact sources": [0, 0.0], "preprocessed": [0, 0.0]}
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        caches = {"exact sources": Path(a), "preprocessed": Path(b)}
        print(f"{len(sources)} sources: the seed of {args.seed.name} and its one-knob moves")
        for name, source in sources.items():
            row = []
            for arm, cache in caches.items():
                preprocessed.nvcc_passes = passes if arm == "preprocessed" else lambda _: ()
                compiled, seconds = build_both(source, compiler, VerifierSettings(cache_dir=cache))
                totals[arm][0] += compiled
                totals[arm][1] += seconds
                row.append(f"{'compiled' if compiled else 'served':>8} {seconds:6.1f} s")
            print(f"  {name:24} " + "   ".join(row))
    preprocessed.nvcc_passes = passes
    for arm, (compiles, seconds) in totals.items():
        print(f"{arm:>14}: {compiles} of {len(sources)} compiled, {seconds:.0f} s")
    before, after = totals["exact sources"][1], totals["preprocessed"][1]
    print(f"seconds, exact sources / preprocessed: {before / after:.2f}x")


if __name__ == "__main__":
    main()
