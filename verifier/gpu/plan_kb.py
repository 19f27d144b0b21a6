"""A KernelBench plan: what a KernelBench-format candidate's forward did, as data to replay.

A KernelBench candidate (one .py with `class ModelNew`, optional load_inline extensions the build
stage prebuilt) runs its Python only in a recorder process (record_kb.py). What its forward did
becomes one case plan per case; the executor (replay_kb.py) replays it for every checked and
every timed call with no candidate Python: aten ops through torch.ops.aten, extension functions
by name from the prebuilt modules. The plan is the whole of what the candidate's Python can ask
for, so it is also the boundary: a forged plan can ask for aten ops and extension calls, nothing
else.

The format (JSON, standard library and torch only: the sandbox loads no pydantic):

    {"version": 1, "kind": "kb", "cases": {CASE: {
        "inputs":  [{"dtype": D, "shape": [..], "stride": [..]} | null],
        "params":  [{"name": "conv.weight", "dtype": D, "shape": [..], "stride": [..]}],
        "steps":   [{"op": "aten", "fn": "addmm.default", "args": [VAL], "kwargs": {K: VAL}}
                    | {"op": "ext", "module": M, "fn": F, "args": [VAL], "kwargs": {K: VAL},
                       "results": [{"dtype": D, "shape": [..], "stride": [..], "device": T}],
                       "single": true | false}],
        "outputs": [TENSOR, ...]}}}

    TENSOR {"t": "in<i>" | "p<j>" | "v<k>", "i": N (optional: element N of a step's tuple)}
           the forward's i-th argument, the j-th parameter, the k-th step's result
    VAL    TENSOR | {"const": {"dtype": D, "shape": [..], "stride": [..], "data": [X, ...]}}
           | {"int": N} | {"float": X} | {"bool": B} | {"none": true} | {"str": S}
           | {"list": [VAL, ...]} | {"dtype": D} | {"device": "job" | "cpu"}
           | {"layout": "strided"} | {"memory_format": NAME}

- "params" are ModelNew's parameters and buffers; the executor fills them from the reference
  model's tensors of the same names, drawn by trusted code under the case's seed.
- An "ext" step's results are checked against "results" (dtype, shape, stride, device type)
  every time it runs: an extension that returns something else fails the candidate. No
  results: the function returned None (it wrote into tensors it was given).
- A device "job" is the executor's device (the recorder's is the same kind).

`validate` checks a plan: every aten op resolves to a torch.ops.aten overload and is not one of
DENIED; every extension module is one the build stage built; every tensor reference points to an
input, a parameter or an earlier step; sizes are bounded. The executor validates every plan it
runs; the recorder's refusals are for clear messages, the validation is the boundary.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hipevolve.verifier.gpu.plan import DTYPES, PlanError

VERSION = 1
KIND = "kb"
MAX_STEPS = 20_000
MAX_LIST = 4096  # elements of one list argument
MAX_DEPTH = 4  # nested lists
MAX_DIMS = 16
MAX_STR = 64
MAX_CONST = 4096  # elements of a constant of Python data (torch.tensor(...) in a forward)
# Ops with effects beyond their outputs: storage swaps and resizes of tensors the executor owns
# (inputs, parameters), stream bookkeeping of the caching allocator.
DENIED = frozenset(
    {
        "set_",
        "resize_",
        "resize_as_",
        "record_stream",
        "_resize_output_",
        "_local_scalar_dense",
        "_assert_async",
        "_print",
    }
)
LAYOUTS = ("strided",)
MEMORY_FORMATS = ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")
_FN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}\.[A-Za-z_][A-Za-z0-9_]{0,99}")
_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+){0,15}")
_REF = re.compile(r"(in|p|v)([0-9]{1,6})")


# aten ops that allocate, fill, view, copy or describe data: what the screen lets a forward call
# (verifier/screen/compute.py). Any other op computes on data, and under a kernels-only job
# (every KernelBench candidate the pipeline verifies) the candidate is hacked if its forward, or
# its extension's C++, has PyTorch compute it: the screen's rule, on what really ran.
MOVES_DATA = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "new_ones",
        "full",
        "full_like",
        "new_full",
        "fill_",
        "zero_",
        "scalar_tensor",
        "lift_fresh",
        "lift_fresh_copy",
        "view",
        "_unsafe_view",
        "reshape",
        "_reshape_alias",
        "view_as",
        "expand",
        "expand_as",
        "permute",
        "transpose",
        "transpose_",
        "t",
        "t_",
        "slice",
        "select",
        "narrow",
        "squeeze",
        "squeeze_",
        "unsqueeze",
        "unsqueeze_",
        "as_strided",
        "alias",
        "detach",
        "detach_",
        "split",
        "split_with_sizes",
        "unbind",
        "chunk",
        "flatten",
        "unflatten",
        "movedim",
        "contiguous",
        "clone",
        "copy_",
        "_to_copy",
        "to",
        "_copy_from",
        "_copy_from_and_resize",
        "set_requires_grad",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "size",
        "stride",
        "dim",
        "is_contiguous",
        "record_stream",
    }
)


class Hacked(RuntimeError):
    """Raised by the executor when what ran is a hack (PyTorch compute inside an extension);
    the sandbox reports its `rule` (verifier/gpu/refusal.py)."""

    rule = "executor"


def computes(plan: dict) -> list[str]:
    """The aten ops of a case plan's steps that compute on data (not in MOVES_DATA), once each."""
    found = [s["fn"].split(".")[0] for s in plan.get("steps", []) if s.get("op") == "aten"]
    return list(dict.fromkeys(n for n in found if n not in MOVES_DATA))


