"""`evolve export` and `evolve report`: a run's results as code, data and a page.

    evolve export --task softmax --out softmax_kernel          # the best kernel, drop-in package
    evolve export --task softmax --run 2 --out k --force       # of run 2, replacing folder k
    evolve export --dataset data/ --run 1 --run 2              # every evaluation as JSONL
    evolve report 1 --out run1.html                            # one self-contained HTML page

`register(app)` adds both commands to the `evolve` app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hipevolve.core.errors import UserError

console = Console(highlight=False, soft_wrap=True)

ArchiveOption = Annotated[
    Path | None,
    typer.Option(
        "--archive",
        help="The SQLite archive the runs were written to (run.archive).",
        show_default="hipevolve.db",
    ),
]


def _settings(archive: Path | None, tasks_dir: list[Path] | None = None):
    """The settings tree (hipevolve/core/config.py) with --archive and --tasks-dir over it."""
    from hipevolve.core.config import load_settings

    return load_settings({"run": {"archive": archive}, "tasks": {"dirs": tasks_dir or None}})


def export(
    task: Annotated[
        str | None,
        typer.Option(
            help="Task whose best kernel to export (its fittest run, unless --run).",
            show_default=False,
        ),
    ] = None,
    run: Annotated[
        list[int] | None,
        typer.Option(
            help="Run id (repeatable with --dataset; default: every run).", show_default=False
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Folder for the kernel package.", show_default=False),
    ] = None,
    dataset: Annotated[
        Path | None,
        typer.Option(
            help="Folder for the evaluations dataset (JSONL, schema, DATASET.md).",
            show_default=False,
        ),
    ] = None,
    archive: ArchiveOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the contents of a non-empty output folder.")
    ] = False,
    tasks_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--tasks-dir",
            help="Extra task folder (repeatable); also HIPEVOLVE_TASKS.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Export the best kernel as a drop-in package (--out), or every evaluation as a dataset (--dataset)."""
    runs = list(run or [])
    if (out is None) == (dataset is None):
        raise UserError(
            "pass one of --out DIR (a kernel package) and --dataset DIR (JSONL)",
            "`evolve export --help` shows both",
        )
    settings = _settings(archive, tasks_dir)
    archive = settings.run.archive
    if dataset is not None:
        from hipevolve.export.dataset import export_dataset

        done = export_dataset(archive, dataset, runs=runs, task=task, force=force)
        counts = ", ".join(f"{n} {s}" for s, n in sorted(done.statuses.items()))
        console.print(
            f"wrote {done.records} records ({counts}) of run(s) "
            f"{', '.join(map(str, done.runs))} to {done.out}/evaluations.jsonl; "
            f"schema.json and DATASET.md beside it"
        )
        return
    assert out is not None
    if len(runs) > 1:
        raise UserError(
            "--out exports one kernel: pass at most one --run",
            "use --dataset to export several runs",
        )
    if task is None:
        if not runs:
            raise UserError("--task is required with --out", "or pass the --run to export")
        from hipevolve.export.runs import find_run, open_archive

        with open_archive(archive) as opened:
            task = find_run(opened, runs[0]).task
    from hipevolve.export.package import export_package

    done = export_package(
        archive,
        task,
        out,
        run=runs[0] if runs else None,
        force=force,
        tasks_dirs=settings.tasks.dirs,
    )
    op = f"; torch.ops.hipevolve.{done.op}" if done.op else ""
    console.print(
        f"exported candidate {done.candidate} of run {done.run} ({done.fitness:.3f}x) "
        f"to {done.out}: package {done.package}{op}; see {done.out}/README.md"
    )


def report(
    run: Annotated[int, typer.Argument(help="Run id (an unknown id lists the runs).")],
    out: Annotated[
        Path | None,
        typer.Option(
            help="HTML file to write (default: report-run<RUN>.html).", show_default=False
        ),
    ] = None,
    archive: ArchiveOption = None,
) -> None:
    """Write one self-contained HTML page about a run: progress, islands, lineage, grids, speedups, the best kernel and its diff, LLM cost."""
    from hipevolve.export.report import write_report

    done = write_report(_settings(archive).run.archive, run, out)
    console.print(
        f"wrote {done.out} (run {done.run}: {done.evaluations} evaluations, "
        f"best {done.best_fitness:.3f}x)"
    )


def register(app: typer.Typer) -> None:
    """Adds `export` and `report` to the `evolve` app."""
    app.command("export")(export)
    app.command("report")(report)
