"""Running a KernelBench-format reference: import it, build its module and inputs, call it.

Imports torch and the standard library only: the GPU worker uses this module as it is.
KernelBench conventions: `Model(*get_init_inputs(**init))`, `model(*get_inputs(**inputs))`;
inputs are built on the CPU under a seeded generator and then moved to the device.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def load_module(path: str | Path) -> ModuleType:
    """Imports a Python file under a private, path-derived module name."""
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    name = f"hipevolve_ref_{path.stem.replace('-', '_')}_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise ImportError(f"{path.name} has no {', '.join(missing)}")
    return module


def load_candidate(path: str | Path, what: str) -> ModuleType:
    """Imports a candidate's Python file as `hipevolve_candidate` (a recorder imports one, once);
    `what` names the file in the errors (it must define ModelNew)."""
    spec = importlib.util.spec_from_file_location("hipevolve_candidate", str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["hipevolve_candidate"] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "ModelNew"):
        raise AttributeError(f"{what} defines no ModelNew")
    return module


def to_device(value: Any, device: torch.device | str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    return value


def build_model(
    module: ModuleType, init: dict[str, Any], device: torch.device | str, seed: int = 0
) -> torch.nn.Module:
    """Model(*get_init_inputs(**init)) with parameters drawn under `seed`, on `device`."""
    torch.manual_seed(seed)
    init_args = list(module.get_init_inputs(**init))
    model = module.Model(*init_args)
    return model.to(device).eval()


# A case's inputs key that get_inputs never sees: every floating-point element of the inputs
# drawn is scaled by a factor of its own, log-uniform in [1/SPREAD, SPREAD] (the judge's wide
# case of a pointwise reference: verifier/gpu/judge/wide_case.py).
SPREAD = "hipevolve_spread"


def spread_out(values: list[Any], spread: float, seed: int) -> list[Any]:
    """`values` with each floating-point tensor element scaled by spread**u, u uniform in
    [-1, 1] and drawn on the CPU under `seed` (the same factors wherever the inputs are)."""
    draws = torch.Generator().manual_seed(seed)
    out = []
    for value in values:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            exponent = torch.empty(value.shape).uniform_(-1.0, 1.0, generator=draws)
            factor = torch.pow(float(spread), exponent).to(value.device)
            value = (value.float() * factor).to(value.dtype)
        out.append(value)
    return out


def build_inputs(
    module: ModuleType,
    inputs: dict[str, Any],
    device: torch.device | str,
    seed: int,
    draw_on_device: bool = False,
) -> list[Any]:
    """get_inputs(**inputs) under `seed` (spread out when `inputs` holds SPREAD).

    By default drawn on the CPU (the same values on any machine), then moved. With
    `draw_on_device`, factory functions default to `device` and its generator draws: much faster
    for large inputs (timing sets), and still deterministic for a seed on one kind of device.
    """
    spread = inputs.get(SPREAD)
    inputs = {k: v for k, v in inputs.items() if k != SPREAD}
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        if draw_on_device:
            with torch.device(device):
                values = list(module.get_inputs(**inputs))
        else:
            values = list(module.get_inputs(**inputs))
    finally:
        torch.random.set_rng_state(generator_state)
    values = [to_device(v, device) for v in values]
    return spread_out(values, spread, seed) if spread else values


def as_outputs(result: Any) -> list[torch.Tensor]:
    """A forward's result as a flat list of tensors (a tensor, or a tuple/list of them)."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)) and all(isinstance(r, torch.Tensor) for r in result):
        return list(result)
    raise TypeError(f"forward returned {type(result).__name__}, expected tensors")


@contextlib.contextmanager
def module_globals(module: ModuleType, literals: dict[str, str]) -> Iterator[ModuleType]:
    """The module with some constants set (Python literals: a KernelBench file's sizes), and
    every later top-level `name = expression` that reads a changed name evaluated again (so
    `bias_shape = (out_channels, 1, 1)` follows `out_channels`); all restored after."""
    if not literals:
        yield module
        return
    namespace = vars(module)
    changed = {name: ast.literal_eval(text) for name, text in literals.items()}
    tree = ast.parse(Path(module.__file__).read_text())
    for node in tree.body:
        if (
            not (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            )
            or node.targets[0].id in literals
        ):
            continue
        reads = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
        if reads & set(changed):
            scope = {**namespace, **changed}
            changed[node.targets[0].id] = eval(  # noqa: S307 - the task's own module text
                compile(ast.Expression(node.value), module.__file__, "eval"), scope
            )
    saved = {name: namespace[name] for name in changed if name in namespace}
    namespace.update(changed)
    try:
        yield module
    finally:
        for name in changed:
            namespace.pop(name, None)
        namespace.update(saved)


def run_case(
    path: str | Path,
    init: dict[str, Any],
    inputs: dict[str, Any],
    device: torch.device | str = "cpu",
    seed: int = 0,
    globals_: dict[str, str] | None = None,
) -> list[torch.Tensor]:
    """The reference's outputs for one case and seed (`globals_`: module constants to set, as
    Python literals)."""
    with module_globals(load_module(path), globals_ or {}) as module:
        model = build_model(module, init, device, seed)
        args = build_inputs(module, inputs, device, seed)
        with torch.no_grad():
            return as_outputs(model(*args))
