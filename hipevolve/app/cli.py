"""The `evolve` command line.

    evolve --task softmax --budget 200           # the main job: search, then print the best kernel
    evolve --task softmax --budget 8 --archive /tmp/smoke.db    # a tiny smoke run
    evolve --task softmax --archive hipevolve.db --resume 1     # continue an interrupted run
    evolve tasks list [--tasks-dir DIR]          # the task library
    evolve tasks show gated_delta_net            # cases, tolerance, roofline, anchors, reference
    evolve tasks check --tasks-dir kb/level1     # run references on their small cases
    evolve tasks generate --n 50 --seed 0        # synthetic, verified tasks
    evolve verify prompts/examples/softmax_native --task softmax
    evolve translate softmax --out /tmp/softmax_lowered   # the reference lowered to HIP
    evolve doctor                                # which backends and toolchains work here
    evolve prompts show mutator --task gated_delta_net   # the exact prompt a role sends

`evolve --help` and `evolve COMMAND --help` list the options. Every option but the task, the
budget, --resume and a command's own arguments is a setting: it only maps onto the settings tree
(hipevolve/core/config.py), which ./hipevolve.toml sets too, and is checked there.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from hipevolve.app.agent_commands import register as register_agent_commands
from hipevolve.app.cli_options import (
    MODELS,
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
from hipevolve.app.export_commands import register as register_export_commands
from hipevolve.app.progress import working
from hipevolve.app.task_commands import register as register_task_commands
from hipevolve.core.errors import UserError

if TYPE_CHECKING:
    from hipevolve.app.run_job import EvaluatorFactory

# --model of the main job: the agents' models
Agents = model_option(
    "LLM behind the agents", "none: the offline policies", ", by fitness gained per dollar"
)

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Evolve fast, verified HIP kernels for PyTorch operators.\n\n"
    "The main job, `evolve --task T --budget N`, searches for the fastest correct kernel of task T "
    "in N verifier evaluations, shows its progress, and prints the best kernel at the end; Ctrl-C "
    "stops after the evaluations in flight and prints the command that resumes the run.",
)
SEARCH = "Search (the main job)"
register_task_commands(app)  # evolve tasks list, show, check, generate
register_export_commands(app)  # evolve export, evolve report
register_agent_commands(app)  # evolve prompts show, evolve translate


def _show_version(given: bool) -> None:
    if given:
        from hipevolve import __version__

        print(f"hipevolve {__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def search(
    ctx: typer.Context,
    task: Annotated[
        str | None,
        typer.Option(
            help="Task to search (see `evolve tasks list`).",
            show_default=False,
            rich_help_panel=SEARCH,
        ),
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(
            help="Verifier evaluations to spend (a resumed run keeps its own unless given).",
            show_default=False,
            rich_help_panel=SEARCH,
        ),
    ] = None,
    islands: Annotated[
        int | None,
        typer.Option(
            help="Independent MAP-Elites islands (evolution.islands).",
            show_default="4",
            rich_help_panel=SEARCH,
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Random seed: the same seed makes the same search (run.seed).",
            show_default="0",
            rich_help_panel=SEARCH,
        ),
    ] = None,
    archive: Annotated[
        Path | None,
        typer.Option(
            help="SQLite archive the run is written to (created if missing; run.archive).",
            show_default="hipevolve.db",
            rich_help_panel=SEARCH,
        ),
    ] = None,
    resume: Annotated[
        int | None,
        typer.Option(
            help="Continue this interrupted run of the archive (its seed, islands and budget).",
            show_default=False,
            rich_help_panel=SEARCH,
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            help="auto (the GPU here), cuda or rocm (verifier.backend).",
            show_default="auto",
            rich_help_panel=SEARCH,
        ),
    ] = None,
    tasks_dir: Annotated[
        list[Path] | None,
        typer.Option(
            "--tasks-dir",
            help="Extra task folder or KernelBench file (repeatable); also HIPEVOLVE_TASKS.",
            show_default=False,
            rich_help_panel=SEARCH,
        ),
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            help="Evaluate on a Ray cluster: auto (the one this machine belongs to, else a new "
            "one here) or its address (HOST:6379); one worker per GPU of the cluster.",
            show_default="this machine: one worker per visible GPU",
            rich_help_panel=SEARCH,
        ),
    ] = None,
    model: Agents = None,
    api_base: ApiBase = None,
    token_budget: Annotated[
        int | None,
        typer.Option(
            help="LLM tokens (prompt + reply) the run may spend.",
            show_default="no limit",
            rich_help_panel=MODELS,
        ),
    ] = None,
    cost_budget: Annotated[
        float | None,
        typer.Option(
            help="LLM dollars the run may spend (priced models only); the run says its "
            "estimate before it starts.",
            show_default="25",
            rich_help_panel=MODELS,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_show_version,
            is_eager=True,
            help="Print hipevolve's version and exit.",
        ),
    ] = False,
) -> None:
    """The main job (its help is the app's); a subcommand given instead runs on its own."""
    given = [
        task,
        budget,
        islands,
        seed,
        archive,
        resume,
        backend,
        tasks_dir,
        ray,
        model,
        api_base,
        token_budget,
        cost_budget,
    ]
    if ctx.invoked_subcommand is not None:
        if any(v is not None for v in given):
            raise UserError(
                f"the search options start a search and take no command (got "
                f"`{ctx.invoked_subcommand}` after them)",
                f"`evolve {ctx.invoked_subcommand} --help` lists that command's options",
            )
        return
    if task is None:
        raise UserError("--task is required", "`evolve tasks list` shows the tasks")
    from hipevolve.app.job_options import JobOptions

    options = JobOptions(
        task=task,
        budget=budget,
        islands=islands,
        seed=seed,
        archive=archive,
        resume=resume,
        backend=backend,
        tasks_dirs=tuple(tasks_dir or ()),
        ray=ray,
        model=tuple(
            model or ()
        ),  # HIPEVOLVE_MODEL when neither this nor ./hipevolve.toml names a model
        api_base=api_base,
        token_budget=token_budget,
        cost_budget_usd=cost_budget,
    )
    _preflight(options)
    from hipevolve.app.run_job import gpu_evaluator, run_job  # the search: seconds to import

    outcome = run_job(options, ctx.obj or gpu_evaluator, console, err_console)
    raise typer.Exit(outcome.exit_code)


def _preflight(options) -> None:
    """The main job's checks that need neither the archive's nor the search's modules, before
    those are imported: a resume's missing archive, then the models (a key not exported is
    answered without importing litellm). run_job checks all of this again, and the rest."""
    from hipevolve.agents.llm.preflight import check_models
    from hipevolve.core.config import load_settings

    settings = load_settings(options.flags())
    if options.resume is not None and not Path(settings.run.archive).exists():
        raise UserError(
            f"no archive at {settings.run.archive}", "check the path; a search creates it"
        )
    check_models(settings.models)


@app.command()
def verify(
    candidate: Annotated[
        Path,
        typer.Argument(
            help="A native candidate folder (kernel.hip + model.py), a KernelBench .py file, or "
            "a CUDA folder (kernel.cu + model.py: translated with PyTorch's hipify first)."
        ),
    ],
    task: Annotated[str, typer.Option(help="Task to score against.")],
    backend: Annotated[
        str | None,
        typer.Option(
            help="auto (the GPU here, else static), cuda, rocm or static (AMD compile only; "
            "verifier.backend).",
            show_default="auto",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the Evaluation as JSON.")] = False,
    tasks_dir: TasksDir = None,
) -> None:
    """Score one candidate the way the search does: checks, compile, AMD facts, correctness, time."""
    if not candidate.exists():  # before the verifier's imports, which take seconds
        raise UserError(f"{candidate}: no such file or folder", "check the candidate path")
    from hipevolve.app.views import evaluation_json, print_evaluation
    from hipevolve.core.candidate import load_candidate
    from hipevolve.problems import get_task

    settings = settings_with(tasks_dir, verifier={"backend": backend})
    spec = get_task(task, settings.tasks.dirs, warn)
    loaded = _cuda_translated(candidate) or load_candidate(candidate)
    with working(err_console, "verify: loading the verifier") as step:
        from hipevolve.verifier.build.backends import resolve_backend
        from hipevolve.verifier.pipeline import evaluate

        backend_here = resolve_backend(settings.verifier.backend)
        step(
            f"verify {candidate} on {spec.name} ({backend_here}): checks, compile, "
            "correctness, timing"
        )
        evaluation = evaluate(loaded, spec, settings.verifier, backend_here)
    if as_json:
        print(evaluation_json(evaluation))
    else:
        print_evaluation(console, evaluation)
    raise typer.Exit(0 if evaluation.status.value in ("ok", "compiled") else 1)


def _cuda_translated(path: Path):
    """The hipified candidate of a CUDA folder (kernel.cu + model.py), said so; else None."""
    from hipevolve.agents.lowering.hipify import cuda_folder, load_cuda_candidate

    found = cuda_folder(path)
    if found is None:
        return None
    err_console.print(f"{found[0]}: CUDA source, translated to HIP with PyTorch's hipify")
    return load_cuda_candidate(*found)


@app.command()
def doctor(as_json: AsJson = False) -> None:
    """Report Python, torch, GPUs and toolchains, and the command that fixes each missing piece."""
    from hipevolve.app.doctor import exit_code, print_report, report_json, run_checks

    if as_json:
        checks = run_checks()
        print_json(report_json(checks))
    else:
        with working(err_console, "doctor: checking Python, torch, GPUs and toolchains"):
            checks = run_checks()
        print_report(console, checks)
    raise typer.Exit(exit_code(checks))


def main(evaluators: EvaluatorFactory | None = None) -> None:
    """The `evolve` entry point. `evaluators` replaces the GPU evaluator of the main job (tests
    pass a stand-in, since the evaluator is the only part that needs a GPU)."""
    try:
        app(obj=evaluators)
    except UserError as e:
        err_console.print(f"[red]error:[/red] {e.line()}")
        sys.exit(2)
