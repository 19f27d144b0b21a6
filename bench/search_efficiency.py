"""Search efficiency: our search against random, exhaustive and Optuna's TPE over tunable spaces.

    python bench/search_efficiency.py --measure --out search_table.json     # GPU: measure, search
    python bench/search_efficiency.py --table search_table.json             # CPU: search a table
    python bench/search_efficiency.py --measure --tasks rmsnorm --limit 8 --out smoke.json
                                                       # smoke run: 8 configurations, no search
    python bench/search_efficiency.py --measure --deadline-s 540 --out search_table.json
                                                       # in time-boxed pieces: rerun to go on
    python bench/search_efficiency.py --landscape      # CPU: ours vs Optuna vs random, 200 evals
    python bench/search_efficiency.py --landscape --tasks rmsnorm --seeds 0 --budget 50  # smoke

Phase `measure` (GPU) evaluates every configuration of each task's tunable seed
(problems/<task>/seeds/tunable) once through the real verifier pipeline (evaluate_many, in
batches) and writes a JSON table: task -> configuration -> the Evaluation (status, per-case times,
static facts) and its fitness, the geometric-mean speedup over the timed cases, with the wall time
measuring took. The table is rewritten after each batch: a killed or time-limited measure run
keeps what it measured, and running it again with the same --out measures only the rest.

Phase `search` (CPU) reads the table and runs, for seeds 0, 1, 2: our search (run_evolution with
the real offline policy, default EvolutionSettings and a real temporary SQLite archive, its
evaluator answering from the table with the measured Evaluation objects), random search (uniform
without replacement) and exhaustive search (enumeration order, one run). It prints best-so-far
over the exhaustive optimum at 5, 10, 15, 20, 25, 50 and 100% of the space's evaluations (median
of the seeds) and whether each goal of issue 4 holds per task:
- 95% of the exhaustive optimum within 25% of the space's evaluations (our median);
- ahead of random search at every budget: our median at least random's at each budget. A tie
  counts (once random search has covered the space it holds the optimum, which no search beats).
A configuration that is not ok counts as fitness 0 for every search and is listed: every
configuration of a seed should be ok. A task whose table is incomplete (--limit) is not searched.

Phase `landscape` (CPU, no table needed) compares, on the same budget (--budget, default 200
evaluations, the main job's), our search with a kept optimiser library's sampler: Optuna's TPE
(categorical parameters, one per tunable; a configuration it asks for again is answered from a
cache at no cost, so it too spends its budget on distinct kernels) and random search. The
landscape is synthetic but spans each seed's real declared space: a factor per tunable value, an
interaction factor per adjacent pair of tunables, 3% of configurations incorrect, all drawn from
an rng seeded by the task's name. It prints best-so-far over the optimum at 25, 50, 100, 150 and
200 evaluations (median of the seeds), the method with the largest mean over those points per
task, and the overall verdict. Without Optuna installed the bench says so and compares the rest.

Note on `suspect`: the verifier flags a case faster than 10x its reference (suspect_speedup). The
rmsnorm reference is eager fp32 PyTorch, about 40 bytes of HBM traffic per element (cast, square,
mean, two multiplies, cast back) where a fused kernel needs 4 (x in, y out; its second read of x
hits L2), so honest fused kernels land near 10x on the H200 and may be flagged. Such rows show as
`suspect` in the not-ok list; --suspect-speedup raises the gate for a measurement (recorded in the
table) when that is the cause.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive, canonical_json
from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.offline.tunables import (
    Configuration,
    configuration_key,
    configurations,
    current_configuration,
    parse_tunables,
    with_values,
)
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import get_task
from hipevolve.verifier.evaluators import BaseEvaluator, Evaluator

TASKS = ("softmax", "rmsnorm", "silu_and_mul", "gated_delta_net_decode")
BUDGETS = (5, 10, 15, 20, 25, 50, 100)  # percent of the space
GOAL_RATIO, GOAL_BUDGET = 0.95, 25
SEEDS = (0, 1, 2)
METHODS = ("ours", "random", "exhaustive")


# ------------------------------------------------------------------------------------ the table


class Measured(BaseModel):
    """One configuration as the verifier scored it."""

    configuration: dict[str, str]
    fitness: float = Field(description="geometric-mean speedup over the timed cases; 0 if not ok")
    evaluation: Evaluation


class TaskTable(BaseModel):
    task: str
    seed_hash: str = Field(description="source hash of the seed measured (its own configuration)")
    seed_files: str = Field(
        default="",
        description="sha256 of the seed's kernel.hip and model.py bytes; the normalised source "
        "hash above depends on the Python version (ast), this does not",
    )
    space: int = Field(description="configurations the seed declares")
    rows: dict[str, Measured] = Field(default_factory=dict, description="configuration key -> row")
    wall_s: float = Field(default=0.0, description="wall seconds spent measuring this task")

    @property
    def complete(self) -> bool:
        return len(self.rows) == self.space


class Table(BaseModel):
    backend: str
    toolchain: str = Field(description="compiler, device architecture and torch of the measure")
    device: str = ""
    trials: int = Field(description="timed trials per case")
    suspect_speedup: float = Field(description="speedups above this were flagged suspect")
    tasks: dict[str, TaskTable] = Field(default_factory=dict)
    wall_s: float = Field(default=0.0, description="wall seconds of the measure phase, in all")


def save_table(table: Table, path: Path) -> None:
    """Writes next to `path` and renames: a kill mid-write leaves the previous table whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(table.model_dump_json(indent=1) + "\n")
    os.replace(tmp, path)


