"""Modules behind the custom op: ModelNew on the GPU, the reference on the meta device.

A task's Model may hold parameters and buffers (a norm's weight); the op takes them as
arguments, so one op serves every instance and torch.compile sees them as inputs. Each call runs
a cached module, built once per (constructor arguments, device), through
torch.func.functional_call with the tensors it was given. ModelNew must then hold at least the
reference's parameter and buffer names: where it does not, the call fails and says which are
missing, never silently using weights of its own.

Imports torch and the standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

_CACHE: dict[tuple[str, tuple[Any, ...], str], torch.nn.Module] = {}

try:
    from torch._subclasses.fake_tensor import unset_fake_temporarily as _real_tensors
except ImportError:  # an older torch: no fake mode to step out of
    from contextlib import nullcontext as _real_tensors


def instance(
    kind: str, factory: Callable[..., torch.nn.Module], init: Sequence[Any], device: torch.device
) -> torch.nn.Module:
    """The cached `factory(*init)` on `device`; built with the CPU generator's state restored."""
    key = (kind, tuple(init), str(device))
    if key not in _CACHE:
        # Built outside any fake-tensor mode the first call may run under, so the cached module
        # holds no fake tensors bound to that mode.
        with _real_tensors(), torch.random.fork_rng(devices=[]):
            if device.type == "meta":
                with torch.device("meta"):
                    module = factory(*init)
            else:
                module = factory(*init)
                if isinstance(module, torch.nn.Module):
                    module = module.to(device)
        if isinstance(module, torch.nn.Module):
            module = module.eval()
        _CACHE[key] = module
    return _CACHE[key]


def state_names(module: torch.nn.Module) -> set[str]:
    names = {n for n, _ in module.named_parameters()}
    return names | {n for n, _ in module.named_buffers()}


def call(
    module: torch.nn.Module, args: Sequence[Any], state: dict[str, torch.Tensor], outputs: int
) -> Any:
    """module(*args) with its parameters and buffers replaced by `state`; fresh tensors out.

    `outputs` is the number of tensors the reference returns: 1 returns a tensor, more a tuple.
    """
    if state:
        missing = sorted(set(state) - state_names(module))
        if missing:
            raise RuntimeError(
                f"{type(module).__name__} holds no {', '.join(missing)}: it cannot take the "
                "reference's parameters, so the op cannot run it (use ModelNew directly)"
            )
        result = torch.func.functional_call(module, state, tuple(args), strict=False)
    else:
        result = module(*args)
    found = list(result) if isinstance(result, (list, tuple)) else [result]
    if len(found) != outputs:
        raise RuntimeError(f"the module returned {len(found)} outputs, the op declares {outputs}")
    # A custom op may not return its inputs or one tensor twice.
    seen: set[int] = set()
    inputs = {id(a) for a in args if isinstance(a, torch.Tensor)} | {id(t) for t in state.values()}
    for i, t in enumerate(found):
        if id(t) in inputs or id(t) in seen:
            found[i] = t.clone()
        seen.add(id(found[i]))
    return found[0] if outputs == 1 else tuple(found)
