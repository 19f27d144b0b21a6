"""The task library: built-in tasks in this folder, plus user folders.

A folder holding `task.toml` is one task (see hipevolve.core.taskspec). In a user folder, each such
subfolder is a task, each other `*.py` file is read as a KernelBench-format task, and other
subfolders are searched the same way (KernelBench's dataset root holds level1..level4). With
`warn`, a malformed task is reported in one line and skipped; the rest of its folder loads.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import ValidationError

from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import TaskSpec, parse_task_toml
from hipevolve.problems.kernelbench import load_kernelbench_file

BUILTIN_DIR = Path(__file__).resolve().parent
TASKS_ENV = "HIPEVOLVE_TASKS"
Warn = Callable[[str], None]  # takes one line about a task that was skipped


def load_task_folder(folder: Path, origin: str) -> TaskSpec:
    toml_path = folder / "task.toml"
    try:
        data = tomllib.loads(toml_path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{toml_path}: not valid TOML: {e}", "fix the file") from None
    try:
        return parse_task_toml(data, folder, origin)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "task"
        raise UserError(f"{toml_path}: {where}: {first['msg']}", "fix the file") from None


def _tasks_in(directory: Path, origin: str, warn: Warn | None = None) -> Iterable[TaskSpec]:
    """The tasks of a folder. In a user folder, subfolders without task.toml are searched too
    (a dataset's root finds every level), and with `warn` a malformed task is reported through
    it in one line and skipped instead of hiding the folder's other tasks."""
    if (directory / "task.toml").is_file():
        yield load_task_folder(directory, origin)
        return
    for entry in sorted(directory.iterdir()):
        if entry.name.startswith((".", "_")):
            continue
        try:
            if entry.is_dir() and (entry / "task.toml").is_file():
                yield load_task_folder(entry, origin)
            elif origin != "builtin" and entry.is_dir():
                yield from _tasks_in(entry, origin, warn)
            elif origin != "builtin" and entry.suffix == ".py":
                yield load_kernelbench_file(entry)
        except UserError as e:
            if warn is None:
                raise
            warn(f"skipped {e.line()}")


def user_dirs(extra: Iterable[Path] = ()) -> list[Path]:
    """--tasks-dir folders first, then those of HIPEVOLVE_TASKS (os.pathsep-separated)."""
    dirs = [Path(d) for d in extra]
    dirs += [Path(d) for d in os.environ.get(TASKS_ENV, "").split(os.pathsep) if d]
    return dirs


def discover(tasks_dirs: Iterable[Path] = (), warn: Warn | None = None) -> dict[str, TaskSpec]:
    """All tasks by name: built-in ones, then user ones (a user task may not shadow another).
    `warn`: where a malformed user task is reported (and skipped); None: it is a UserError."""
    tasks: dict[str, TaskSpec] = {t.name: t for t in _tasks_in(BUILTIN_DIR, "builtin")}
    for directory in user_dirs(tasks_dirs):
        if not directory.exists():
            raise UserError(f"tasks folder {directory} does not exist", "check --tasks-dir")
        found = [load_kernelbench_file(directory)] if directory.is_file() else _tasks_in(
            directory, "user", warn)
        for task in found:
            if task.name in tasks:
                raise UserError(
                    f"task name {task.name!r} from {task.reference} is already taken by "
                    f"{tasks[task.name].reference}", "rename one of them")
            tasks[task.name] = task
    return tasks


def get_task(name: str, tasks_dirs: Iterable[Path] = (), warn: Warn | None = None) -> TaskSpec:
    tasks = discover(tasks_dirs, warn)
    if name in tasks:
        return tasks[name]
    close = difflib.get_close_matches(name, list(tasks), n=3, cutoff=0.5)
    hint = f"closest: {', '.join(close)}" if close else "see `evolve tasks list`"
    raise UserError(f"unknown task {name!r}", hint)