def load_table(path: Path) -> Table:
    return Table.model_validate_json(path.read_text())


def seed_candidate(task: TaskSpec) -> Candidate:
    if not task.seeds:
        raise SystemExit(f"task {task.name} has no seed kernel to measure")
    return load_candidate(task.seeds[0])


def seed_files(task: TaskSpec) -> str:
    """sha256 over the seed folder's kernel.hip and model.py, byte for byte."""
    digest = hashlib.sha256()
    for name in ("kernel.hip", "model.py"):
        digest.update((task.seeds[0] / name).read_bytes())
    return digest.hexdigest()


def seed_changed(task: TaskSpec, entry: TaskTable) -> bool:
    """Whether the seed differs from the one measured: by its files where the table recorded
    them, else by the normalised source hash (which can differ across Python versions)."""
    if entry.seed_files:
        return seed_files(task) != entry.seed_files
    return seed_candidate(task).source_hash != entry.seed_hash


def space_of(seed: Candidate) -> list[Configuration]:
    """The seed's configurations in enumeration order (the exhaustive search's order)."""
    return list(configurations(parse_tunables(seed.hip_source or "")))


def at_configuration(seed: Candidate, config: Configuration) -> Candidate:
    base = seed.name.split("@", 1)[0]
    return seed.model_copy(
        update={
            "hip_source": with_values(seed.hip_source or "", config),
            "name": f"{base}@{configuration_key(config)}",
            "origin": None,
        }
    )


# ------------------------------------------------------------------------------------ measure


def measure(
    names: Sequence[str],
    out: Path,
    batch: int,
    limit: int | None = None,
    deadline_s: float | None = None,
    **verifier: float | None,
) -> Table:
    """Evaluates the configurations not yet in `out` (GPU), saving the table after each batch.
    `deadline_s`: start no batch that would end past it (by the last batch's time); `verifier`:
    settings to override (trials, suspect_speedup); None keeps the configured one."""
    from hipevolve.core.config import load_settings
    from hipevolve.verifier.evaluators import pipeline_evaluator

    settings = load_settings().verifier
    settings = settings.model_copy(update={k: v for k, v in verifier.items() if v is not None})
    wanted = (settings.trials, settings.suspect_speedup)
    started = time.monotonic()
    stop_at = started + deadline_s if deadline_s is not None else None
    table: Table | None = load_table(out) if out.exists() else None
    for name in names:
        task = get_task(name)
        evaluator = pipeline_evaluator(task, settings, "auto")
        if evaluator.backend not in ("cuda", "rocm"):
            raise SystemExit(f"the measure phase runs kernels on a GPU; found {evaluator.backend}")
        if table is None:
            table = Table(
                backend=evaluator.backend,
                toolchain=evaluator.toolchain,
                trials=settings.trials,
                suspect_speedup=settings.suspect_speedup,
            )
        elif (table.toolchain, table.trials, table.suspect_speedup) != (
            evaluator.toolchain,
            *wanted,
        ):
            raise SystemExit(
                f"{out} was measured with {table.toolchain}, {table.trials} trials, suspect "
                f"above {table.suspect_speedup:g}x; here it is {evaluator.toolchain}, "
                f"{wanted[0]} trials, {wanted[1]:g}x: pass another --out"
            )
        measure_task(table, task, evaluator, out, batch, limit, stop_at)
    assert table is not None
    if not table.device:
        table.device = _device_name()
        save_table(table, out)
    print(f"measured in {time.monotonic() - started:.0f} s; table {out}", flush=True)
    return table