def is_kb_plan(plan: dict | None) -> bool:
    return isinstance(plan, dict) and plan.get("kind") == KIND


def to_json(cases: dict[str, dict]) -> str:
    return json.dumps({"version": VERSION, "kind": KIND, "cases": cases})


def aten_op(fn: str) -> Any:  # noqa: ANN401 (a torch OpOverload)
    """torch.ops.aten's overload named "name.overload", or PlanError."""
    import torch

    if not _FN.fullmatch(fn):
        raise PlanError(f"aten op name {fn[:60]!r} is malformed")
    name, overload = fn.split(".")
    if name in DENIED:
        raise PlanError(f"aten.{name} is not allowed in a plan (it acts beyond its outputs)")
    packet = getattr(torch.ops.aten, name, None) if not name.startswith("__") else None
    if packet is None or overload not in packet.overloads():
        raise PlanError(f"no aten op {fn!r}")
    return getattr(packet, overload)


def validate(plan: dict, extensions: set[str]) -> None:
    """Raises PlanError unless `plan` (one case) is well formed: see the module docstring.
    extensions: the names of the prebuilt extension modules."""
    if not isinstance(plan, dict):
        raise PlanError("malformed KernelBench plan: a case is not an object")
    try:
        inputs, params = list(plan["inputs"]), list(plan["params"])
        steps, outputs = list(plan["steps"]), list(plan["outputs"])
    except (KeyError, TypeError) as e:
        raise PlanError(f"malformed KernelBench plan: {type(e).__name__}: {e}"[:200]) from None
    if len(steps) > MAX_STEPS:
        raise PlanError(f"plan too large: at most {MAX_STEPS} steps")
    for i, spec in enumerate(inputs):
        if spec is not None:
            _check_spec(spec, f"input {i}")
    for j, p in enumerate(params):
        _check_spec(p, f"parameter {j}")
        if not isinstance(p.get("name"), str) or not _PARAM.fullmatch(p["name"]):
            raise PlanError(f"parameter {j}: name {str(p.get('name'))[:60]!r} is not allowed")
    known = {"in": {i for i, s in enumerate(inputs) if s is not None}, "p": set(range(len(params)))}
    for k, step in enumerate(steps):
        known["v"] = set(range(k))
        where = f"step {k}"
        if not isinstance(step, dict):
            raise PlanError(f"{where}: not an object")
        if step.get("op") == "aten":
            aten_op(str(step.get("fn", "")))
        elif step.get("op") == "ext":
            module, fn = str(step.get("module", "")), str(step.get("fn", ""))
            if module not in extensions:
                raise PlanError(f"{where}: no prebuilt extension named {module[:60]!r}")
            if not _NAME.fullmatch(fn) or fn.startswith("_"):
                raise PlanError(f"{where}: extension function {fn[:60]!r} is not allowed")
            results = step.get("results")
            if not isinstance(results, list) or len(results) > 64:
                raise PlanError(f"{where}: an extension call returns at most 64 tensors")
            for r in results:
                _check_spec(r, f"{where} result")
                if r.get("device") not in ("job", "cpu"):
                    raise PlanError(f"{where}: result device {str(r.get('device'))[:20]!r}")
            if step.get("single") not in (True, False) or (step["single"] and len(results) != 1):
                raise PlanError(f"{where}: 'single' must say whether one tensor is returned")
        else:
            raise PlanError(f"{where}: unknown op {str(step.get('op'))[:20]!r}")
        args, kwargs = step.get("args"), step.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise PlanError(f"{where}: args must be a list and kwargs an object")
        for a in args:
            _check_value(a, known, where, 0)
        for name, a in kwargs.items():
            if not _NAME.fullmatch(str(name)):
                raise PlanError(f"{where}: keyword {str(name)[:40]!r} is not allowed")
            _check_value(a, known, where, 0)
    known["v"] = set(range(len(steps)))
    if not outputs:
        raise PlanError("the plan has no outputs")
    for k, ref in enumerate(outputs):
        _check_tensor(ref, known, f"output {k}")


