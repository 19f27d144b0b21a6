"""The archive side of the exports: which run, which candidate, which task, what machine.

Shared by export.py (the package), dataset.py and report.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hipevolve.archive.store import Archive, RunInfo, Scored
from hipevolve.core.baseline import RunBaseline
from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.budget import RunBudget


def open_archive(path: Path) -> Archive:
    """An existing archive, opened read-only (never creates one: a typo must not make an empty
    file; one in a read-only folder still opens)."""
    return Archive.open(path, create=False, read_only=True)


def describe_runs(archive: Archive) -> str:
    """One line listing the archive's runs: id, task, status, evaluations (the budget's units, as
    the run's final line counts them), best fitness."""
    parts = []
    for info in archive.runs():
        best = archive.best(info.id)
        fitness = f"best {best.fitness:.3g}x" if best else "no correct candidate"
        spent = RunBudget.from_archive(archive, info.id).spent
        parts.append(f"{info.id} ({info.task}, {info.status}, {spent} evaluations, {fitness})")
    return "; ".join(parts) if parts else "none"


def find_run(archive: Archive, run: int) -> RunInfo:
    """The run, or a UserError that lists every run of the archive."""
    if run not in {r.id for r in archive.runs()}:
        raise UserError(
            f"no run {run} in {archive.path}; runs: {describe_runs(archive)}",
            "pass one of those run ids",
        )
    return archive.run(run)


def best_of_task(archive: Archive, task: str, run: int | None) -> tuple[RunInfo, Scored]:
    """The fittest correct candidate of `run` (which must be of `task`), else of all its runs."""
    if run is not None:
        info = find_run(archive, run)
        if info.task != task:
            raise UserError(
                f"run {run} searched task {info.task}, not {task}",
                f"pass --task {info.task}, or a run of {task}",
            )
        runs = [info]
    else:
        runs = [r for r in archive.runs() if r.task == task]
        if not runs:
            raise UserError(
                f"no run of task {task} in {archive.path}; runs: {describe_runs(archive)}",
                "pass --task with one of those tasks",
            )
    found = [(r, archive.best(r.id)) for r in runs]
    scored = [(r, b) for r, b in found if b is not None]
    if not scored:
        which = f"run {run} has no" if run is not None else f"no run of task {task} has a"
        raise UserError(
            f"{which} correct candidate (none passed the verifier with status ok); "
            "nothing was written",
            "let the search run longer, or export another run",
        )
    return max(scored, key=lambda rb: (rb[1].fitness, -rb[0].id))


def task_spec(archive: Archive, name: str, tasks_dirs: Iterable[Path] = ()) -> TaskSpec:
    """The task from the library, else the spec the archive stored when the run started."""
    from hipevolve.problems import discover

    try:
        tasks = discover(tasks_dirs)
    except UserError:
        tasks = {}
    if name in tasks:
        return tasks[name]
    spec = archive.stored_task(name)
    if spec is not None and spec.reference.is_file():
        return spec
    raise UserError(
        f"task {name} is neither in the task library nor stored with its reference",
        "pass --tasks-dir with the folder that holds it",
    )


def run_environment(archive: Archive, run: int) -> dict[str, Any]:
    """The device and toolchain the run recorded (its last `environment` event), if any."""
    events = archive.events(run, "environment")
    return dict(events[-1].data) if events else {}


def run_baseline(archive: Archive, run: int) -> RunBaseline | None:
    """The baseline the run timed at its start (its last `baseline` event), if any."""
    events = archive.events(run, "baseline")
    return RunBaseline.model_validate(events[-1].data) if events else None