def measure_task(
    table: Table,
    task: TaskSpec,
    evaluate: Evaluator,
    out: Path,
    batch: int,
    limit: int | None = None,
    stop_at: float | None = None,
) -> None:
    """Adds the task's unmeasured configurations to `table`, in batches, saving after each;
    stops before a batch that would end past `stop_at` (time.monotonic())."""
    seed = seed_candidate(task)
    space = space_of(seed)
    entry = table.tasks.setdefault(
        task.name,
        TaskTable(task=task.name, seed_hash=seed.source_hash, seed_files=seed_files(task),
                  space=len(space)),  # fmt: skip
    )
    if seed_changed(task, entry):
        raise SystemExit(
            f"{out}: the {task.name} seed changed since it was measured: use another --out"
        )
    todo = [c for c in space if configuration_key(c) not in entry.rows]
    # A fixed shuffle: slow drift of the GPU (clocks, temperature) spreads over the whole space
    # instead of favouring one end of the enumeration order.
    random.Random(task.name).shuffle(todo)
    if limit is not None:
        todo = todo[: max(limit - len(entry.rows), 0)]
    last_s = 0.0
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        began = time.monotonic()
        if stop_at is not None and began + last_s > stop_at:
            print(f"  {task.name}: time box reached; run again with the same --out to go on")
            return
        results = evaluate([at_configuration(seed, c) for c in chunk])
        for config, evaluation in zip(chunk, results, strict=True):
            entry.rows[configuration_key(config)] = Measured(
                configuration=config, fitness=evaluation.fitness, evaluation=evaluation
            )
        spent = last_s = time.monotonic() - began
        entry.wall_s += spent
        table.wall_s += spent
        save_table(table, out)
        ok = sum(r.evaluation.ok for r in entry.rows.values())
        print(
            f"  {task.name}: {len(entry.rows)}/{entry.space} measured, {ok} ok, "
            f"{spent / len(chunk):.1f} s per evaluation",
            flush=True,
        )


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""


# ------------------------------------------------------------------------------------ search


class TableEvaluator(BaseEvaluator):
    """An evolution Evaluator that answers from a measured table, in the order asked."""

    def __init__(self, task: TaskSpec, table: TaskTable, toolchain: str) -> None:
        self.task, self.table = task, table
        self.settings_key = canonical_json({"task": task.name, "table": "search_efficiency"})
        self.toolchain = toolchain
        self.order: list[str] = []  # configuration keys, in evaluation order

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        results = []
        for candidate in candidates:
            key = configuration_key(current_configuration(parse_tunables(candidate.hip_source)))
            if key not in self.table.rows:
                raise KeyError(f"{self.task.name}: {key} is not in the table (outside the space?)")
            self.order.append(key)
            results.append(self.table.rows[key].evaluation)
        return results


class Curve(BaseModel):
    method: str
    median: dict[int, float] = Field(description="budget percent -> median best-so-far/optimum")
    per_seed: list[list[float]] = Field(description="per seed, best-so-far/optimum per budget")
    evaluations: list[int] = Field(description="evaluations each seed made")
    stops: list[str] = Field(default_factory=list, description="why our search stopped, per seed")


class TaskReport(BaseModel):
    task: str
    space: int
    budgets: dict[int, int] = Field(description="budget percent -> evaluations")
    optimum: float
    optimum_configuration: str
    seed_fitness: float
    not_ok: dict[str, str] = Field(description="configuration key -> status, for non-ok ones")
    curves: dict[str, Curve]
    goal_95_at_25: bool
    ahead_of_random: bool
    behind_at: list[int] = Field(description="budgets where random search is ahead")


def budgets_for(space: int) -> dict[int, int]:
    return {pct: max(1, math.ceil(space * pct / 100)) for pct in BUDGETS}


