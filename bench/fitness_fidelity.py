"""Does the search's fitness rank kernels the way users measure them? (issue 33)

    python bench/fitness_fidelity.py repeat                  # (a) 5 tasks, 5 fresh judges each
    python bench/fitness_fidelity.py repeat --tasks softmax --repeats 3
    python bench/fitness_fidelity.py rank --variants 12      # (b) GDN prefill variants

(a) repeat: one kernel (the task's first seed, or its reference lowered offline) evaluated --repeats times, each in a fresh judge
    (a new evaluator: new judge processes, new sandboxes), against one run baseline timed at the
    start as a run does (evolution/referee.py). Prints each fitness and max/min; the goal is at most
    1.03. Beside it, max/min of the fitness the old way (the reference timed inside each
    evaluation), to show what the baseline removes.
(b) rank: --variants distinct kernels (configurations of the gated_delta_net prefill seed's
    tunables that run different work on this GPU: launched kernels and their machine code), each scored
    by the search's fitness (one evaluation, rebased on the run baseline), then each timed in this
    process in CUDA-graph mode on every timed case (bench/gdn_vs_fla.py's protocol: flush, hold
    kernel, replay). Prints both rankings and Kendall's tau between them; the goal is at least 0.9.

Needs a CUDA GPU (the cuda backend: the HIP-on-NVIDIA layer). Tables to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hipevolve.app.run_job import first_candidates  # noqa: E402
from hipevolve.core.baseline import RunBaseline  # noqa: E402
from hipevolve.core.candidate import Candidate, load_candidate, write_candidate  # noqa: E402
from hipevolve.core.config import FitnessSettings, VerifierSettings  # noqa: E402
from hipevolve.core.taskspec import TaskSpec  # noqa: E402
from hipevolve.evolution.offline.tunables import (  # noqa: E402
    configuration_key,
    configurations,
    parse_tunables,
    with_values,
)
from hipevolve.problems import get_task  # noqa: E402
from hipevolve.verifier.evaluators import pipeline_evaluator  # noqa: E402

REPEAT_TASKS = ("softmax", "rmsnorm", "gemm_bf16", "gated_delta_net", "gated_delta_net_decode")
T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", file=sys.stderr, flush=True)


def run_baseline(task: TaskSpec, settings: VerifierSettings, trials: int) -> RunBaseline:
    evaluator = pipeline_evaluator(task, settings, "cuda")
    try:
        found = evaluator.baseline(trials)
    finally:
        evaluator.close()
    if not isinstance(found, RunBaseline):
        raise SystemExit(f"{task.name}: no baseline: {found}")
    return found


def fresh_evaluation(task: TaskSpec, settings: VerifierSettings, candidate: Candidate):
    """One evaluation in a fresh judge: a new evaluator, closed after."""
    evaluator = pipeline_evaluator(task, settings, "cuda")
    try:
        return evaluator([candidate])[0]
    finally:
        evaluator.close()


def repeat(opts: argparse.Namespace) -> int:
    settings = VerifierSettings(cache_dir=opts.cache)
    fitness = FitnessSettings()
    print(f"{'task':24} {'fitness over the run baseline (each a fresh judge)':52} "
          f"{'max/min':>8} {'old max/min':>11}")  # fmt: skip
    worst = 0.0
    for name in opts.tasks:
        task = get_task(name)
        candidate = first_candidates(task)[0].candidate  # a seed, or the reference lowered
        baseline = run_baseline(task, settings, fitness.baseline_trials)
        log(f"{name}: baseline {', '.join(f'{c} {b.time_us:.1f} us' for c, b in baseline.cases.items())}")
        new, old = [], []
        for i in range(opts.repeats):
            evaluation = fresh_evaluation(task, settings, candidate)
            if not evaluation.ok:
                print(f"{name:24} evaluation {i} {evaluation.status.value}: {evaluation.message}")
                return 1
            old.append(evaluation.fitness)
            new.append(baseline.rebase(evaluation, fitness.check_drift).fitness)
            log(f"{name}: repeat {i}: fitness {new[-1]:.4f} (old {old[-1]:.4f})")
        ratio, old_ratio = max(new) / min(new), max(old) / min(old)
        worst = max(worst, ratio)
        shown = " ".join(f"{f:.4f}" for f in new)
        print(f"{name:24} {shown:52} {ratio:8.4f} {old_ratio:11.4f}", flush=True)
    print(f"worst max/min {worst:.4f} (goal: at most 1.03)")
    return 0 if worst <= 1.03 else 1


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float:
    """Kendall's tau-b of two paired samples."""
    concordant = discordant = ties_a = ties_b = 0
    n = len(a)
    for i in range(n):
        for j in range(i + 1, n):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b))
    return (concordant - discordant) / denominator if denominator else 0.0


