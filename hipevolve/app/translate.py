"""`evolve translate TASK --out DIR`: the offline translator as a command.

It lowers the task's PyTorch reference to a native candidate (agents/lowering/lower.py), writes
kernel.hip and model.py into DIR, and checks that the written ModelNew builds on the CPU (on the
task's small case: a KernelBench file's reduced one), so what it writes is a candidate
`evolve verify DIR --task TASK` can score; the command it prints for that carries the
--tasks-dir folders the task was found with, shell-quoted, so it runs as printed. A task that
does not lower is one line saying why. A folder that already holds a candidate is never
overwritten without --force (it may hold hand edits).
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from pydantic import BaseModel

from hipevolve.agents.lowering.lower import Unlowered, lower
from hipevolve.core.candidate import KERNEL_FILE, MODEL_FILE, Candidate, write_candidate
from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import TaskSpec


class Translated(BaseModel):
    """What `evolve translate` did: the folder written, or why nothing was."""

    task: str
    folder: Path | None = None
    reason: str = ""  # one line, when nothing was written or ModelNew does not build
    builds: bool = False  # ModelNew(*get_init_inputs()) builds on the CPU


def model_builds_on_cpu(candidate: Candidate, task: TaskSpec, folder: Path) -> str:
    """'' when the ModelNew of the candidate written in `folder` builds on the CPU with the
    task's small case (else its first); otherwise the first line of what went wrong."""
    from hipevolve.core.reference import load_module, module_globals

    case = (task.small_cases or task.cases)[0]
    name = f"hipevolve_translated_{uuid.uuid4().hex[:12]}"
    spec = importlib.util.spec_from_file_location(name, folder / "model.py")
    try:
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules[name] = module
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        with module_globals(load_module(task.reference), dict(case.globals)) as ref:
            module.ModelNew(*ref.get_init_inputs(**case.init))
    except Exception as e:  # noqa: BLE001 - what the written candidate raises is the answer
        first = (str(e).strip().splitlines() or [""])[0]
        return f"ModelNew does not build on the CPU: {type(e).__name__}: {first}"[:300]
    finally:
        sys.modules.pop(name, None)
    return ""


def refuse_to_overwrite(out: Path) -> None:
    """A UserError when `out` already holds a candidate's files: they may be hand-edited, and
    a translation would replace them."""
    taken = [name for name in (KERNEL_FILE, MODEL_FILE) if (out / name).exists()]
    if taken:
        raise UserError(
            f"--out {out} already holds {' and '.join(taken)}, which translating would replace",
            "pass another --out, or --force to replace them",
        )


def translate(task: TaskSpec, out: Path, force: bool = False) -> Translated:
    """Lowers `task` and writes the candidate into `out` (created). A candidate already there is
    refused (a UserError) unless `force`."""
    if not force:
        refuse_to_overwrite(out)
    found = lower(task)
    if isinstance(found, Unlowered):
        return Translated(task=task.name, reason=found.reason)
    try:
        folder = write_candidate(found, out)
    except OSError as e:
        raise UserError(
            f"cannot write the candidate to {out}: {e.strerror or e}",
            "pass a writable folder with --out",
        ) from None
    problem = model_builds_on_cpu(found, task, folder)
    return Translated(task=task.name, folder=folder, reason=problem, builds=not problem)


def verify_command(folder: Path, task: str, tasks_dirs: Iterable[Path] = ()) -> str:
    """`evolve verify` of the written candidate as a shell command, each path quoted; with the
    --tasks-dir folders `evolve translate` was given, so a user task is found the same way."""
    words = ["evolve", "verify", str(folder), "--task", task]
    for directory in tasks_dirs:
        words += ["--tasks-dir", str(directory)]
    return shlex.join(words)


def translate_task(
    name: str,
    out: Path,
    tasks_dirs: Iterable[Path],
    force: bool = False,
    warn: Callable[[str], None] | None = None,
) -> Translated:
    """The command's work: the task by name (with the settings' task folders, a malformed task
    there said through `warn`), into `out`."""
    from hipevolve.problems import get_task

    return translate(get_task(name, tasks_dirs, warn), out, force)


def print_translated(console, result: Translated, tasks_dirs: Iterable[Path] = ()) -> int:  # noqa: ANN001 (a rich Console)
    """One line per outcome; the exit code (0: written and builds). `tasks_dirs`: the
    --tasks-dir flags given, repeated in the printed verify command."""
    if result.folder is None:
        line = f"{result.task}: not lowered: {result.reason}"
    elif not result.builds:
        line = f"{result.task}: written to {result.folder}, but {result.reason}"
    else:
        command = verify_command(result.folder, result.task, tasks_dirs)
        line = (
            f"{result.task}: written to {result.folder} ({KERNEL_FILE}, {MODEL_FILE}); "
            f"score it with `{command}`"
        )
    console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0 if result.builds else 1