def best_so_far(
    order: Sequence[str], fitness: dict[str, float], budgets: dict[int, int], optimum: float
) -> list[float]:
    """Best fitness among the first n evaluated, over the optimum, at each budget n."""
    return [max((fitness[k] for k in order[:n]), default=0.0) / optimum for n in budgets.values()]


def our_search(
    task: TaskSpec, table: TaskTable, toolchain: str, seed: int, budget: int | None = None
) -> tuple[list[str], str]:
    """(configuration keys in evaluation order, stop reason) of one run_evolution on the table,
    with `budget` evaluations (default: the whole space)."""
    evaluator = TableEvaluator(task, table, toolchain)
    with (
        tempfile.TemporaryDirectory(prefix="hipevolve-search-") as tmp,
        Archive.open(Path(tmp) / "search.db") as archive,
    ):
        summary = run_evolution(
            task, archive, EvolutionSettings(), evaluator, first=first_candidates(task),
            budget=budget or table.space, seed=seed,
        )  # fmt: skip
    return evaluator.order, summary.reason


def search_task(
    task: TaskSpec, table: TaskTable, toolchain: str = "table", seeds: Sequence[int] = SEEDS
) -> TaskReport:
    """Our, random and exhaustive search on one task's complete table."""
    seed = seed_candidate(task)
    keys = [configuration_key(c) for c in space_of(seed)]
    missing = [k for k in keys if k not in table.rows]
    if missing:
        raise ValueError(f"{task.name}: {len(missing)} of {len(keys)} configurations unmeasured")
    fitness = {k: table.rows[k].evaluation.fitness for k in keys}  # 0 unless ok
    optimum_key = max(keys, key=lambda k: fitness[k])
    optimum = fitness[optimum_key]
    if optimum <= 0:
        raise ValueError(f"{task.name}: no configuration is ok, so there is nothing to find")
    budgets = budgets_for(len(keys))
    orders: dict[str, list[list[str]]] = {"ours": [], "random": [], "exhaustive": [keys]}
    stops = []
    for s in seeds:
        order, reason = our_search(task, table, toolchain, s)
        orders["ours"].append(order)
        stops.append(reason)
        orders["random"].append(random.Random(s).sample(keys, len(keys)))
    curves = {}
    for method in METHODS:
        per_seed = [best_so_far(o, fitness, budgets, optimum) for o in orders[method]]
        median = {pct: statistics.median(r[i] for r in per_seed) for i, pct in enumerate(budgets)}
        curves[method] = Curve(
            method=method,
            median=median,
            per_seed=per_seed,
            evaluations=[len(o) for o in orders[method]],
            stops=stops if method == "ours" else [],
        )
    ours, rand = curves["ours"].median, curves["random"].median
    behind = [pct for pct in BUDGETS if ours[pct] < rand[pct]]
    own = configuration_key(current_configuration(parse_tunables(seed.hip_source or "")))
    return TaskReport(
        task=task.name,
        space=len(keys),
        budgets=budgets,
        optimum=optimum,
        optimum_configuration=optimum_key,
        seed_fitness=fitness[own],
        not_ok={
            k: str(table.rows[k].evaluation.status) for k in keys if not table.rows[k].evaluation.ok
        },
        curves=curves,
        goal_95_at_25=ours[GOAL_BUDGET] >= GOAL_RATIO,
        ahead_of_random=not behind,
        behind_at=behind,
    )


# ------------------------------------------------------------------------------------ landscape

LANDSCAPE_BUDGET = 200  # evaluations: the main job's `--budget 200`
LANDSCAPE_POINTS = (25, 50, 100, 150, 200)  # evaluations at which best-so-far is reported
LANDSCAPE_METHODS = ("ours", "optuna-tpe", "random")
FAIL_SHARE = 0.03  # configurations that fail (incorrect): fitness 0 for every search


def _landscape_evaluation(task: TaskSpec, speedup: float | None) -> Evaluation:
    """What the verifier returns for a kernel of that speedup (None: an incorrect one)."""
    ok = speedup is not None
    cases = tuple(
        CaseResult(case=c.name, correct=ok, time_us=100.0 / speedup if ok else None,
                   ref_time_us=100.0 if ok else None)
        for c in task.timed_cases
    )  # fmt: skip
    return Evaluation(status=Status.ok if ok else Status.incorrect, task=task.name,
                      backend="landscape", cases=cases,
                      message="" if ok else "max abs error 3.1")  # fmt: skip


