"""The main job, `evolve --task T --budget N`: check the inputs, open the archive, start or resume
a run, drive the evolution loop with a live display, then save and report the best kernel.

This is where the run is put together: the evaluator, the proposal policy (the agents over a
model, or none: the offline mutator) and the first candidates (`first_candidates`: the task's
seed kernels, or the agents' offline lowering of its reference) are chosen here and passed into
the evolution loop, which imports none of them.

Every check that can fail on the user's input (budget, settings, models, task, seeds, GPU and
compiler) runs before the archive is opened, so a refused command writes nothing. The flags only
map onto the settings tree (JobOptions.flags, hipevolve/core/config.py); each rule is checked
where it lives: the settings in the tree, the budget in evolution/budget.py, a resume's rules in
evolution/resume.py, the models in agents/llm/client.py. The evaluator comes from a
factory: in production `gpu_evaluator` (the verifier pipeline on this machine's GPU); tests pass
a stand-in, since the evaluator is the only part that needs a GPU.

Ctrl-C: the first one asks the loop to stop after the batch in flight (which is finished and
recorded), the second interrupts at once; either way the run is marked interrupted, its lock
released, and the resume command printed (exit 130). What was in flight at a second Ctrl-C is
re-queued by the resume.
"""

from __future__ import annotations

import math
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape

from hipevolve.app.display import (
    BestKernel,
    Outcome,
    RunDisplay,
    command,
    print_outcome,
    resume_command,
)
from hipevolve.app.evaluator_choice import gpu_evaluator, ray_evaluator, require_gpu
from hipevolve.app.job_options import JobOptions
from hipevolve.archive.store import Archive, RunInfo, check_path
from hipevolve.core.candidate import Candidate, load_candidate, write_candidate
from hipevolve.core.config import EvolutionSettings, Settings, load_settings
from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.budget import RunBudget, check_budget, recorded_limit
from hipevolve.evolution.child import SEED, Child
from hipevolve.evolution.pace import EVENT as PACE
from hipevolve.evolution.pace import MOST_LAG, Pace
from hipevolve.evolution.resume import check_resume
from hipevolve.evolution.run import RunSummary, run_evolution
from hipevolve.verifier.evaluators import Evaluator

INTERRUPTED = 130  # the shell's code for a process ended by SIGINT
BEST_DIR = "hipevolve_best"
EXPORT_DIR = "hipevolve_export"


EvaluatorFactory = Callable[[TaskSpec, Settings, str], Evaluator]
__all__ = [
    "EvaluatorFactory",
    "first_candidates",
    "gpu_evaluator",
    "ray_evaluator",
    "require_gpu",
    "run_job",
]


class _Plan(BaseModel):
    """What run_evolution is called with: fresh, or read back from the run being resumed."""

    run: int | None
    budget: int
    seed: int
    settings: EvolutionSettings


# ------------------------------------------------------------------------------ the job


def run_job(
    options: JobOptions, evaluators: EvaluatorFactory, console: Console, err_console: Console
) -> Outcome:
    """Runs (or resumes) one search, prints how it ended and returns that; UserError for bad
    input."""
    if options.budget is not None:
        check_budget(options.budget)
    if options.resume is None and options.budget is None:
        raise UserError("--budget is required to start a run", "pass --budget N (evaluations)")
    settings = load_settings(options.flags())
    # The cheap checks first: the archive's path, and a resume's run and budget (a mistyped
    # --archive is named before a model or GPU is looked for).
    check_path(settings.run.archive, create=options.resume is None)
    if options.resume is not None:
        from hipevolve.agents.llm.run_models import recorded_models, resumed_models

        with Archive.open(settings.run.archive, create=False, read_only=True) as archive:
            _resumed_run(options, archive)
            found = recorded_models(archive, options.resume)
        # A resume keeps the run's models: none given, the recorded ones; others are refused.
        models = resumed_models(settings.models, found, options.resume)
        settings = settings.model_copy(update={"models": models})
    from hipevolve.agents.llm.preflight import check_models
    from hipevolve.problems import get_task

    check_models(settings.models)  # one line before anything is written
    task = get_task(
        options.task,
        settings.tasks.dirs,
        lambda line: err_console.print(f"[yellow]warning:[/yellow] {escape(line)}"),
    )
    translates = bool(settings.models.role_models().get("translator"))
    first = first_candidates(
        task, translates=translates
    )  # with a model, the translator writes them
    # In a run the reference timed inside each evaluation is only a check of the machine's
    # noise (the run's baseline is the denominator): a few trials do.
    verifier = settings.verifier.model_copy(
        update={"reference_trials": settings.fitness.check_trials}
    )
    settings = settings.model_copy(update={"verifier": verifier})
    evaluate = evaluators(task, settings, settings.verifier.backend)
    try:
        if settings.models.models() and options.budget:
            _say_cost(settings, task, evaluate, options.budget, err_console)
        # A resume never creates an archive: a mistyped path should not leave an empty file.
        with Archive.open(settings.run.archive, create=options.resume is None) as archive:
            plan = _plan(options, settings, archive, task, evaluate.parallelism)
            return _drive(
                options, settings, task, archive, plan, first, evaluate, console, err_console
            )
    finally:
        evaluate.close()  # the worker slots' judges, or the Ray workers


