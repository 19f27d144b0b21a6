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

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from hipevolve.app.agent_commands import register as register_agent_commands
from hipevolve.app.export_commands import register as register_export_commands
from hipevolve.app.progress import working
from hipevolve.core.errors import UserError

if TYPE_CHECKING:
    from hipevolve.app.run_job import EvaluatorFactory

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
MODELS = "Models (optional: without --model the offline policies run)"
tasks_app = typer.Typer(no_args_is_help=True, help="The task library.")
app.add_typer(tasks_app, name="tasks")
register_export_commands(app)  # evolve export, evolve report
register_agent_commands(app)  # evolve prompts show, evolve translate

console = Console()
err_console = Console(stderr=True, soft_wrap=True, highlight=False)
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
TasksDir = Annotated[
    list[Path] | None,
    typer.Option(
        "--tasks-dir",
        help="Extra task folder or KernelBench file (repeatable); also HIPEVOLVE_TASKS.",
        show_default=False,
    ),
]


def _warn(line: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {escape(line)}")


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2))


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
    model: Annotated[
        str | None,
        typer.Option(
            help="LLM behind the agents, any litellm model string (anthropic/claude-sonnet-4-5, "
            "openai/gpt-4.1, openai/<name> with --api-base); also HIPEVOLVE_MODEL.",
            show_default="none: the offline policies",
            rich_help_panel=MODELS,
        ),
    ] = None,
    api_base: Annotated[
        str | None,
        typer.Option(
            help="URL of a local OpenAI-compatible server (vLLM, SGLang, Ollama), e.g. "
            "http://127.0.0.1:8000/v1.",
            show_default=False,
            rich_help_panel=MODELS,
        ),
    ] = None,
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
        typer.Option("--version", callback=_show_version, is_eager=True,
                     help="Print hipevolve's version and exit."),
    ] = False,
) -> None:
    """The main job (its help is the app's); a subcommand given instead runs on its own."""
    given = [task, budget, islands, seed, archive, resume, backend, tasks_dir, ray, model,
             api_base, token_budget, cost_budget]  # fmt: skip
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
        model=model,  # HIPEVOLVE_MODEL when neither this nor ./hipevolve.toml names a model
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
    from hipevolve.agents.llm.client import check_models
    from hipevolve.core.config import load_settings

    settings = load_settings(options.flags())
    if options.resume is not None and not Path(settings.run.archive).exists():
        raise UserError(f"no archive at {settings.run.archive}",
                        "check the path; a search creates it")  # fmt: skip
    check_models(settings.models)


def _settings(tasks_dir: list[Path] | None, **sections: dict):
    """The settings tree with the flags given (--tasks-dir, and `sections`) over the file's."""
    from hipevolve.core.config import load_settings

    return load_settings({"tasks": {"dirs": tasks_dir or None}, **sections})


@tasks_app.command("list")
def tasks_list(tasks_dir: TasksDir = None, as_json: AsJson = False) -> None:
    """List every task, one line each: built-in, user folders and KernelBench files (cases: timed/small)."""
    from hipevolve.app.views import task_lines, task_summary
    from hipevolve.problems import discover

    tasks = discover(_settings(tasks_dir).tasks.dirs, _warn)
    if as_json:
        _print_json([task_summary(t) for t in sorted(tasks.values(), key=lambda t: t.name)])
        return
    for line in task_lines(tasks.values(), console.width if console.is_terminal else None):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@tasks_app.command("show")
def tasks_show(
    task: Annotated[str, typer.Argument(help="Task name.")],
    tasks_dir: TasksDir = None,
    as_json: AsJson = False,
) -> None:
    """Show a task's cases, tolerance, roofline bounds, anchors and reference source."""
    from hipevolve.app.views import print_task, task_detail
    from hipevolve.problems import get_task

    spec = get_task(task, _settings(tasks_dir).tasks.dirs, _warn)
    if as_json:
        _print_json(task_detail(spec))
        return
    print_task(console, spec)


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

    dirs = _settings(tasks_dir).tasks.dirs
    if names:
        library = discover(dirs, _warn)
        tasks = [library[n] if n in library else get_task(n, dirs) for n in names]
    else:  # with --tasks-dir, the tasks of those folders; otherwise every task
        tasks = [t for t in discover(dirs, _warn).values() if t.origin != "builtin" or not tasks_dir]
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
    model: Annotated[
        str | None,
        typer.Option(
            help="LLM that writes the tasks (any litellm model string; also HIPEVOLVE_MODEL); "
            "each call is logged to OUT/llm_calls.jsonl.",
            show_default="none: the synthetic templates",
            rich_help_panel=MODELS,
        ),
    ] = None,
    api_base: Annotated[
        str | None,
        typer.Option(
            help="URL of a local OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1.",
            show_default=False,
            rich_help_panel=MODELS,
        ),
    ] = None,
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
    from hipevolve.agents.llm.client import check_models
    from hipevolve.problems import discover, get_task

    settings = _settings(tasks_dir, models={"model": model, "api_base": api_base})
    # The task generator's models (models.model, HIPEVOLVE_MODEL or models.roles), alone.
    writer = settings.models.role_models().get("task_generator", ())
    models = settings.models.model_copy(
        update={"model": None, "roles": {"task_generator": writer} if writer else {}}
    )
    check_models(models)  # one line before anything is written
    dirs = settings.tasks.dirs
    sources = [get_task(name, dirs) for name in from_tasks or ()]

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
        with working(err_console, f"tasks generate: {n} tasks with {writer[0]}"):
            report = generate_with_model(n, seed, tuple(mode or MODES), usable, library, out,
                                         ensemble, progress=show)  # fmt: skip
        stopped = ensemble.stop_reason()
        console.print(f"{report.summary()}; written to {out}, model calls in {out / CALL_LOG}"
                      + (f"; stopped early: {stopped}" if stopped else ""))  # fmt: skip
        return
    from hipevolve.problems.synthetic.generate import generate_tasks

    with working(err_console, f"tasks generate: {n} candidate tasks"):
        report = generate_tasks(n, seed, tuple(mode or MODES), sources, out, progress=show)
    console.print(
        f"{report.summary()}; written to {out} "
        f"(list them with `evolve tasks list --tasks-dir {out}`)"
    )


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
    from hipevolve.app.views import print_evaluation
    from hipevolve.core.candidate import load_candidate
    from hipevolve.problems import get_task

    settings = _settings(tasks_dir, verifier={"backend": backend})
    spec = get_task(task, settings.tasks.dirs)
    loaded = _cuda_translated(candidate) or load_candidate(candidate)
    with working(err_console, "verify: loading the verifier") as step:
        from hipevolve.verifier.build.backends import resolve_backend
        from hipevolve.verifier.pipeline import evaluate

        backend_here = resolve_backend(settings.verifier.backend)
        step(f"verify {candidate} on {spec.name} ({backend_here}): checks, compile, "
                      "correctness, timing")  # fmt: skip
        evaluation = evaluate(loaded, spec, settings.verifier, backend_here)
    if as_json:
        print(evaluation.model_dump_json(indent=2))
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
        _print_json(report_json(checks))
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
