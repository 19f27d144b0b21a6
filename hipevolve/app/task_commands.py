"""`evolve tasks`: the task library.

    evolve tasks list [--tasks-dir DIR]          # one line per task
    evolve tasks show gated_delta_net            # cases, tolerance, roofline, anchors, reference
    evolve tasks check --tasks-dir kb/level1     # run references on their small cases
    evolve tasks generate --n 50 --seed 0        # synthetic, verified tasks

`register(app)` adds the `tasks` group to the `evolve` app.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hipevolve.app.cli_options import (
    ApiBase,
    AsJson,
    TasksDir,
    console,
    err_console,
    model_option,
    print_json,
    settings_with,
    warn,
)
from hipevolve.app.progress import working
from hipevolve.core.errors import UserError

# --model of `evolve tasks generate`: the task generator's models
TaskWriters = model_option(
    "LLM that writes the tasks",
    "none: the synthetic templates",
    "; each call is logged to OUT/llm_calls.jsonl",
)

tasks_app = typer.Typer(no_args_is_help=True, help="The task library.")


def register(app: typer.Typer) -> None:
    app.add_typer(tasks_app, name="tasks")


@tasks_app.command("list")
def tasks_list(tasks_dir: TasksDir = None, as_json: AsJson = False) -> None:
    """List every task, one line each: built-in, user folders and KernelBench files (cases: timed/small)."""
    from hipevolve.app.views import task_lines, task_summary
    from hipevolve.problems import discover

    tasks = discover(settings_with(tasks_dir).tasks.dirs, warn)
    if as_json:
        print_json([task_summary(t) for t in sorted(tasks.values(), key=lambda t: t.name)])
        return
    for line in task_lines(tasks.values(), console.width if console.is_terminal else None):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@tasks_app.command("show")
def tasks_show(
    task: Annotated[str, typer.Argument(help="Task name.")],
    tasks_dir: TasksDir = None,
    as_json: AsJson = False,
    full: Annotated[
        bool, typer.Option("--full", help="Also each anchor's figures and the reference's source.")
    ] = False,
) -> None:
    """Show a task's description, cases, tolerance, roofline bounds and anchors (--full: with their figures and the reference source)."""
    from hipevolve.app.views import print_task, task_detail
    from hipevolve.problems import get_task

    spec = get_task(task, settings_with(tasks_dir).tasks.dirs, warn)
    if as_json:
        print_json(task_detail(spec))
        return
    print_task(console, spec, full)


@tasks_app.command("check")
def tasks_check(
    names: Annotated[
        list[str] | None, typer.Argument(help="Tasks to check (default: all).", show_default=False)
    ] = None,
    tasks_dir: TasksDir = None,
    device: Annotated[str, typer.Option(help="Where references run: cpu or cuda.")] = "cpu",
) -> None:
    """Run the references of tasks on their small cases and report time and outputs."""
    from hipevolve.app.views import reference_run_line
    from hipevolve.problems import discover, get_task
    from hipevolve.problems.check import cases_to_check, run_reference

    dirs = settings_with(tasks_dir).tasks.dirs
    if names:
        library = discover(dirs, warn)
        tasks = [library[n] if n in library else get_task(n, dirs) for n in names]
    else:  # with --tasks-dir, the tasks of those folders; otherwise every task
        tasks = [t for t in discover(dirs, warn).values() if t.origin != "builtin" or not tasks_dir]
    todo = [(t, c) for t in tasks for c in cases_to_check(t)]
    runs = []
    with working(err_console, f"tasks check: {len(todo)} reference runs") as step:
        for i, (t, c) in enumerate(todo):
            step(f"tasks check: {t.name} {c.name} ({i + 1} of {len(todo)})")
            runs.append(run_reference(t, c, device))
            console.print(reference_run_line(runs[-1]), highlight=False, soft_wrap=True)
    failed = [r for r in runs if not r.ok]
    console.print(f"{len(runs) - len(failed)} of {len(runs)} reference runs ok")
    for r in failed:
        err_console.print(f"[red]error:[/red] task {r.task}: {r.error}")
    raise typer.Exit(1 if failed else 0)


@tasks_app.command("generate")
def tasks_generate(
    n: Annotated[int, typer.Option("--n", min=1, help="Candidate tasks to propose.")] = 50,
    seed: Annotated[
        int, typer.Option(help="Random seed: the same seed writes the same tasks.")
    ] = 0,
    from_tasks: Annotated[
        list[str] | None,
        typer.Option(
            "--from",
            help="Tasks to mutate (repeatable; default: every task with a small case).",
            show_default=False,
        ),
    ] = None,
    mode: Annotated[
        list[str] | None,
        typer.Option(
            help="mutate, compose or constrain (repeatable; default: all three in turn).",
            show_default=False,
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="Folder the verified tasks are written to.")] = Path(
        "synthetic_tasks"
    ),
    tasks_dir: TasksDir = None,
    model: TaskWriters = None,
    api_base: ApiBase = None,
) -> None:
    """Generate new verified tasks (KernelBench format with task.toml) by mutation, composition and constraints; duplicates (same torch.fx graph and shapes) are dropped. With --model the model writes each task, verified and deduplicated the same way."""
    from hipevolve.problems.synthetic.generate import MODES

    for m in mode or ():
        if m not in MODES:
            raise UserError(f"unknown mode {m!r}", f"use {', '.join(MODES)}")
    from hipevolve.export.folders import check_writable

    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder", "pass a folder path for --out")
    check_writable(out, "--out")
    from hipevolve.agents.llm.preflight import check_models
    from hipevolve.problems import discover, get_task

    settings = settings_with(tasks_dir, models={"model": model or None, "api_base": api_base})
    # The task generator's models (models.model, HIPEVOLVE_MODEL or models.roles), alone.
    writer = settings.models.role_models().get("task_generator", ())
    models = settings.models.model_copy(
        update={"model": (), "roles": {"task_generator": writer} if writer else {}}
    )
    check_models(models)  # one line before anything is written
    dirs = settings.tasks.dirs
    sources = [get_task(name, dirs, warn) for name in from_tasks or ()]

    def show(item) -> None:
        kept = hasattr(item, "folder")
        mark = "[green]kept[/green]" if kept else "[yellow]rejected[/yellow]"
        console.print(
            f"{mark} {item.name}: {item.description if kept else item.reason}",
            soft_wrap=True,
            highlight=False,
        )

    if models.models():
        from hipevolve.agents.llm.ensemble import Ensemble
        from hipevolve.agents.roles.task_generator import CALL_LOG, generate_with_model

        library = list(discover(dirs).values())
        usable = sources or [t for t in library if t.small_cases]
        ensemble = Ensemble(models)
        with working(err_console, f"tasks generate: {n} tasks with {', '.join(writer)}"):
            report = generate_with_model(
                n, seed, tuple(mode or MODES), usable, library, out, ensemble, progress=show
            )
        stopped = ensemble.stop_reason()
        console.print(
            f"{report.summary()}; written to {out}, model calls in {out / CALL_LOG}"
            + (f"; stopped early: {stopped}" if stopped else "")
        )
        return
    from hipevolve.problems.synthetic.generate import generate_tasks

    with working(err_console, f"tasks generate: {n} candidate tasks"):
        report = generate_tasks(n, seed, tuple(mode or MODES), sources, out, progress=show)
    console.print(
        f"{report.summary()}; written to {out} "
        f"(list them with `evolve tasks list --tasks-dir {out}`)"
    )
