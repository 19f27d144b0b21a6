"""The exported package's custom op: its signature read from the task's reference (for the
torch.library registration) and op.py rendered from it."""

from __future__ import annotations

import inspect
import keyword
import math
import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from hipevolve.core.base import Frozen
from hipevolve.core.taskspec import TaskSpec
from hipevolve.export.folders import render

_RESERVED = {"torch", "typing", "instances", "ModelNew", "Model", "OUTPUTS", "kernel_op", "_fake"}


class OpArg(Frozen):
    name: str = Field(description="the Python parameter name")
    annotation: str = Field(description="its type as custom_op reads it")
    default: str | None = Field(default=None, description="Python literal, for constructor args")
    source: str = Field(default="", description="state: the module's parameter or buffer name")


class OpSignature(Frozen):
    """torch.ops.hipevolve.<op>(forward inputs, the module's tensors, constructor arguments)."""

    op: str
    inputs: tuple[OpArg, ...]
    state: tuple[OpArg, ...]
    init: tuple[OpArg, ...]
    outputs: int = Field(ge=1)


def identifier(name: str) -> str:
    """A task name as a Python and operator identifier: 19_ReLU -> task_19_ReLU."""
    cleaned = re.sub(r"\W", "_", name)
    return cleaned if cleaned[:1].isalpha() or cleaned[:1] == "_" else f"task_{cleaned}"


def _annotation(value: Any) -> str | None:
    import torch

    if isinstance(value, torch.Tensor):
        return "torch.Tensor"
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, torch.Tensor) for v in value)
    ):
        return "list[torch.Tensor]"
    for kind in (bool, int, float, str):  # bool first: it is an int too
        if isinstance(value, kind):
            return kind.__name__
    return None


def _names(fn: Any, count: int, fallback: str) -> list[str]:
    """Parameter names of fn (self dropped) for `count` positional values, else fallbacks."""
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= count and not any(p.kind is p.VAR_POSITIONAL for p in params[:count]):
        return positional[:count]
    return [f"{fallback}{i}" for i in range(count)]


def _unique(names: Sequence[str]) -> list[str]:
    taken: set[str] = set()
    out = []
    for name in names:
        name = re.sub(r"\W", "_", name)
        while name in taken or name in _RESERVED or keyword.iskeyword(name) or not name:
            name += "_"
        taken.add(name)
        out.append(name)
    return out


def op_signature(task: TaskSpec) -> OpSignature:
    """The op's signature, read from the reference: its forward names, its inputs' and outputs'
    types on a small case (on the CPU) or a large one (on the meta device, no memory), its
    parameters and buffers, and its constructor arguments with the first timed case's values as
    defaults. Raises ValueError with the reason when the schema cannot express the task."""
    import torch

    from hipevolve.core.reference import as_outputs, build_inputs, load_module, module_globals

    module = load_module(task.reference)
    probe = (task.small_cases or task.cases)[0]
    device = "cpu" if probe.small else "meta"
    defaults_case = (task.timed_cases or task.cases)[0]
    with (
        torch.random.fork_rng(devices=[]),
        torch.device(device),
        torch.no_grad(),
        module_globals(module, dict(probe.globals)),
    ):  # a KernelBench file's reduced case
        model = module.Model(*module.get_init_inputs(**probe.init))
        inputs = build_inputs(module, probe.inputs, device, seed=0)
        result = model(*inputs)
    init_values = list(module.get_init_inputs(**defaults_case.init))
    try:
        outputs = len(as_outputs(result))
    except TypeError as e:
        raise ValueError(
            f"the reference's forward returns something else than tensors: {e}"
        ) from None

    input_names = _names(module.Model.forward, len(inputs), "x")
    state_keys = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    init_names = _names(module.Model.__init__, len(init_values), "init")
    names = _unique(input_names + state_keys + init_names)
    args_in = []
    for i, value in enumerate(inputs):
        annotation = _annotation(value)
        if annotation is None:
            raise ValueError(f"forward input {i} is a {type(value).__name__}: no schema type")
        args_in.append(OpArg(name=names[i], annotation=annotation))
    state = [
        OpArg(name=names[len(inputs) + i], annotation="torch.Tensor", source=key)
        for i, key in enumerate(state_keys)
    ]
    init = []
    for i, value in enumerate(init_values):
        annotation = _annotation(value)
        if annotation not in ("bool", "int", "float", "str") or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise ValueError(f"constructor argument {i} ({value!r}) has no schema default")
        init.append(
            OpArg(
                name=names[len(inputs) + len(state) + i],
                annotation=str(annotation),
                default=repr(value),
            )
        )
    return OpSignature(
        op=identifier(task.name),
        inputs=tuple(args_in),
        state=tuple(state),
        init=tuple(init),
        outputs=outputs,
    )


def _tuple(names: Sequence[str]) -> str:
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def render_op(sig: OpSignature, task: str) -> str:
    params = [f"{a.name}: {a.annotation}" for a in (*sig.inputs, *sig.state)]
    params += [f"{a.name}: {a.annotation} = {a.default}" for a in sig.init]
    # The op runs ModelNew on the device of its first tensor argument.
    first = next((a for a in (*sig.inputs, *sig.state) if a.annotation == "torch.Tensor"), None)
    device = (
        f"{first.name}.device" if first else 'torch.device("cuda", torch.cuda.current_device())'
    )
    returns = (
        "torch.Tensor"
        if sig.outputs == 1
        else f"tuple[{', '.join(['torch.Tensor'] * sig.outputs)}]"
    )
    shown = ", ".join(a.name for a in sig.inputs + sig.state)
    state_doc = (
        (
            ", then the module's tensors ("
            + ", ".join(f"{a.name} = Model.{a.source}" for a in sig.state)
            + ")"
        )
        if sig.state
        else ""
    )
    init_doc = (
        ", then the constructor's arguments (defaults: the first timed case)" if sig.init else ""
    )
    return render(
        "op.py.tmpl",
        {
            "OP": sig.op,
            "TASK": task,
            "PARAMS": "".join(f"\n    {p}," for p in params) + "\n",
            "RETURNS": returns,
            "DEVICE": device,
            "OUTPUTS": str(sig.outputs),
            "INPUTS": _tuple([a.name for a in sig.inputs]),
            "STATE": "{" + ", ".join(f'"{a.source}": {a.name}' for a in sig.state) + "}",
            "INIT": _tuple([a.name for a in sig.init]),
            "SIGNATURE": f"out = torch.ops.hipevolve.{sig.op}({shown})",
            "STATE_DOC": state_doc,
            "INIT_DOC": init_doc,
        },
    )


def init_example(sig: OpSignature | None) -> str:
    """The constructor arguments of the first timed case, as the example call shows them."""
    if sig is None:
        return "*reference.get_init_inputs()"
    return ", ".join(a.default or "" for a in sig.init)
