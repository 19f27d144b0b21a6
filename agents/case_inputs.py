"""What a case's inputs are, for a task whose cases name none: a KernelBench file sizes its
inputs inside get_inputs() and with module constants (problems/kernelbench.py), so its cases carry
no keyword arguments and a prompt listing them said only "default:". The reference's
get_inputs() and get_init_inputs() run on the meta device (shapes and dtypes, no memory and no
compute: a 2 GiB case costs nothing), with the case's constants set, as the offline lowering
traces them (agents/lowering/fx_trace.py). Read once per reference file, modification time and
case.
"""

from __future__ import annotations

import functools
from pathlib import Path

from hipevolve.core.taskspec import Case, TaskSpec


def case_inputs(task: TaskSpec, case: Case) -> str:
    """The case's inputs as a prompt lists them: its keyword arguments where it names them, else
    the tensors (dtype[shape]) and constructor arguments its reference builds."""
    if case.inputs or not task.reference.exists():
        return ", ".join(f"{k}={v}" for k, v in case.inputs.items())
    return _built(str(task.reference), task.reference.stat().st_mtime, case.model_dump_json())


@functools.lru_cache(maxsize=256)
def _built(path: str, mtime: float, case_json: str) -> str:
    import torch

    from hipevolve.core.reference import load_module, module_globals

    case = Case.model_validate_json(case_json)
    try:
        module = load_module(Path(path))
        with module_globals(module, dict(case.globals)), torch.device("meta"):
            inputs = list(module.get_inputs(**case.inputs))
            init = list(module.get_init_inputs(**case.init))
    except Exception as e:  # noqa: BLE001 (the reference's own failure: said in one line)
        return f"(its inputs could not be built on the meta device: {type(e).__name__}: {e})"[:200]
    text = "inputs " + ", ".join(map(_value, inputs))
    constants = ", ".join(f"{k}={v}" for k, v in case.globals.items())
    text += f"; Model({', '.join(map(_value, init))})" if init else ""
    return text + (f"; with {constants}" if constants else "")


def _value(value: object) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')}[{', '.join(map(str, value.shape))}]"
    return repr(value)
