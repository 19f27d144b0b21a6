"""What the export tests share: a finished stand-in run of the y = 2x task, the `evolve export`
commands on a test app, and a fresh interpreter in which hipevolve cannot be imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer
from standin import TASK_NAME, StandIn, write_task_folder
from typer.testing import CliRunner

from hipevolve.app.export_commands import register
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import load_task_folder

REPO = Path(__file__).resolve().parents[1]
PACKAGE = f"hipevolve_kernel_{TASK_NAME}"

# Prepended to every subprocess: importing hipevolve (or any hipevolve.*) raises, as on a
# machine where it is not installed; the first lines prove the block works.
NO_HIPEVOLVE = """\
import importlib.abc
import sys


class _NoHipevolve(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "hipevolve" or name.startswith("hipevolve."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
        return None


sys.meta_path.insert(0, _NoHipevolve())
try:
    import hipevolve  # noqa: F401
    raise SystemExit("hipevolve was importable: the block failed")
except ModuleNotFoundError:
    pass
"""


def without_hipevolve(code: str, *args: str, cwd: Path, env: dict[str, str] | None = None,
                      timeout: float = 180) -> subprocess.CompletedProcess[str]:  # fmt: skip
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | (env or {})
    return subprocess.run([sys.executable, "-c", NO_HIPEVOLVE + code, *args], cwd=cwd,
                          env=environment, capture_output=True, text=True, timeout=timeout)  # fmt: skip


def standin_run(root: Path, budget: int = 16, seed: int = 3) -> Path:
    """A finished stand-in search of the y = 2x task in root/run.db; returns the archive path."""
    task = load_task_folder(write_task_folder(root) / TASK_NAME, "user")
    db = root / "run.db"
    with Archive.open(db) as archive:
        run_evolution(task, archive, EvolutionSettings(), StandIn(root / "log"),
                      first=first_candidates(task), budget=budget, seed=seed)  # fmt: skip
    return db


def cli(*args: str):
    app = typer.Typer()
    register(app)
    return CliRunner().invoke(app, [str(a) for a in args])