def landscape_table(task: TaskSpec) -> TaskTable:
    """A complete table over the seed's real declared space, no GPU: each tunable value a factor,
    each pair of adjacent tunables an interaction factor (so the best value of one depends on
    another, as block size and vector width do), FAIL_SHARE of the space incorrect; all drawn
    from an rng seeded by the task's name."""
    seed = seed_candidate(task)
    tunables = parse_tunables(seed.hip_source or "")
    rng = random.Random(f"landscape/{task.name}")
    single = {(t.name, v): rng.uniform(0.6, 1.4) for t in tunables for v in t.values}
    pairs = {
        (a.name, va, b.name, vb): rng.uniform(0.75, 1.3)
        for a, b in zip(tunables, tunables[1:], strict=False)
        for va in a.values
        for vb in b.values
    }
    rows = {}
    for config in space_of(seed):
        names = [t.name for t in tunables]
        speedup = math.prod(single[(n, config[n])] for n in names)
        speedup *= math.prod(pairs[(a, config[a], b, config[b])]
                             for a, b in zip(names, names[1:], strict=False))  # fmt: skip
        failed = rng.random() < FAIL_SHARE and config != current_configuration(tunables)
        evaluation = _landscape_evaluation(task, None if failed else speedup)
        rows[configuration_key(config)] = Measured(
            configuration=config, fitness=evaluation.fitness, evaluation=evaluation
        )
    return TaskTable(task=task.name, seed_hash=seed.source_hash, seed_files=seed_files(task),
                     space=len(rows), rows=rows)  # fmt: skip


def optuna_search(table: TaskTable, space: Sequence[Configuration], budget: int, seed: int
                  ) -> list[str] | None:  # fmt: skip
    """Configuration keys in the order Optuna's TPE sampler first asks for them, until `budget`
    distinct ones (a repeat is answered from a cache at no cost, as a tuner would). None when
    Optuna is not installed."""
    try:
        import optuna
    except ImportError:
        return None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    names = list(space[0])
    choices = {n: sorted({c[n] for c in space}, key=lambda v: (len(v), v)) for n in names}
    sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    order: list[str] = []
    wanted = min(budget, len(space))
    for _ in range(wanted * 20):  # TPE repeats itself late in a small space: cap the asks
        if len(order) >= wanted:
            break
        trial = study.ask()
        config = {n: trial.suggest_categorical(n, choices[n]) for n in names}
        key = configuration_key(config)
        if key not in order:
            order.append(key)
        study.tell(trial, table.rows[key].evaluation.fitness)
    return order


class LandscapeReport(BaseModel):
    task: str
    space: int
    budget: int
    optimum: float
    seed_fitness: float
    median: dict[str, dict[int, float]] = Field(
        description="method -> evaluations -> median best-so-far / optimum over the seeds"
    )
    evaluations: dict[str, list[int]] = Field(description="method -> evaluations, per seed")
    stops: list[str] = Field(description="why our search stopped, per seed")
    missing: list[str] = Field(default_factory=list, description="methods not installed here")
    winner: str = Field(
        description="the method whose median curve has the largest mean over the reported "
        "points (the area under best-so-far: early finds count)"
    )


def compare_on_landscape(task: TaskSpec, table: TaskTable, budget: int, seeds: Sequence[int]
                         ) -> LandscapeReport:  # fmt: skip
    """Ours, Optuna's TPE and random search, `budget` evaluations each, on one table."""
    seed = seed_candidate(task)
    space = space_of(seed)
    keys = [configuration_key(c) for c in space]
    fitness = {k: table.rows[k].evaluation.fitness for k in keys}
    optimum = max(fitness.values())
    points = {p: p for p in LANDSCAPE_POINTS if p <= budget} | {budget: budget}
    orders: dict[str, list[list[str]]] = {m: [] for m in LANDSCAPE_METHODS}
    stops, missing = [], []
    for s in seeds:
        order, reason = our_search(task, table, "landscape", s, budget=budget)
        orders["ours"].append(order)
        stops.append(reason)
        orders["random"].append(random.Random(s).sample(keys, min(budget, len(keys))))
        tpe = optuna_search(table, space, budget, s)
        if tpe is None:
            missing = ["optuna-tpe"]
        else:
            orders["optuna-tpe"].append(tpe)
    median = {}
    for method, runs in orders.items():
        if runs:
            curves = [best_so_far(o, fitness, points, optimum) for o in runs]
            median[method] = {p: statistics.median(c[i] for c in curves)
                              for i, p in enumerate(points)}  # fmt: skip
    own = configuration_key(current_configuration(parse_tunables(seed.hip_source or "")))
    return LandscapeReport(
        task=task.name, space=len(keys), budget=budget, optimum=optimum,
        seed_fitness=fitness[own], median=median,
        evaluations={m: [len(o) for o in runs] for m, runs in orders.items() if runs},
        stops=stops, missing=missing,
        winner=max(median, key=lambda m: (statistics.fmean(median[m].values()), m == "ours")),
    )  # fmt: skip


