"""Progress for the steps of a command that take more than a couple of seconds.

On a terminal: a spinner on stderr with the step's name and the seconds it has taken, gone when
the step ends. Elsewhere (a pipe, a log file, --json): nothing, so output stays clean.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn


@contextmanager
def working(console: Console, step: str) -> Iterator[Callable[[str], None]]:
    """Shows `step` while the block runs; yields a function that renames the step."""
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with progress:
        shown = progress.add_task(step, total=None)
        yield lambda text: progress.update(shown, description=text)
