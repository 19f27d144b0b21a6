"""Tracing a task's reference Model into an aten-level torch.fx graph, one graph per case.

Each case is traced on the meta device (no memory, no compute: a 1 GB case costs nothing), first
with torch.fx's proxy-tensor tracer (make_fx, which records aten ops with their shapes and dtypes
in node.meta["val"]), then with torch.export where that fails. Parameters and buffers are passed
as explicit inputs (torch.func.functional_call), so every placeholder is named: a forward input
("input", its position) or a module tensor ("param", its dotted attribute path).

A case that sets module constants (a KernelBench file's reduced case) is traced with them set.
Recurrent modules (nn.LSTM, nn.GRU, nn.RNN) are refused before tracing: their tracing takes
a minute and no pattern lowers them. Whatever else goes wrong (the reference raises while it is
built or called on the meta device) comes back as TraceError, one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import fx

from hipevolve.core.reference import load_module, module_globals
from hipevolve.core.taskspec import Case, TaskSpec


class TraceError(Exception):
    """The reference cannot be traced (one line: why)."""


@dataclass(frozen=True)
class Placeholder:
    role: str  # "input" (a forward argument) or "param" (a parameter or buffer of the Model)
    key: str  # the input's position as text, or the attribute path ("weight", "norm.bias")
    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass
class TracedCase:
    case: Case
    graph: fx.Graph
    placeholders: dict[str, Placeholder]  # fx placeholder name -> what it is
    inputs: list[Placeholder]  # forward inputs, in order
    params: list[Placeholder]
    scalars: dict[str, float] = field(default_factory=dict)  # Model's float attributes (eps)
    returns_tuple: bool = False  # forward returns a tuple (or list) rather than one tensor


def trace_case(reference: Path, case: Case) -> TracedCase:
    """The aten graph of the reference's forward for one case's shapes and dtypes."""
    try:
        module = load_module(reference)
        with module_globals(module, dict(case.globals)), torch.device("meta"):
            torch.manual_seed(0)
            model = module.Model(*module.get_init_inputs(**case.init))
            args = list(module.get_inputs(**case.inputs))
    except Exception as e:  # noqa: BLE001 - the reference is the user's code
        raise TraceError(
            f"the reference cannot be built on the meta device ({_first_line(e)})"
        ) from None
    recurrent = [type(m).__name__ for m in model.modules() if isinstance(m, torch.nn.RNNBase)]
    if recurrent:
        raise TraceError(
            f"recurrent module nn.{recurrent[0]}: the offline translator lowers no recurrences"
        )
    for i, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise TraceError(f"forward input {i} is a {type(a).__name__}, not a tensor")
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}

    def forward(params, *inputs):
        return torch.func.functional_call(model, params, inputs)

    try:
        with torch.no_grad():
            result = model(*args)  # on meta: only to learn whether forward returns a tuple
    except Exception as e:  # noqa: BLE001
        raise TraceError(
            f"the reference's forward fails on the meta device ({_first_line(e)})"
        ) from None
    try:
        from torch.fx.experimental.proxy_tensor import make_fx

        graph = make_fx(forward)(tensors, *args).graph
    except Exception as first:  # noqa: BLE001 - any tracer failure means: try torch.export
        graph = _export_graph(model, tensors, args, first)
    nodes = [n for n in graph.nodes if n.op == "placeholder"]
    leaves = [("param", k, t) for k, t in tensors.items()]
    leaves += [("input", str(i), t) for i, t in enumerate(args)]
    if len(nodes) != len(leaves):
        raise TraceError(f"traced {len(nodes)} placeholders for {len(leaves)} tensors")
    placeholders = {
        n.name: Placeholder(role, key, tuple(t.shape), t.dtype)
        for n, (role, key, t) in zip(nodes, leaves, strict=True)
    }
    scalars = {
        k: float(v)
        for k, v in vars(model).items()
        if isinstance(v, float) and not k.startswith("_")
    }
    return TracedCase(
        case=case,
        graph=graph,
        placeholders=placeholders,
        inputs=[p for p in placeholders.values() if p.role == "input"],
        params=[p for p in placeholders.values() if p.role == "param"],
        scalars=scalars,
        returns_tuple=isinstance(result, (tuple, list)),
    )


def _export_graph(model, tensors, args, first: Exception) -> fx.Graph:
    """torch.export's graph, with its lifted parameters placed first as make_fx would."""
    try:
        exported = torch.export.export(model, tuple(args)).run_decompositions({})
    except Exception as second:  # noqa: BLE001
        raise TraceError(
            f"neither torch.fx ({_first_line(first)}) nor torch.export "
            f"({_first_line(second)}) could trace the reference"
        ) from None
    signature = exported.graph_signature
    wanted = [
        signature.inputs_to_parameters.get(n) or signature.inputs_to_buffers.get(n)
        for n in signature.user_inputs
    ]
    if any(wanted):
        raise TraceError("torch.export lifted parameters in an unexpected order")
    lifted = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    if list(lifted.values()) != list(tensors):
        raise TraceError("torch.export lifted parameters in an unexpected order")
    return exported.graph_module.graph


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160]}" if text else type(e).__name__


def trace_task(task: TaskSpec) -> list[TracedCase]:
    """One traced graph per case of the task; TraceError on the first that fails."""
    return [trace_case(task.reference, case) for case in task.cases]