def format_landscape(reports: Sequence[LandscapeReport]) -> str:
    lines = ["synthetic landscapes over each seed's declared space (no GPU): best-so-far / optimum,",
             "median of the seeds, after n evaluations"]  # fmt: skip
    for r in reports:
        points = list(next(iter(r.median.values())))
        lines.append(f"{r.task} ({r.space} configurations, seed {r.seed_fitness / r.optimum:.3f})"
                     + "".join(f"{f'n={p}':>9}" for p in points) + "   evals")  # fmt: skip
        for method, curve in r.median.items():
            evals = "/".join(str(e) for e in r.evaluations[method])
            lines.append(f"  {method:<14}" + "".join(f"{curve[p]:>9.3f}" for p in points)
                         + f"   {evals}" + (f"  stop {','.join(r.stops)}"
                                              if method == "ours" else ""))  # fmt: skip
        for method in r.missing:
            lines.append(f"  {method:<14}not installed here (pip install optuna), not compared")
        lines.append(f"  best (mean of the row): {r.winner}")
    wins = [r.winner for r in reports]
    verdict = max(set(wins), key=lambda m: (wins.count(m), m == "ours"))
    if verdict == "ours":
        default = ("the run's offline policy (tunable moves by Optuna's TPE told the run's "
                   "history, evolution/offline/tuner.py, plus crossovers and transforms) holds")
    else:
        default = (f"{verdict} finds good configurations sooner here than the run's offline "
                   "policy; tune evolution/offline/policy.py's move shares (the landscape places "
                   "the seed at random, where a shipped seed is hand-tuned)")  # fmt: skip
    lines += ["", f"winner on most tasks: {verdict}: {default}"]
    return "\n".join(lines)


def landscape(names: Sequence[str], budget: int, seeds: Sequence[int]) -> list[LandscapeReport]:
    reports = []
    for name in names:
        task = get_task(name)
        began = time.monotonic()
        reports.append(compare_on_landscape(task, landscape_table(task), budget, seeds))
        print(f"{name}: compared in {time.monotonic() - began:.1f} s", flush=True)
    return reports


# ------------------------------------------------------------------------------------ report


def format_report(reports: Sequence[TaskReport]) -> str:
    head = f"{'task':<14}{'search':<12}" + "".join(f"{f'{p}%':>7}" for p in BUDGETS)
    lines = [
        "best-so-far / exhaustive optimum, median of the seeds, at a share of the space:",
        head + f"{'evals':>14}  stop",
    ]
    for r in reports:
        for i, method in enumerate(METHODS):
            curve = r.curves[method]
            label = r.task if i == 0 else ""
            cells = "".join(f"{curve.median[p]:>7.3f}" for p in BUDGETS)
            evals = "/".join(str(e) for e in curve.evaluations)
            row = f"{label:<14}{method:<12}{cells}{evals:>14}  {','.join(curve.stops)}"
            lines.append(row.rstrip())
        lines.append(
            f"{'':<14}{'(evaluations)':<12}" + "".join(f"{r.budgets[p]:>7}" for p in BUDGETS)
        )
    for r in reports:
        lines += ["", *goal_lines(r)]
    return "\n".join(lines)