def first_candidates(task: TaskSpec, *, translates: bool = False) -> list[Child]:
    """Generation 0's candidates, for run_evolution: the task's seed kernels, one per distinct
    code. A task without any starts from its reference: translated by the model behind the
    agents' translator where there is one (`translates`: none here, the policy writes them),
    else lowered offline by the translator. One that does not lower is refused in one line,
    before anything is written."""
    if task.seeds:
        seeds: dict[str, Candidate] = {}
        for path in task.seeds:
            candidate = load_candidate(path)
            seeds.setdefault(candidate.source_hash, candidate)
        return [Child(candidate=c, island=0, agent=SEED) for c in seeds.values()]
    if translates:
        return []
    from hipevolve.agents.roles.translator import ROLE, lowered  # torch.fx, only when needed

    found = lowered(task)
    if not isinstance(found, Candidate):
        raise UserError(
            f"task {task.name} has no seed kernels to start from, and its reference does "
            f"not lower offline ({found.reason})",
            'list its seed kernel folders in its task.toml: seeds = ["seeds/NAME"], '
            "or pass --model so the translator writes a first kernel",
        )
    return [Child(candidate=found, island=0, agent=ROLE)]


def _plan(
    options: JobOptions, settings: Settings, archive: Archive, task: TaskSpec, parallelism: int = 1
) -> _Plan:
    """A fresh run's plan, or the resumed run's own. `parallelism`: evaluations the evaluator
    runs at once (its GPUs); unless evolution.proposals_per_island is set, a generation proposes
    at least that many children. Unless evolution.lag is set, a fresh run plans each generation
    from the islands one generation back (lag 1), so the next generation compiles and evaluates
    while the slowest evaluations of the last one finish; the lag is recorded with the run's
    settings, and a resumed run keeps its own."""
    if options.resume is None:
        return _Plan(
            run=None,
            budget=options.budget or 0,
            seed=settings.run.seed,
            settings=_fresh(settings.evolution, parallelism, paced=bool(settings.models.models())),
        )
    info = _resumed_run(options, archive)
    # The flags given must match the run; the file's [evolution] and run.seed are for new runs.
    asked = None
    if options.islands is not None:
        recorded = EvolutionSettings.model_validate(info.settings)
        asked = recorded.model_copy(update={"islands": options.islands})
    evolution = check_resume(info, task.name, options.seed, asked)
    # A run resumed with a larger --budget keeps it: the loop logs it in its resume events.
    budget = options.budget or recorded_limit(archive, info.id)
    if not budget:
        raise UserError(f"run {info.id} recorded no budget", "pass --budget N")
    return _Plan(run=info.id, budget=budget, seed=info.seed, settings=evolution)


def _resumed_run(options: JobOptions, archive: Archive) -> RunInfo:
    """The run --resume names; one-line UserError when the archive has no such run, or when
    --budget is below the evaluations it already spent."""
    runs = archive.runs()
    info = next((r for r in runs if r.id == options.resume), None)
    if info is None:
        listed = "; ".join(
            f"run {r.id}: {r.task}, {r.status}, {RunBudget.from_archive(archive, r.id).spent} "
            "evaluations"
            for r in runs
        )
        raise UserError(
            f"no run {options.resume} in {archive.path}",
            f"runs there: {listed}" if runs else "it holds no runs yet; start one with --budget",
        )
    spent = RunBudget.from_archive(archive, info.id).spent
    if options.budget is not None and options.budget < spent:
        raise UserError(
            f"--budget {options.budget} is below the {spent} evaluations run {info.id} already "
            "spent",
            f"pass a --budget above {spent}, or leave it out to keep the run's own",
        )
    return info


def _fresh(
    evolution: EvolutionSettings, parallelism: int, paced: bool = False
) -> EvolutionSettings:
    """A new run's evolution settings: the tree's, with what `evolve` decides where they leave
    it unset (lag 1, or with a model the bound of a lag paced by measured latencies,
    evolution/pace.py; enough proposals per generation to keep every GPU busy)."""
    decided: dict[str, int] = {}
    if "lag" not in evolution.model_fields_set:
        decided["lag"] = MOST_LAG if paced else 1
    if "proposals_per_island" not in evolution.model_fields_set:
        decided["proposals_per_island"] = max(1, math.ceil(parallelism / evolution.islands))
    return EvolutionSettings.model_validate({**evolution.model_dump(), **decided})


