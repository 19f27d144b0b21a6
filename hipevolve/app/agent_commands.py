"""The agents as commands: `evolve prompts show` (the exact messages a role sends, for users to
read and tune) and `evolve translate` (the offline translator as a tool). Heavy modules are
imported inside the commands, so `evolve --help` stays fast."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hipevolve.app.cli_options import TasksDir, err_console, settings_with, warn
from hipevolve.core.errors import UserError


def prompts_show(
    role: Annotated[
        str,
        typer.Argument(
            help="profiler_reader, optimizer, mutator, translator; repairer and auditor with --run."
        ),
    ],
    task: Annotated[
        str, typer.Option(help="Task whose first seed (or a run's best) is the parent.")
    ],
    backend: Annotated[
        str | None,
        typer.Option(
            help="rocm, cuda or static: whose code paths and peaks the prompt shows.",
            show_default="the GPU here, else static",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the messages as JSON.")] = False,
    tasks_dir: TasksDir = None,
    archive: Annotated[
        Path | None,
        typer.Option(
            help="An archive whose run's best, with its evaluation, attempts and notes, "
            "the prompt shows (with --run).",
            show_default=False,
        ),
    ] = None,
    run: Annotated[
        int | None,
        typer.Option(help="That run (of the same task).", show_default=False),
    ] = None,
) -> None:
    """Print the exact messages ROLE would send for the task's seed, with their token counts.

    With --archive and --run, as that run would send them now (its best as the parent, with its
    evaluation, attempts and notes); a task the archive stored (a KernelBench file's) is found
    there when no task folder names it."""
    import json

    from hipevolve.agents.briefing import Target
    from hipevolve.app.prompt_show import seed_prompt
    from hipevolve.problems import get_task
    from hipevolve.verifier.build.backends import device_name, gpu_backend

    here = gpu_backend()
    chosen = backend or here or "static"
    if chosen not in ("rocm", "cuda", "static"):
        raise UserError(f"unknown backend {chosen!r}", "pass --backend rocm, cuda or static")
    target = Target(chosen, device_name(chosen) if chosen == here else "")
    if (archive is None) != (run is None):
        raise UserError("--archive and --run go together", "pass both, or neither for a new run")
    try:
        spec = get_task(task, settings_with(tasks_dir).tasks.dirs, warn)
    except UserError:
        spec = _stored_task(task, archive)  # a KernelBench file's run, shown without --tasks-dir
        if spec is None:
            raise
    if archive is None or run is None:
        shown = seed_prompt(role, spec, target)
    else:
        shown = _run_prompt(role, spec, target, archive, run)
    tokens = shown.tokens()
    if as_json:
        print(
            json.dumps(
                {
                    "role": role,
                    "task": shown.task,
                    "backend": chosen,
                    "tokens": tokens,
                    "messages": shown.messages(),
                },
                indent=2,
            )
        )
        return
    from hipevolve.agents.llm.messages import text_of

    for message in shown.messages():
        print(f"===== {message['role']} ({tokens[message['role']]} tokens) =====")
        print(text_of(message))
    err_console.print(
        f"{role} on {shown.task} ({chosen}): {tokens['total']} tokens "
        f"({tokens['system']} system + {tokens['user']} user, cl100k_base); "
        f"{tokens['own']} after the cached prefix"
    )


def translate(
    task: Annotated[str, typer.Argument(help="Task to translate.")],
    out: Annotated[Path, typer.Option(help="Folder for kernel.hip and model.py.")],
    tasks_dir: TasksDir = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a kernel.hip or model.py already in --out.")
    ] = False,
) -> None:
    """Lower a task's PyTorch reference to a native HIP candidate (the offline translator)."""
    from hipevolve.app.translate import print_translated, translate_task

    dirs = settings_with(tasks_dir).tasks.dirs
    result = translate_task(task, out, dirs, force, warn)
    raise typer.Exit(print_translated(err_console, result, tasks_dir or ()))


def _stored_task(name: str, path: Path | None):  # noqa: ANN202 (a TaskSpec or None)
    """The task spec the archive's runs stored under `name`, where its reference file is still
    there (a task from a --tasks-dir folder or file the command was not given again); None."""
    from hipevolve.export.runs import open_archive

    if path is None:
        return None
    with open_archive(path) as opened:
        spec = opened.stored_task(name)
    return spec if spec is not None and spec.reference.exists() else None


def _run_prompt(role: str, spec, target, path: Path, run: int):  # noqa: ANN001 (TaskSpec, Target)
    """seed_prompt as run `run` of the archive at `path` would send it now."""
    from hipevolve.app.prompt_show import RunView, seed_prompt
    from hipevolve.export.runs import find_run, open_archive

    with open_archive(path) as opened:
        info = find_run(opened, run)
        if info.task != spec.name:
            raise UserError(
                f"run {run} searched task {info.task}, not {spec.name}",
                f"pass --task {info.task}, or another run",
            )
        return seed_prompt(role, spec, target, RunView(opened, run))


def register(app: typer.Typer) -> None:
    """Adds `prompts show` and `translate` to the `evolve` app."""
    app.command("translate")(translate)
    prompts = typer.Typer(no_args_is_help=True, help="The agents' prompts, as they are sent.")
    prompts.command("show")(prompts_show)
    app.add_typer(prompts, name="prompts")