def _check_spec(spec: Any, where: str) -> None:  # noqa: ANN401
    if not isinstance(spec, dict) or spec.get("dtype") not in DTYPES:
        raise PlanError(
            f"{where}: dtype {str(getattr(spec, 'get', dict().get)('dtype'))[:30]!r} is not allowed"
        )
    shape, stride = spec.get("shape"), spec.get("stride")
    if (
        not isinstance(shape, list)
        or not isinstance(stride, list)
        or len(shape) != len(stride)
        or len(shape) > MAX_DIMS
        or not all(type(n) is int and 0 <= n < 1 << 40 for n in shape)
        or not all(type(s) is int and abs(s) < 1 << 40 for s in stride)
    ):
        raise PlanError(f"{where}: a malformed shape or strides")


def _check_const(c: Any, where: str) -> None:  # noqa: ANN401
    _check_spec(c, f"{where} constant")
    n = 1
    for d in c["shape"]:
        n *= d
    data = c.get("data")
    if (
        not isinstance(data, list)
        or len(data) != n
        or n > MAX_CONST
        or not all(type(x) in (int, float, bool) for x in data)
    ):
        raise PlanError(f"{where}: a constant's data does not match its shape")


def _check_tensor(v: Any, known: dict[str, set[int]], where: str) -> None:  # noqa: ANN401
    m = _REF.fullmatch(str(v.get("t", ""))) if isinstance(v, dict) else None
    if m is None or int(m.group(2)) not in known[m.group(1)]:
        raise PlanError(f"{where}: a tensor that is not an input, a parameter or an earlier result")
    if "i" in v and (type(v["i"]) is not int or not 0 <= v["i"] < MAX_LIST):
        raise PlanError(f"{where}: a malformed tuple index")
    if set(v) - {"t", "i"}:
        raise PlanError(f"{where}: a malformed tensor reference")


def _check_value(v: Any, known: dict[str, set[int]], where: str, depth: int) -> None:  # noqa: ANN401, C901
    if not isinstance(v, dict) or len(v) not in (1, 2):
        raise PlanError(f"{where}: a malformed argument")
    if "t" in v:
        _check_tensor(v, known, where)
        return
    if "const" in v:
        _check_const(v["const"], where)
        return
    if len(v) != 1:
        raise PlanError(f"{where}: a malformed argument")
    ((kind, x),) = v.items()
    ok = {
        "int": lambda: type(x) is int,
        "float": lambda: type(x) is float,
        "bool": lambda: type(x) is bool,
        "none": lambda: x is True,
        "str": lambda: isinstance(x, str) and len(x) <= MAX_STR,
        "dtype": lambda: x in DTYPES,
        "device": lambda: x in ("job", "cpu"),
        "layout": lambda: x in LAYOUTS,
        "memory_format": lambda: x in MEMORY_FORMATS,
        "list": lambda: isinstance(x, list) and len(x) <= MAX_LIST and depth < MAX_DEPTH,
    }.get(kind)
    if ok is None or not ok():
        raise PlanError(f"{where}: argument {str(v)[:60]} is not allowed")
    if kind == "list":
        for item in x:
            _check_value(item, known, where, depth + 1)