def goal_lines(r: TaskReport) -> list[str]:
    at25 = r.curves["ours"].median[GOAL_BUDGET]
    behind = ", ".join(f"{p}%" for p in r.behind_at)
    lines = [
        f"{r.task}: optimum {r.optimum:.3f}x at {r.optimum_configuration}; the seed's own "
        f"configuration {r.seed_fitness:.3f}x",
        f"  goal {GOAL_RATIO:.0%} of the optimum within {GOAL_BUDGET}% of the space "
        f"({r.budgets[GOAL_BUDGET]} of {r.space} evaluations): "
        + (f"met ({at25:.3f})" if r.goal_95_at_25 else f"NOT met ({at25:.3f})"),
        "  goal ahead of random search at every budget: "
        + ("met" if r.ahead_of_random else f"NOT met (behind at {behind})"),
    ]
    if r.not_ok:
        shown = ", ".join(f"{k} ({s})" for k, s in list(r.not_ok.items())[:5])
        more = ", ..." if len(r.not_ok) > 5 else ""
        lines.append(f"  {len(r.not_ok)} configurations not ok (fitness 0): {shown}{more}")
    return lines


def search_table(table: Table, names: Sequence[str], seeds: Sequence[int]) -> list[TaskReport]:
    reports = []
    for name in names:
        entry = table.tasks.get(name)
        if entry is None or not entry.complete:
            done = len(entry.rows) if entry else 0
            space = entry.space if entry else "?"
            print(
                f"{name}: {done} of {space} configurations measured; not searched (run "
                "--measure again with the same --out to finish the table)"
            )
            continue
        task = get_task(name)
        if seed_changed(task, entry):
            print(
                f"{name}: note: the seed changed since the table was measured; the table's "
                "values are for the seed as it was"
            )
        began = time.monotonic()
        reports.append(search_task(task, entry, table.toolchain, seeds))
        print(f"{name}: searched in {time.monotonic() - began:.1f} s", flush=True)
    return reports


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    phase = parser.add_mutually_exclusive_group(required=True)
    phase.add_argument(
        "--measure",
        action="store_true",
        help="measure every configuration on this GPU (writes --out), then search",
    )
    phase.add_argument("--table", type=Path, help="search a saved table (no GPU needed)")
    phase.add_argument(
        "--landscape",
        action="store_true",
        help="compare our search, Optuna's TPE sampler and random search on synthetic "
        "landscapes over each seed's declared space, --budget evaluations each (no GPU)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=LANDSCAPE_BUDGET,
        help=f"evaluations per search with --landscape (default: {LANDSCAPE_BUDGET})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("search_table.json"),
        help="table the measure phase writes and continues (default: search_table.json)",
    )
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=list(TASKS),
        help=f"tasks with a tunable seed (default: {' '.join(TASKS)})",
    )
    parser.add_argument(
        "--limit",
        type=int,
        default=None,
        help="measure at most this many configurations per task (smoke run)",
    )
    parser.add_argument(
        "--batch", type=int, default=16, help="configurations per evaluate_many call (default: 16)"
    )
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="time box for the measure phase in seconds: no batch starts that would end past "
        "it (the table keeps what was measured; run again with the same --out to go on)",
    )
    parser.add_argument(
        "--trials",
        type=int,
        default=None,
        help="timed trials per case (default: the verifier's setting)",
    )
    parser.add_argument(
        "--suspect-speedup",
        type=float,
        default=None,
        help="speedup over the reference above which a kernel is flagged suspect (default: the "
        "verifier's setting, 10); see the note on rmsnorm at the top",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=list(SEEDS),
        help="seeds of our search and random search (default: 0 1 2)",
    )
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help="also write the search report as JSON to this file",
    )
    args = parser.parse_args(argv)
    if args.landscape:
        found = landscape(args.tasks, args.budget, args.seeds)
        print()
        print(format_landscape(found))
        if args.report:
            args.report.write_text(json.dumps([r.model_dump(mode="json") for r in found], indent=1))
            print(f"wrote {args.report}")
        return
    if args.measure:
        table = measure(
            args.tasks,
            args.out,
            args.batch,
            args.limit,
            args.deadline_s,
            trials=args.trials,
            suspect_speedup=args.suspect_speedup,
        )
    else:
        table = load_table(args.table)
    print(
        f"table: {table.device or table.backend}, {table.toolchain}, {table.trials} trials, "
        f"suspect above {table.suspect_speedup:g}x, "
        f"measured in {table.wall_s:.0f} s"
    )
    reports = search_table(table, args.tasks, args.seeds)
    if reports:
        print()
        print(format_report(reports))
    if args.report:
        args.report.write_text(json.dumps([r.model_dump(mode="json") for r in reports], indent=1))
        print(f"wrote {args.report}")


if __name__ == "__main__":
    sys.exit(main())
