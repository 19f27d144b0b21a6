"""KernelBench-format files as tasks: class Model, get_inputs(), get_init_inputs().

The file is read with `ast`, not imported, to list it: a malformed file is reported by name with
what it lacks, and nothing in it runs until its reference is evaluated.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import Case, TaskSpec, Tolerance

REQUIRED = {"Model": ast.ClassDef, "get_inputs": ast.FunctionDef,
            "get_init_inputs": ast.FunctionDef}


def task_name(path: Path) -> str:
    """A file name as a task name: '19_ReLU.py' -> '19_ReLU'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem)


def load_kernelbench_file(path: Path) -> TaskSpec:
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except SyntaxError as e:
        raise UserError(f"{path}: not valid Python (line {e.lineno}: {e.msg})",
                        "fix the file or move it out of the tasks folder") from None
    defined = {node.name: type(node) for node in tree.body
               if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    missing = [name for name, kind in REQUIRED.items() if defined.get(name) is not kind]
    if missing:
        raise UserError(f"{path}: not a KernelBench task, missing {', '.join(missing)}",
                        "define class Model, get_inputs() and get_init_inputs()")
    doc = ast.get_docstring(tree) or ast.get_docstring(
        next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model")) or ""
    return TaskSpec(
        name=task_name(path),
        description=doc.strip().splitlines()[0] if doc.strip() else f"KernelBench task {path.name}",
        family="kernelbench",
        origin="kernelbench",
        reference=path.resolve(),
        cases=(Case(name="default", small=False),),
        tolerance=Tolerance(kind="kernelbench"),
    )
