"""Running a task's reference on its small cases: does it run, how fast, what does it return."""

from __future__ import annotations

import time

from pydantic import BaseModel

from hipevolve.core.taskspec import Case, TaskSpec


class ReferenceRun(BaseModel):
    task: str
    case: str
    ok: bool
    seconds: float = 0.0
    outputs: list[str] = []  # "shape dtype" per output
    error: str = ""  # first line of the exception, with its type


def cases_to_check(task: TaskSpec) -> tuple[Case, ...]:
    """The small cases (a KernelBench file's reduced case), or every case of a task that
    declares none."""
    return task.small_cases or task.cases


def run_reference(task: TaskSpec, case: Case, device: str = "cpu", seed: int = 0) -> ReferenceRun:
    from hipevolve.core.reference import run_case

    start = time.perf_counter()
    try:
        outputs = run_case(
            task.reference, dict(case.init), dict(case.inputs), device, seed, dict(case.globals)
        )
    except Exception as e:  # the reference is the user's code: report, never crash
        first = (str(e).strip().splitlines() or [""])[0]
        return ReferenceRun(
            task=task.name,
            case=case.name,
            ok=False,
            error=f"{type(e).__name__}: {first}",
            seconds=time.perf_counter() - start,
        )
    seconds = time.perf_counter() - start
    shapes = [f"{list(o.shape)} {str(o.dtype).removeprefix('torch.')}" for o in outputs]
    return ReferenceRun(task=task.name, case=case.name, ok=True, seconds=seconds, outputs=shapes)
