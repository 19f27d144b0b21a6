"""Archive at scale: write cost and parent-selection queries at 100, 1,000 and 10,000 candidates.

    python bench/archive_scale.py                    # 100 / 1,000 / 10,000 (about a minute)
    python bench/archive_scale.py --sizes 100 1000   # smoke run, a few seconds

For each size a fresh archive (in a temporary folder) is filled the way a run fills it: per
candidate add_candidate (with a parent and an inspiration), enqueue, mark_in_flight,
record_evaluation (a realistic Evaluation: 4 cases, static facts, a compile log) and set_elite
(4 islands x 64 cells); each call is its own committed transaction, as in a run. Then, at that
size, it times further writes and the queries the evolution asks every step, and prints the
median milliseconds per operation side by side. Goal: every per-step operation under 5 ms at
10,000 candidates. Rows marked "per run" are not per-step (opening the file runs quick_check,
the lineage graph reads every candidate) and are shown for scale only.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from hipevolve.archive.lineage import lineage_graph
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, StaticFacts, Status

GOAL_MS = 5.0
ISLANDS, CELLS = 4, 64
MODEL = "from hipevolve.runtime import kernels\n\nclass ModelNew:\n    pass\n"
KERNEL_BODY = "".join(
    f"    float v{i} = x[tid * {i + 1} % n] * {i}.5f; acc += v{i} * v{i};\n" for i in range(80)
)  # ~5 KB: a mid-sized kernel


def kernel(i: int) -> Candidate:
    hip = (
        f'extern "C" __global__ void k{i}(const float* x, float* y, int n) {{\n'
        "    int tid = blockIdx.x * blockDim.x + threadIdx.x;\n    float acc = 0.f;\n"
        f"{KERNEL_BODY}    if (tid < n) y[tid] = acc;\n}}\n"
    )
    return Candidate(format="native", hip_source=hip, python_source=MODEL, name=f"k{i}")


def evaluation(rng: random.Random) -> Evaluation:
    ok = rng.random() < 0.7
    speedup = rng.lognormvariate(0.0, 0.5)
    return Evaluation(
        status=Status.ok if ok else Status.incorrect,
        task="softmax",
        backend="rocm",
        cases=tuple(
            CaseResult(
                case=f"case{c}",
                correct=ok,
                time_us=100.0 * (c + 1),
                ref_time_us=100.0 * (c + 1) * speedup,
                cv=0.01,
                max_abs_err=1e-6,
            )
            for c in range(4)
        ),
        static=(StaticFacts(kernel="k", target="gfx942", vgprs=64, sgprs=32, occupancy=8),),
        compile_log="warning: loop not unrolled\n" * 60,
        seconds={"compile": 1.4, "check": 2.0, "time": 3.1},
    )


def add_one(a: Archive, run: int, i: int, rng: random.Random, ids: list[int]) -> int:
    parents = [rng.choice(ids)] if ids else []
    inspirations = [rng.choice(ids)] if ids else []
    island = i % ISLANDS
    cid = a.add_candidate(
        run, kernel(i), parents=parents, inspirations=inspirations, island=island, agent="mutator"
    )
    a.enqueue(cid)
    a.mark_in_flight(cid)
    ev = a.record_evaluation(cid, evaluation(rng), '{"task":"softmax"}', "hipcc 6.4 gfx942")
    a.set_elite(run, island, f"cell{rng.randrange(CELLS)}", cid, ev.fitness)
    ids.append(cid)
    return cid


def median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def measure(n: int, folder: Path, repeats: int) -> dict[str, float]:
    rng = random.Random(n)
    path = folder / f"scale{n}.db"
    ids: list[int] = []
    with Archive.open(path) as a:
        run = a.start_run("softmax", {"islands": ISLANDS}, seed=0, budget=n)
        t = time.perf_counter()
        for i in range(n):
            add_one(a, run, i, rng, ids)
        fill_s = time.perf_counter() - t
        print(f"  filled {n:,} candidates in {fill_s:.1f} s", flush=True)

        out: dict[str, float] = {}
        nxt = iter(range(n, n + 10 * repeats))
        out["add_candidate (incl. source hash)"] = median_ms(
            lambda: ids.append(a.add_candidate(run, kernel(next(nxt)), parents=[ids[-1]])),
            repeats,
        )
        sample = kernel(0)
        out["  of which source_hash"] = median_ms(lambda: sample.source_hash, repeats)
        out["add_candidate, duplicate"] = median_ms(lambda: a.add_candidate(run, sample), repeats)
        fresh = iter(ids[n:])
        out["record_evaluation"] = median_ms(
            lambda: a.record_evaluation(next(fresh), evaluation(rng), "s", "t"), repeats
        )
        out["enqueue + mark_in_flight"] = median_ms(
            lambda: (a.enqueue(ids[-1]), a.mark_in_flight(ids[-1])), repeats
        )
        out["set_elite"] = median_ms(
            lambda: a.set_elite(run, 0, f"cell{rng.randrange(CELLS)}", ids[-1], 1.0), repeats
        )
        out["elites of an island"] = median_ms(lambda: a.elites(run, rng.randrange(4)), repeats)
        out["best-8 by fitness"] = median_ms(lambda: a.top(run, 8), repeats)
        out["random elite"] = median_ms(
            lambda: a.random_elite(run, rng.randrange(ISLANDS), rng), repeats
        )
        out["best"] = median_ms(lambda: a.best(run), repeats)
        out["evaluated(key) (cache lookup)"] = median_ms(lambda: a.evaluated("0" * 64), repeats)
        out["count_evaluations"] = median_ms(lambda: a.count_evaluations(run), repeats)
        out["lineage_graph (per run)"] = median_ms(lambda: lineage_graph(a, run), 3)
    out["open with quick_check (per run)"] = median_ms(lambda: Archive.open(path).close(), 3)
    out["file MB (per run)"] = path.stat().st_size / 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[100, 1000, 10000],
        help="candidate counts (default: 100 1000 10000)",
    )
    parser.add_argument(
        "--repeats", type=int, default=100, help="timed repetitions per operation (default: 100)"
    )
    args = parser.parse_args()
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="hipevolve-archive-scale-") as tmp:
        for n in args.sizes:
            print(f"n = {n:,}", flush=True)
            results[n] = measure(n, Path(tmp), args.repeats)
    names = list(results[args.sizes[0]])
    width = max(map(len, names)) + 2
    header = "".join(f"{f'n={n:,}':>12}" for n in args.sizes)
    print(f"\n{'ms per operation (median)':<{width}}{header}")
    for name in names:
        print(f"{name:<{width}}" + "".join(f"{results[n][name]:>12.3f}" for n in args.sizes))
    largest = results[args.sizes[-1]]
    slow = [k for k, v in largest.items() if "per run" not in k and v >= GOAL_MS]
    verdict = "met" if not slow else f"missed by: {', '.join(slow)}"
    print(f"\ngoal: per-step operations under {GOAL_MS:g} ms at n={args.sizes[-1]:,}: {verdict}")


if __name__ == "__main__":
    main()
