"""What `evolve --task T --budget N` shows while it runs, and what it prints at the end.

On a terminal: a rich Live panel redrawn after each generation (evaluations of the budget, valid
rate, best speedup with its per-case table, evaluations per minute, time left). Elsewhere (a pipe,
a log file, CI): one plain line per generation, so logs stay greppable and free of escape codes.
The evaluations of the budget and the units left are the run's one budget's
(evolution/budget.py); the time left comes from how long evaluations take on a slot as they
complete (evolution/clock.py), never from the rate since the start, which counts start-up.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from pydantic import BaseModel, ConfigDict
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from hipevolve.evolution.run import Progress


class BestKernel(BaseModel):
    """The best candidate of a run, where it is stored, and where its files were written."""

    model_config = ConfigDict(frozen=True)

    candidate_id: int
    source_hash: str
    fitness: float
    speedups: dict[str, float]
    folder: Path


class Outcome(BaseModel):
    """How the job ended: what the final summary prints, and the exit code."""

    model_config = ConfigDict(frozen=True)

    task: str
    run: int | None
    archive: Path
    message: str
    best: BestKernel | None
    resume: str | None = None  # the command that continues the run, when it was interrupted
    export: str | None = None  # the command that exports the best kernels
    verify: str | None = None  # the command that re-scores the best kernel's files
    exit_code: int = 0


def command(*argv: str | Path) -> str:
    return shlex.join(str(a) for a in argv)


def _minutes(seconds: float) -> str:
    seconds = round(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


NO_ETA = "ETA after the first evaluation"


def time_left(p: Progress) -> str:
    """The time the budget's units left take: each holds a slot for the wall seconds measured
    per evaluation, and the evaluator's slots run side by side. Before an evaluation has
    completed nothing is measured, and it says so."""
    if p.left <= 0:
        return "0m00s left"
    if p.seconds_per_evaluation is None:
        return NO_ETA
    return f"about {_minutes(p.left * p.seconds_per_evaluation / max(p.slots, 1))} left"


def progress_line(p: Progress) -> str:
    """The plain one-line form, printed once per generation when stdout is not a terminal."""
    best = (
        f"best {p.best_fitness:.3f}x (candidate {p.best_candidate})"
        if p.best_candidate is not None
        else "best none yet"
    )
    return (
        f"run {p.run} generation {p.generation}: {p.spent}/{p.budget} evaluations, "
        f"valid {p.valid_rate:.0%}, {best}, {p.evaluations_per_minute:.1f}/min, {time_left(p)}"
    )


def speedup_table(speedups: dict[str, float], title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("case")
    table.add_column("speedup", justify="right")
    for case, value in speedups.items():
        table.add_row(case, f"{value:.3f}x")
    return table


def _panel(task: str, intro: str, p: Progress | None, stopping: bool) -> Group:
    if p is None:
        parts: list = [Text(intro), Text(NO_ETA)]
    else:
        best = (
            f"best {p.best_fitness:.3f}x geometric mean (candidate {p.best_candidate})"
            if p.best_candidate is not None
            else "no valid kernel yet"
        )
        parts = [
            Text(
                f"{task} run {p.run}, generation {p.generation}: {p.spent}/{p.budget} "
                f"evaluations, valid {p.valid_rate:.0%}, {p.evaluations_per_minute:.1f} "
                f"evaluations/min, {time_left(p)}"
            ),
            Text(best, style="bold"),
        ]
        if p.best_speedups:
            parts.append(speedup_table(p.best_speedups))
    if stopping:
        parts.append(
            Text(
                "stopping: finishing the evaluations in flight (Ctrl-C again to abort now)",
                style="yellow",
            )
        )
    return Group(*parts)


class RunDisplay:
    """Shows progress: a Live panel on a terminal, plain lines otherwise. A context manager."""

    def __init__(self, console: Console, err_console: Console, task: str, intro: str) -> None:
        self.console, self.err_console = console, err_console
        self.task, self.intro = task, intro
        self.latest: Progress | None = None
        self.is_stopping = False
        self.live: Live | None = None
        if console.is_terminal:
            self.live = Live(
                _panel(task, intro, None, False),
                console=console,
                refresh_per_second=4,
                transient=True,
            )

    def __enter__(self) -> RunDisplay:
        if self.live is not None:
            self.live.start()
        else:
            self.console.print(self.intro, soft_wrap=True, highlight=False)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            self.live.stop()

    def say(self, status: str) -> None:
        """What the run is doing before its first generation lands (the baseline, the seeds):
        the panel's first line on a terminal, a plain line elsewhere."""
        if self.latest is not None and self.live is not None:
            return  # the generations' own line says how it goes from here
        if self.live is not None:
            self.intro = f"{self.task}: {status}"
            self.live.update(_panel(self.task, self.intro, None, self.is_stopping), refresh=True)
        else:
            self.console.print(
                f"{self.task}: {status}", soft_wrap=True, highlight=False, markup=False
            )

    def update(self, p: Progress) -> None:
        """Called by the run loop after each generation."""
        self.latest = p
        if self.live is not None:
            self.live.update(_panel(self.task, self.intro, p, self.is_stopping), refresh=True)
        else:
            self.console.print(progress_line(p), soft_wrap=True, highlight=False)

    def stopping(self) -> None:
        """The first Ctrl-C: say the batch in flight is being finished."""
        self.is_stopping = True
        if self.live is not None:
            # No forced redraw: this runs in the signal handler, possibly inside a redraw.
            self.live.update(_panel(self.task, self.intro, self.latest, True))
        else:
            self.err_console.print(
                "stopping: finishing the evaluations in flight (Ctrl-C again to abort now)",
                soft_wrap=True,
                highlight=False,
            )


def print_outcome(console: Console, outcome: Outcome) -> None:
    """The final summary: why it stopped, the best kernel, where it is, how to go on."""
    out = console

    def say(text: str) -> None:
        out.print(text, soft_wrap=True, highlight=False, markup=False)

    say(outcome.message)
    best = outcome.best
    if best is None:
        say("best: no candidate has passed the verifier yet")
    else:
        say(
            f"best: candidate {best.candidate_id}, {best.fitness:.3f}x geometric-mean speedup "
            f"(source sha256 {best.source_hash})"
        )
        if best.speedups and console.is_terminal:
            out.print(speedup_table(best.speedups))
        else:  # plain lines in logs
            for case, value in best.speedups.items():
                say(f"  case {case}: {value:.3f}x")
        say(
            f"stored: archive {outcome.archive}, run {outcome.run}, candidate "
            f"{best.candidate_id}; files in {best.folder} (check them: {outcome.verify})"
        )
    if outcome.export:
        say(f"export: {outcome.export}")
    if outcome.resume:
        say(f"resume: {outcome.resume}")


def resume_command(
    task: str,
    archive: Path,
    run: int,
    tasks_dirs: Sequence[Path],
    backend: str | None,
    ray: str | None = None,
) -> str:
    """The exact `evolve` line that continues `run` (seed, islands and budget come from it)."""
    argv: list[str | Path] = ["evolve", "--task", task, "--archive", archive, "--resume", str(run)]
    for d in tasks_dirs:
        argv += ["--tasks-dir", d]
    if backend:
        argv += ["--backend", backend]
    if ray:
        argv += ["--ray", ray]
    return command(*argv)