def variants(task: TaskSpec, count: int, cache: Path) -> dict[str, Candidate]:
    """Up to `count` distinct kernels among 3 * count configurations of the task's first seed,
    drawn at random (seed 0) from its space. Distinct on this GPU means different work runs:
    configurations whose launched kernels (name, grid, block on every timed case) and the machine
    code of those kernels are the same are one kernel, however their sources differ (an AMD-only
    tunable, a tunable of a code path this GPU does not take, a launch-time choice that lands on
    the same kernel); ranking copies of one kernel against each other ranks noise."""
    import random

    seed = load_candidate(task.seeds[0])
    space = list(configurations(parse_tunables(seed.hip_source or "")))
    sample = random.Random(0).sample(space, min(len(space), 3 * count))  # spread, repeatable
    tried = {configuration_key(c): Candidate(
        format="native", hip_source=with_values(seed.hip_source or "", c),
        python_source=seed.python_source, name="gdn_variant") for c in sample}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        folders = {n: write_candidate(c, Path(tmp) / f"c{i}") for i, (n, c) in enumerate(tried.items())}
        keys = work_keys(task, folders, cache)
    found: dict[str, Candidate] = {}
    seen: set[str] = set()
    for name, key in keys.items():
        if key is None or key in seen or len(found) >= count:
            continue
        seen.add(key)
        found[name] = tried[name].model_copy(update={"name": f"gdn_variant_{len(found)}"})
    log(f"{len(tried)} configurations built, {len(seen)} distinct kernels, {len(found)} taken")
    return found


def work_keys(task: TaskSpec, folders: dict[str, Path], cache: Path) -> dict[str, str | None]:
    """name -> a digest of the work the candidate does on this GPU (None: it did not build or run):
    one call per timed case under the profiler, each launched kernel's name, grid and block, and
    the machine code of the library's functions of those names."""
    import hashlib
    import json

    import gdn_vs_fla as bench
    import torch

    from hipevolve.verifier.build.backends import compiler_for
    from hipevolve.verifier.build.compile import build_many

    sources = [(folder / "kernel.hip").read_text() for folder in folders.values()]
    built = dict(zip(folders, build_many(sources, compiler_for("cuda"), cache), strict=True))
    models = bench.native_models(folders, cache)  # the same builds, from the cache
    inputs = {c.name: bench.case_inputs(task, c.name)[0][0] for c in task.cases
              if c.timed and not c.small}  # fmt: skip
    keys: dict[str, str | None] = {}
    for name, model in models.items():
        if isinstance(model, str):
            log(f"{name}: {model[:120]}")
            keys[name] = None
            continue
        launched = [[case, *launches(lambda m=model, a=args: m(*a))] for case, args in inputs.items()]
        names = {launched_name(k[0]) for _, *ks in launched for k in ks}
        code = function_code(built[name].library)
        mine = sorted((f, d) for f, d in code.items() if base_name(f) in names)
        keys[name] = hashlib.sha256(json.dumps([launched, mine]).encode()).hexdigest()
        torch.cuda.empty_cache()
    return keys


def launches(call) -> list[tuple[str, list, list]]:  # noqa: ANN001
    """(kernel name, grid, block) of each GPU kernel one call launches, in order (a warm-up first)."""
    import torch
    from graph_timer import kernel_events

    call()
    torch.cuda.synchronize()
    return [(e["name"], e["args"].get("grid"), e["args"].get("block")) for e in kernel_events(call)]


def launched_name(demangled: str) -> str:
    """A launched kernel's own identifier, from the profiler's demangled name: `void f<32,
    3>(int)` -> f."""
    return demangled.split("<")[0].split("(")[0].split()[-1]


def base_name(symbol: str) -> str:
    """The function's own identifier in a (possibly Itanium-mangled) symbol: _Z11gdn_tc_prep... ->
    gdn_tc_prep; an extern "C" symbol is its own name."""
    import re

    mangled = re.match(r"_Z(\d+)", symbol)
    if mangled is None:
        return symbol
    return symbol[mangled.end():mangled.end() + int(mangled[1])]


