"""Loading a generated reference from its text and measuring a case on the meta device: the
compulsory bytes and FLOPs of its roofline, and the shape signature that dedupe compares."""

from __future__ import annotations

import itertools
from types import ModuleType

import torch

from hipevolve.core.reference import as_outputs, build_model

_counter = itertools.count()


def module_from_source(source: str, label: str = "synthetic") -> ModuleType:
    """Executes reference text as a fresh module (never cached: a rewritten file is re-read)."""
    module = ModuleType(f"hipevolve_synthetic_{label}_{next(_counter)}")
    exec(compile(source, f"<{label}>", "exec"), module.__dict__)
    return module


_REDUCTION_FLOPS = {
    "_softmax": 5,
    "_log_softmax": 5,
    "native_layer_norm": 8,
    "sum": 1,
    "mean": 1,
    "amax": 1,
    "max": 1,
    "logsumexp": 4,
    "topk": 1,
    "var_mean": 3,
    "cumsum": 1,
    "norm": 2,
}


class _Work(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts FLOPs of aten ops: matmuls and convolutions by PyTorch's formulas, one per output
    element for pointwise ops, a few per input element for reductions; views and copies none."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        from torch.utils.flop_counter import flop_registry

        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        first = out[0] if isinstance(out, (tuple, list)) else out
        if packet in flop_registry:
            self.flops += int(flop_registry[packet](*args, **kwargs, out_val=out))
        elif torch.Tag.pointwise in func.tags and isinstance(first, torch.Tensor):
            self.flops += first.numel() if first.is_floating_point() else 0
        elif packet.__name__ in _REDUCTION_FLOPS and isinstance(args[0], torch.Tensor):
            self.flops += _REDUCTION_FLOPS[packet.__name__] * args[0].numel()
        return out


def measure_case(module: ModuleType, init: dict, inputs: dict) -> tuple[int, int, str]:
    """(compulsory bytes, FLOPs, shape signature) of one case, on the meta device: each input,
    parameter, buffer and output counted once; nothing allocated, nothing computed."""
    with torch.device("meta"):
        model = build_model(module, init, "meta")
        args = list(module.get_inputs(**inputs))
        counter = _Work()
        with torch.no_grad(), counter:
            outputs = as_outputs(model(*args))
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    tensors += list(model.parameters()) + list(model.buffers()) + outputs
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    signature = ";".join(
        f"{tuple(a.shape)}:{a.dtype}" if isinstance(a, torch.Tensor) else repr(a) for a in args
    )
    signature += "|" + ",".join(f"{k}={v}" for k, v in sorted(init.items()))
    return nbytes, counter.flops, signature
