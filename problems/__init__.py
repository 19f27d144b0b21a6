"""The task library: built-in tasks in this folder, plus user folders.

A folder holding `task.toml` is one task (see hipevolve.core.taskspec). In a user folder, each such
subfolder is a task, each other `*.py` file is read as a KernelBench-format task, and other
subfolders are searched the same way (KernelBench's dataset root holds level1..level4). A
malformed task in a user folder is skipped (reported in one line through `warn` where given), so
the rest of its folder loads; asking for that task by name is the one-line error that says what
is wrong with its file.
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
from hipevolve.problems.kernelbench import load_kernelbench_file, task_name

BUILTIN_DIR = Path(__file__).resolve().parent
TASKS_ENV = "HIPEVOLVE_TASKS"
Warn = Callable[[str], None]  # takes one line about a task that was skipped
Broken = dict[str, UserError]  # a malformed user task's name -> what is wrong with its file


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


def _names(entry: Path) -> set[str]:
    """The task names a file or folder would have given: a KernelBench file's, a task folder's
    (its folder name, and the name its task.toml gives where that much of it reads)."""
    if entry.suffix == ".py":
        return {task_name(entry)}
    names = {entry.name}
    try:
        name = tomllib.loads((entry / "task.toml").read_text()).get("name")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        name = None
    return names | ({name} if isinstance(name, str) else set())


def _tasks_in(directory: Path, origin: str, broken: Broken) -> Iterable[TaskSpec]:
    """The tasks of a folder. In a user folder, subfolders without task.toml are searched too
    (a dataset's root finds every level), and a malformed task goes into `broken` (under each
    name it would have had) instead of hiding the folder's other tasks."""
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
                yield from _tasks_in(entry, origin, broken)
            elif origin != "builtin" and entry.suffix == ".py":
                yield load_kernelbench_file(entry)
        except UserError as e:
            if origin == "builtin":
                raise
            broken.update(dict.fromkeys(_names(entry), e))


def user_dirs(extra: Iterable[Path] = ()) -> list[Path]:
    """--tasks-dir folders first, then those of HIPEVOLVE_TASKS (os.pathsep-separated)."""
    dirs = [Path(d) for d in extra]
    dirs += [Path(d) for d in os.environ.get(TASKS_ENV, "").split(os.pathsep) if d]
    return dirs


def _library(tasks_dirs: Iterable[Path]) -> tuple[dict[str, TaskSpec], Broken]:
    """Every task by name (built-in ones, then user ones; a user task may not shadow another),
    and the malformed user tasks by name with what is wrong with each."""
    broken: Broken = {}
    tasks: dict[str, TaskSpec] = {t.name: t for t in _tasks_in(BUILTIN_DIR, "builtin", broken)}
    for directory in user_dirs(tasks_dirs):
        if not directory.exists():
            raise UserError(f"tasks folder {directory} does not exist", "check --tasks-dir")
        found = (
            [load_kernelbench_file(directory)]
            if directory.is_file()
            else _tasks_in(directory, "user", broken)
        )
        for task in found:
            if task.name in tasks:
                raise UserError(
                    f"task name {task.name!r} from {task.reference} is already taken by "
                    f"{tasks[task.name].reference}",
                    "rename one of them",
                )
            tasks[task.name] = task
    return tasks, broken


def _report(broken: Broken, warn: Warn | None) -> None:
    """One line per malformed file through `warn`, each file once."""
    for error in dict.fromkeys(broken.values()) if warn is not None else ():
        warn(f"skipped {error.line()}")


def discover(tasks_dirs: Iterable[Path] = (), warn: Warn | None = None) -> dict[str, TaskSpec]:
    """All tasks by name: built-in ones, then user ones (a user task may not shadow another).
    A malformed user task is skipped, and reported through `warn` where given. A file named
    itself as a tasks folder is read as asked: a malformed one is a UserError."""
    tasks, broken = _library(tasks_dirs)
    _report(broken, warn)
    return tasks


def get_task(name: str, tasks_dirs: Iterable[Path] = (), warn: Warn | None = None) -> TaskSpec:
    """The task called `name`. Malformed user tasks are skipped as in `discover`; when `name`
    is one of them, the UserError says what is wrong with its file."""
    tasks, broken = _library(tasks_dirs)
    if name not in tasks and name in broken:
        raise broken[name]
    _report(broken, warn)
    if name in tasks:
        return tasks[name]
    close = difflib.get_close_matches(name, list(tasks), n=3, cutoff=0.5)
    hint = f"closest: {', '.join(close)}" if close else "see `evolve tasks list`"
    raise UserError(f"unknown task {name!r}", hint)
