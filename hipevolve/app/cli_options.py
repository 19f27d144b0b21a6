"""What the `evolve` commands share: the consoles, the --json and --tasks-dir options, a warning
line, JSON output, and the settings tree with a command's flags over the file's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True, soft_wrap=True, highlight=False)
MODELS = "Models (optional: without --model the offline policies run)"  # a help panel
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
TasksDir = Annotated[
    list[Path] | None,
    typer.Option(
        "--tasks-dir",
        help="Extra task folder or KernelBench file (repeatable); also HIPEVOLVE_TASKS.",
        show_default=False,
    ),
]


def warn(line: str) -> None:
    err_console.print(f"[yellow]warning:[/yellow] {escape(line)}")


def print_json(data: object) -> None:
    print(json.dumps(data, indent=2))


def settings_with(tasks_dir: list[Path] | None, **sections: dict):
    """The settings tree with the flags given (--tasks-dir, and `sections`) over the file's."""
    from hipevolve.core.config import load_settings

    return load_settings({"tasks": {"dirs": tasks_dir or None}, **sections})
