"""Search efficiency on synthetic landscapes (no GPU): the run's offline search against a kept
optimiser library's sampler (Optuna's TPE) and random search, run by
`python bench/search_efficiency.py --landscape`.

Phase `landscape` (CPU, no table needed) compares, on the same budget (--budget, default 200
evaluations, the main job's), our search with a kept optimiser library's sampler: Optuna's TPE
(categorical parameters, one per tunable; a configuration it asks for again is answered from a
cache at no cost, so it too spends its budget on distinct kernels) and random search. The
landscape is synthetic but spans each seed's real declared space: a factor per tunable value, an
interaction factor per adjacent pair of tunables, 3% of configurations incorrect, all drawn from
an rng seeded by the task's name. It prints best-so-far over the optimum at 25, 50, 100, 150 and
200 evaluations (median of the seeds), the method with the largest mean over those points per
task, and the overall verdict. Without Optuna installed the bench says so and compares the rest.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Sequence

from pydantic import BaseModel, Field
from search_efficiency import (
    Measured,
    TaskTable,
    best_so_far,
    our_search,
    seed_candidate,
    seed_files,
    space_of,
)

from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.offline.tunables import (
    Configuration,
    configuration_key,
    current_configuration,
    parse_tunables,
)
from hipevolve.problems import get_task

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