def _drive(
    options: JobOptions,
    settings: Settings,
    task: TaskSpec,
    archive: Archive,
    plan: _Plan,
    first: Sequence[Child],
    evaluate: Evaluator,
    console: Console,
    err_console: Console,
) -> Outcome:
    intro = (
        f"{task.name}: resuming run {plan.run} (budget {plan.budget} evaluations)"
        if plan.run is not None
        else f"{task.name}: evaluating the seed kernels (budget {plan.budget} evaluations)"
    )
    display = RunDisplay(console, err_console, task.name, intro)
    with _CtrlC(display.stopping) as ctrl_c:
        try:
            with ctrl_c.searching(), display:
                summary = run_evolution(
                    task,
                    archive,
                    plan.settings,
                    evaluate,
                    first=first,
                    budget=plan.budget,
                    seed=plan.seed,
                    run_id=plan.run,
                    on_progress=display.update,
                    on_status=display.say,
                    should_stop=ctrl_c.stop.is_set,
                    policy=_policy(settings, archive, plan.run, evaluate),
                    fitness=settings.fitness,
                    pace=_pace(settings, archive, plan, evaluate),
                )
        except KeyboardInterrupt:  # the second Ctrl-C
            run = _held_here(archive, task)
            run = run if run is not None else plan.run
            best = _save_best(archive, run, task) if run is not None else None
            outcome = _outcome(
                options,
                settings,
                task,
                archive,
                run,
                best,
                INTERRUPTED,
                "aborted: the evaluations in flight were dropped; resuming evaluates them first",
            )
        except UserError as e:  # disk full and the like, mid-run: say how to go on
            run = _held_here(archive, task)
            if run is None:  # refused before the run was ours (a live writer holds it, ...)
                raise
            resume = resume_command(
                task.name,
                settings.run.archive,
                run,
                options.tasks_dirs,
                options.backend,
                options.ray,
            )
            raise UserError(e.problem, f"{e.fix}; then: {resume}" if e.fix else resume) from None
        else:
            best = _save_best(archive, summary.run, task)
            message = "\n".join(
                line
                for line in (
                    _message(summary),
                    _model_lines(archive, summary.run, settings.models.models()),
                )
                if line
            )
            outcome = _outcome(
                options,
                settings,
                task,
                archive,
                summary.run,
                best,
                _exit_code(summary),
                message,
            )
        print_outcome(console, outcome)
    return outcome


def _policy(settings: Settings, archive: Archive, run: int | None, evaluate: Evaluator):
    """The agents over the models (None: no model, the offline mutator), within the agents'
    limits, told which backend and device time the run. A resumed run's LLM spending counts
    against its budgets, and its bandit starts from its record."""
    if not settings.models.models():
        return None
    from hipevolve.agents.briefing import Target
    from hipevolve.agents.llm.client import spent_in
    from hipevolve.agents.llm.ensemble import Ensemble
    from hipevolve.agents.llm.run_models import arms_in
    from hipevolve.agents.policy import AgentPolicy

    spent = spent_in(archive, run) if run is not None else None
    arms = arms_in(archive, run) if run is not None else None  # the bandit goes on where it was
    target = Target(evaluate.backend, evaluate.device or "")
    return AgentPolicy(Ensemble(settings.models, spent=spent, arms=arms), settings.agents, target)


def _pace(settings: Settings, archive: Archive, plan: _Plan, evaluate: Evaluator) -> Pace | None:
    """With a model, the run's pace (evolution/pace.py): graph runs in flight from the slots and
    measured latencies unless agents.concurrency is set, and each generation's lag (up to the
    recorded evolution.lag) unless evolution.lag is set. A resumed run is paced if it recorded
    `pace` events. None: no model."""
    if not settings.models.models():
        return None
    if plan.run is None:
        paced = "lag" not in settings.evolution.model_fields_set
    else:
        paced = bool(archive.events(plan.run, PACE))
    return Pace(
        evaluate.parallelism,
        concurrency=settings.agents.concurrency,
        lag_bound=plan.settings.lag if paced else None,
    )


