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

ApiBase = Annotated[
    str | None,
    typer.Option(
        help="URL of a local OpenAI-compatible server (vLLM, SGLang, Ollama), e.g. "
        "http://127.0.0.1:8000/v1.",
        show_default=False,
        rich_help_panel=MODELS,
    ),
]


def model_option(what: str, default: str, more: str = ""):  # noqa: ANN201 (an Annotated type)
    """The --model option of a command whose models do `what` (`default`: what runs without
    one): any litellm model string, repeatable, a bandit picking among them per call (`more`
    follows that); also HIPEVOLVE_MODEL."""
    return Annotated[
        list[str] | None,
        typer.Option(
            help=f"{what}, any litellm model string (anthropic/claude-sonnet-4-5, openai/gpt-4.1, "
            f"openai/<name> with --api-base); repeatable: a bandit picks among them per call{more}; "
            "also HIPEVOLVE_MODEL.",
            show_default=default,
            rich_help_panel=MODELS,
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