def function_code(library: Path) -> dict[str, str]:
    """symbol -> sha256 of its SASS, for each GPU function in the library (cuobjdump; {} without)."""
    import shutil
    import subprocess

    if not shutil.which("cuobjdump"):
        return {}
    done = subprocess.run(["cuobjdump", "-sass", str(library)], capture_output=True, text=True,
                          check=False)  # fmt: skip
    return sass_by_function(done.stdout)


def sass_by_function(listing: str) -> dict[str, str]:
    """symbol -> sha256 of its part of a `cuobjdump -sass` listing."""
    import hashlib
    import re

    parts = re.split(r"^\s*Function : (\S+)\s*$", listing, flags=re.M)
    return {parts[i]: hashlib.sha256(parts[i + 1].encode()).hexdigest()
            for i in range(1, len(parts) - 1, 2)}  # fmt: skip


def graph_times(task: TaskSpec, folders: dict[str, Path], cache: Path) -> dict[str, dict[str, float]]:
    """variant -> case -> CUDA-graph time (us), by bench/gdn_vs_fla.py's protocol."""
    import gdn_vs_fla as bench
    import torch

    models = bench.native_models(folders, cache)
    timer, times = bench.Timer(), {name: {} for name in folders}
    for case in task.cases:
        if not case.timed or case.small:
            continue
        sets, _ = bench.case_inputs(task, case.name)
        for name, model in models.items():
            if isinstance(model, str):
                continue
            graph, _ = bench.capture(lambda a, m=model: m(*a), sets)
            times[name][case.name] = timer.graph(graph, len(sets), 30)
            del graph
            torch.cuda.synchronize()
        log(f"graph times of {case.name} done")
    return times


def rank(opts: argparse.Namespace) -> int:
    task = get_task("gated_delta_net")
    settings = VerifierSettings(cache_dir=opts.cache)
    chosen = variants(task, opts.variants, opts.cache / "variants")
    evaluator = pipeline_evaluator(task, settings, "cuda")
    try:
        baseline = evaluator.baseline(FitnessSettings().baseline_trials)
        if not isinstance(baseline, RunBaseline):
            raise SystemExit(f"no baseline: {baseline}")
        evaluations = dict(zip(chosen, evaluator(list(chosen.values())), strict=True))
    finally:
        evaluator.close()
    fitness = {}
    for name, evaluation in evaluations.items():
        if evaluation.ok:
            fitness[name] = baseline.rebase(evaluation).fitness
        else:
            log(f"{name}: {evaluation.status.value}: {evaluation.message[:120]}")
    with tempfile.TemporaryDirectory() as tmp:
        folders = {n: write_candidate(chosen[n], Path(tmp) / f"v{i}") for i, n in enumerate(fitness)}
        graph = graph_times(task, folders, opts.cache / "gdn-bench")
    names = [n for n in fitness if len(graph.get(n, {})) == len(baseline.cases)]
    bench_speed = {n: math.exp(statistics.fmean(
        [math.log(baseline.cases[c].time_us / t) for c, t in graph[n].items()])) for n in names}  # fmt: skip
    print(f"{'variant':48} {'search fitness':>14} {'graph-mode speedup':>18}")
    for n in sorted(names, key=lambda n: -fitness[n]):
        print(f"{n:48} {fitness[n]:14.3f} {bench_speed[n]:18.3f}")
    tau = kendall_tau([fitness[n] for n in names], [bench_speed[n] for n in names])
    print(f"{len(names)} variants ranked; Kendall tau {tau:.3f} (goal: at least 0.9 over 12 or more)")
    return 0 if tau >= 0.9 and len(names) >= 12 else 1


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    a = sub.add_parser("repeat", help="(a) one kernel, fresh judges")
    a.add_argument("--tasks", type=lambda s: s.split(","), default=list(REPEAT_TASKS))
    a.add_argument("--repeats", type=int, default=5)
    b = sub.add_parser("rank", help="(b) GDN prefill variants, search fitness vs graph times")
    b.add_argument("--variants", type=int, default=12)
    for s in (a, b):
        s.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "hipevolve-fidelity")
    opts = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("needs a GPU: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    return repeat(opts) if opts.what == "repeat" else rank(opts)


if __name__ == "__main__":
    sys.exit(main())