def _say_cost(
    settings: Settings, task: TaskSpec, evaluate: Evaluator, budget: int, err_console: Console
) -> None:
    """One line before a run with models: the floor of what it will cost, and the cap."""
    from hipevolve.agents.briefing import Target
    from hipevolve.app.cost_estimate import estimate

    models = settings.models
    target = Target(evaluate.backend, evaluate.device or "")
    # Several models: the floor is the cheapest one's (the bandit may settle on it).
    found = min(
        (
            estimate(m, task, target, budget, models.api_base)
            for m in models.role_models().get("mutator") or models.models()
        ),
        key=lambda f: f.usd or 0.0,
    )
    err_console.print(found.line(models.cost_budget_usd))


def _model_lines(archive: Archive, run: int, models: Sequence[str]) -> str:
    """With several models, one line each: its calls, tokens, cost, and the children it wrote
    that beat their parent (`evolve report` has the same table)."""
    if len(models) < 2:
        return ""
    return "\n".join(
        f"model {u.model}: {u.calls} calls, {u.tokens_in + u.tokens_out:,} tokens, "
        f"${u.cost_usd:.4f}; {u.children} children, {u.improved} beat their parent"
        for u in archive.llm_usage_by_model(run)
    )


def _exit_code(summary: RunSummary) -> int:
    if summary.status == "interrupted":
        return INTERRUPTED
    return 1 if summary.reason == "no_seed" else 0


def _message(summary: RunSummary) -> str:
    # The loop's message ends with a resume hint for library callers; the CLI prints its own.
    message = summary.message
    if summary.resume:
        message = message.removesuffix(f"; {summary.resume}")
    lines = (message, summary.baseline, summary.against, summary.confirmation, summary.islands)
    return "\n".join(line for line in lines if line)


def _outcome(
    options: JobOptions,
    settings: Settings,
    task: TaskSpec,
    archive: Archive,
    run: int | None,
    best: BestKernel | None,
    exit_code: int,
    message: str,
) -> Outcome:
    resume = export = verify = None
    if run is not None and exit_code == INTERRUPTED:
        resume = resume_command(
            task.name, settings.run.archive, run, options.tasks_dirs, options.backend, options.ray
        )
    if run is not None and best is not None:
        out = archive.path.parent / EXPORT_DIR / archive.path.stem / f"{task.name}-run{run}"
        export = command(
            "evolve",
            "export",
            "--task",
            task.name,
            "--run",
            str(run),
            "--archive",
            settings.run.archive,
            "--out",
            out,
        )
        dirs = [a for d in options.tasks_dirs for a in ("--tasks-dir", str(d))]
        verify = command("evolve", "verify", best.folder, "--task", task.name, *dirs)
    return Outcome(
        task=task.name,
        run=run,
        archive=settings.run.archive,
        message=message,
        best=best,
        resume=resume,
        export=export,
        verify=verify,
        exit_code=exit_code,
    )


def _held_here(archive: Archive, task: TaskSpec) -> int | None:
    """The run this process started or resumed and still holds, if it got that far."""
    mine = [
        r.id
        for r in archive.runs()
        if r.task == task.name and r.writer_pid == os.getpid() and r.status == "running"
    ]
    return mine[-1] if mine else None


def _save_best(archive: Archive, run: int, task: TaskSpec) -> BestKernel | None:
    """Writes the run's best candidate to <archive dir>/hipevolve_best/<archive>/<task>-run<R>/
    (<archive>: the archive's file name without .db, so two archives of one folder never write
    the same folder)."""
    top = archive.best(run)
    if top is None:
        return None
    record = archive.candidate(top.candidate_id)
    folder = archive.path.parent / BEST_DIR / archive.path.stem / f"{task.name}-run{run}"
    written = write_candidate(record.candidate, folder)
    return BestKernel(
        candidate_id=top.candidate_id,
        source_hash=record.source_hash,
        fitness=top.fitness,
        speedups={c.case: c.speedup for c in top.evaluation.cases if c.speedup is not None},
        folder=written,
    )


class _CtrlC:
    """SIGINT while searching: the first sets `stop` (the loop finishes the batch in flight),
    the second raises KeyboardInterrupt. Outside the search (saving the best kernel, printing
    the summary, a few milliseconds) it is ignored, so the resume line is always printed.
    The previous handler is restored on exit."""

    def __init__(self, on_first: Callable[[], None]) -> None:
        self.stop = threading.Event()
        self.on_first = on_first
        self.active = False
        self.previous: object = None

    def __enter__(self) -> _CtrlC:
        # Handlers can only be set from the main thread; elsewhere Ctrl-C keeps its default.
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    @contextmanager
    def searching(self) -> Iterator[None]:
        self.active = True
        try:
            yield
        finally:
            self.active = False

    def _handle(self, signum: int, frame: object) -> None:
        if not self.active:
            return
        if not self.stop.is_set():
            self.stop.set()
            self.on_first()
            return
        raise KeyboardInterrupt
