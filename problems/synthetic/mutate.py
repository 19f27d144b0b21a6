"""The mutate mode: a task derived from an existing one with new sizes, a new timed dtype, and
maybe a swapped activation, softmax or reduction dim."""

from __future__ import annotations

import ast
import random

from hipevolve.core.taskspec import TaskSpec
from hipevolve.problems.synthetic.render import Candidate

ACTIVATIONS = {
    "gelu": "F.gelu",
    "silu": "F.silu",
    "relu": "torch.relu",
    "sigmoid": "torch.sigmoid",
    "tanh": "torch.tanh",
}
SOFTMAXES = {"softmax": "torch.softmax", "log_softmax": "torch.log_softmax"}
NOT_SHAPES = {"top_k"}  # integers that are not sizes: scaling them changes what the task means


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    if (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in ("F", "torch")
    ):
        return func.attr
    return None


def _set_call(node: ast.Call, dotted: str) -> None:
    owner, attr = dotted.split(".")
    node.func = ast.Attribute(value=ast.Name(id=owner, ctx=ast.Load()), attr=attr, ctx=ast.Load())


def mutate_source(text: str, rng: random.Random) -> tuple[str, list[str]]:
    """Swaps an activation, softmax for log-softmax, or a reduction's dim, where the source has
    one; returns the new text and what changed (the text is unchanged when nothing applies)."""
    tree = ast.parse(text)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    changes: list[str] = []
    acts = [c for c in calls if _call_name(c) in ACTIVATIONS]
    if acts and rng.random() < 0.7:
        call = rng.choice(acts)
        old = _call_name(call)
        new = rng.choice(sorted(set(ACTIVATIONS) - {old}))
        _set_call(call, ACTIVATIONS[new])
        call.args, call.keywords = call.args[:1], []  # approximate= belongs to gelu alone
        changes.append(f"{old} -> {new}")
    soft = [c for c in calls if _call_name(c) in SOFTMAXES]
    if soft and rng.random() < 0.5:
        call = rng.choice(soft)
        old = _call_name(call)
        new = "log_softmax" if old == "softmax" else "softmax"
        _set_call(call, SOFTMAXES[new])
        changes.append(f"{old} -> {new}")
    dims = [
        k
        for c in soft
        for k in c.keywords
        if k.arg == "dim" and isinstance(k.value, ast.UnaryOp) and ast.unparse(k.value) == "-1"
    ]
    if dims and rng.random() < 0.4:
        rng.choice(dims).value = ast.Constant(0)
        changes.append("reduction dim -1 -> 0")
    if not changes:
        return text, []
    return ast.unparse(tree) + "\n", changes


def mutate_candidate(rng: random.Random, source: TaskSpec, name: str, seed: int = 0) -> Candidate:
    """A task derived from `source`: new sizes (sizes equal in its small case scale together, so
    coupled dimensions stay coupled), a new dtype for its timed cases, maybe a new activation."""
    text, changes = mutate_source(source.reference.read_text(), rng)
    small = source.small_cases[0]
    sizes = {
        k: v
        for k, v in (small.init | small.inputs).items()
        if type(v) is int and k not in NOT_SHAPES
    }
    groups = sorted(set(sizes.values()))
    factor = {v: rng.choice((0.5, 1.0, 2.0)) for v in groups}
    if groups and all(f == 1.0 for f in factor.values()):
        factor[rng.choice(groups)] = rng.choice((0.5, 2.0))
    by_name = {k: factor[v] for k, v in sizes.items()}
    has_dtype = any("dtype" in (c.init | c.inputs) for c in source.cases)
    timed_dtype = rng.choice(("bfloat16", "float16", "float32")) if has_dtype else None
    cases = []
    for case in source.cases:

        def scaled(table: dict, small_case: bool = case.small) -> dict:
            out = {
                k: max(1, int(v * by_name[k])) if k in by_name and type(v) is int else v
                for k, v in table.items()
            }
            if timed_dtype and not small_case and "dtype" in out:
                out["dtype"] = timed_dtype
            return out

        init, inputs = scaled(dict(case.init)), scaled(dict(case.inputs))
        dtypes = [inputs.get("dtype", init.get("dtype"))] if has_dtype else list(case.dtypes)
        cases.append(
            {
                "name": case.name,
                "init": init,
                "inputs": inputs,
                "dtypes": [d for d in dtypes if d] or list(case.dtypes),
                "small": case.small,
                "timed": case.timed,
            }
        )
    resized = ", ".join(f"{k} x{by_name[k]:g}" for k in sorted(by_name) if by_name[k] != 1.0)
    what = "; ".join(
        changes
        + ([f"sizes {resized}"] if resized else [])
        + ([f"timed dtype {timed_dtype}"] if timed_dtype else [])
    )
    header = f"# Mutated from task {source.name} by `evolve tasks generate` (seed {seed}): {what}\n"
    return Candidate(
        name=f"{name}_{source.name}",
        mode="mutate",
        family=source.family,
        description=f"{source.description} [mutated: {what}]",
        source=header + text,
        cases=cases,
        tolerance=source.tolerance.model_dump(exclude_none=True),
        notes=f"mutated from {source.name}: {what}",
    )
