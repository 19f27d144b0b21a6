"""Search efficiency, phase `measure` (GPU), run by `python bench/search_efficiency.py --measure`.

Phase `measure` (GPU) evaluates every configuration of each task's tunable seed
(problems/<task>/seeds/tunable) once through the real verifier pipeline (evaluate_many, in
batches) and writes a JSON table: task -> configuration -> the Evaluation (status, per-case times,
static facts) and its fitness, the geometric-mean speedup over the timed cases, with the wall time
measuring took. The table is rewritten after each batch: a killed or time-limited measure run
keeps what it measured, and running it again with the same --out measures only the rest.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path

from search_efficiency import (
    Measured,
    Table,
    TaskTable,
    at_configuration,
    load_table,
    save_table,
    seed_candidate,
    seed_changed,
    seed_files,
    space_of,
)

from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.offline.tunables import configuration_key
from hipevolve.problems import get_task
from hipevolve.verifier.evaluators import Evaluator


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
