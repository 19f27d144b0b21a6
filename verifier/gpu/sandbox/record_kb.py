"""Recording a KernelBench-format candidate's plan (plan_kb.py): its Python runs here, only here.

The recorder is the only process that imports a KernelBench candidate's .py file. Forked by the
judge's zygote like a native candidate's recorder (record.py), on the job's device, it:
- answers load_inline from the build stage's prebuilt extensions (prebuilt.py), each module
  wrapped so that a call of one of its functions is recorded as ONE "ext" step;
- builds ModelNew under a seed drawn from os.urandom and runs its forward ONCE per case, on
  stand-in inputs drawn by the task's own get_inputs under another such seed (never the judged
  inputs: no seed of the job exists in this process), on the real device (an extension's C++
  reads data_ptr: it cannot run on FakeTensors);
- under a TorchDispatchMode records every aten op the forward's Python calls (arguments:
  tensors as references to inputs, parameters and earlier results, small constants of Python
  data (torch.tensor(...) in forward), plus numbers, bools, None,
  strings, lists, dtypes, devices, layouts and memory formats), with recording suspended inside
  an extension call (its own at:: ops reach the mode too and are part of the "ext" step);
- turns ModelNew's parameters and buffers that the forward uses into references the executor
  fills from the reference model's same-named tensors, and the forward's returned tensors into
  the outputs.
Refused, with a one-line reason (`Refused`): ops outside aten, ops that return a Python value
(.item(), bool(t), torch.equal: a plan cannot replay a decision on data), data-dependent shapes
(nonzero, masked_select, unique), tensors that are neither an input, a parameter, nor computed
in the forward, arguments of other types, outputs that are not plain tensors.

What this does not protect against, and need not: the recorder runs candidate Python and may be
subverted (a forward that pops the mode, a forged message). Its product is only a plan that the
executor validates (plan_kb.validate) and replays with no candidate Python; a forward that
behaves one way here and another way later has no later: it never runs again. The extension's
C++ runs here and, when replayed, in the executor (replay_kb.py).

Imports torch, the standard library and hipevolve.core.reference /
hipevolve.verifier.gpu.{plan,plan_kb,sandbox.prebuilt} only.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hipevolve.verifier.gpu.plan_kb import DENIED, MAX_CONST, MAX_STEPS, to_json

_DATA_DEPENDENT = frozenset(
    {
        "nonzero",
        "nonzero_static",
        "masked_select",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "_local_scalar_dense",
    }
)
MAX_PLAN_BYTES = 3 << 20
_TENSOR_RETURNS = ("Tensor", "Tensor[]", "Optional[Tensor]", "Tensor?")


class Refused(Exception):
    """What the forward did that a KernelBench plan cannot hold, in one line, with the fix.
    hacked: what it did can only be a hack (an output that is not a plain tensor)."""

    def __init__(self, message: str, hacked: bool = False) -> None:
        super().__init__(message)
        self.hacked = hacked
        self.rule = "kb_plan_hack" if hacked else "kb_plan"  # verifier/gpu/refusal.py


def spec_of(t: torch.Tensor) -> dict:
    return {
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": [int(n) for n in t.shape],
        "stride": [int(s) for s in t.stride()],
    }


class KbRecording:
    """The steps of one case's forward as it is recorded, and what every tensor it saw is."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        self.known: dict[int, tuple[torch.Tensor, dict]] = {}  # id -> (kept alive, reference)
        self.steps: list[dict] = []
        self.suspended = 0  # inside an extension call: its own aten ops are not steps

    def track(self, t: torch.Tensor, ref: dict) -> None:
        self.known[id(t)] = (t, ref)

    def ref(self, t: torch.Tensor, what: str) -> dict:
        entry = self.known.get(id(t))
        if entry is None or entry[0] is not t:
            raise Refused(
                f"{what} is a tensor that is neither an input, a parameter or buffer of ModelNew, "
                "nor computed in forward (a tensor kept as a plain attribute, torch.tensor(...) "
                "of Python data): register it with register_buffer, named as the task's Model "
                "names it, or compute it in forward"
            )
        return entry[1]

    def encode(self, v: Any, what: str) -> dict:  # noqa: ANN401, C901, PLR0911
        if isinstance(v, torch.Tensor):
            return self.ref(v, what)
        if isinstance(v, bool):
            return {"bool": v}
        if isinstance(v, int):
            return {"int": int(v)}
        if isinstance(v, float):
            return {"float": float(v)}
        if v is None:
            return {"none": True}
        if isinstance(v, str) and len(v) <= 64:
            return {"str": v}
        if isinstance(v, (list, tuple)):
            return {"list": [self.encode(x, what) for x in v]}
        if isinstance(v, torch.dtype):
            return {"dtype": str(v).removeprefix("torch.")}
        if isinstance(v, torch.device):
            if v.type not in (self.device_type, "cpu"):
                raise Refused(f"{what} names device {v}: a plan runs on the job's device or cpu")
            return {"device": "job" if v.type == self.device_type else "cpu"}
        if v is torch.strided:
            return {"layout": "strided"}
        if isinstance(v, torch.memory_format):
            return {"memory_format": str(v).removeprefix("torch.")}
        raise Refused(
            f"{what} is a {type(v).__name__}: a plan holds tensors, numbers, bools, None, "
            "strings, lists, dtypes, devices, layouts and memory formats"
        )

    def constant(self, t: torch.Tensor) -> torch.Tensor:
        """A tensor of Python data (torch.tensor(...) in forward), held by the plan as its data."""
        if t.device.type != "cpu" or t.numel() > MAX_CONST or t.is_complex():
            raise Refused(
                f"torch.tensor(...) of {t.numel()} elements in forward: a plan holds at most "
                f"{MAX_CONST} real numbers of Python data; register it as a buffer instead"
            )
        self.track(t, {"const": spec_of(t) | {"data": t.reshape(-1).tolist()}})
        return t

    def register(self, result: Any, what: str) -> None:  # noqa: ANN401
        k = len(self.steps) - 1
        if isinstance(result, torch.Tensor):
            self.track(result, {"t": f"v{k}"})
        elif isinstance(result, (list, tuple)):
            for i, t in enumerate(result):
                if isinstance(t, torch.Tensor):
                    self.track(t, {"t": f"v{k}", "i": i})
        if len(self.steps) > MAX_STEPS:
            raise Refused(f"the forward made more than {MAX_STEPS} steps ({what})")

    def aten(self, func: Any, args: tuple, kwargs: dict) -> Any:  # noqa: ANN401
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        if getattr(func, "namespace", "") != "aten":
            raise Refused(
                f"the forward calls {getattr(func, 'namespace', '?')}::{name}: a plan replays "
                "aten ops and the functions of load_inline extensions only"
            )
        if name == "_local_scalar_dense" or not all(
            str(r.type) in _TENSOR_RETURNS for r in func._schema.returns
        ):
            raise Refused(
                f"the forward reads a tensor's value on the host (aten.{name}: .item(), int(t), "
                "bool(t), .tolist(), torch.equal): a plan cannot replay a decision on data; "
                "compute it with tensor ops"
            )
        if name in _DATA_DEPENDENT:
            raise Refused(
                f"aten.{name} has a data-dependent shape: a plan cannot replay it; use a form "
                "with a fixed shape (torch.where, a mask multiplied in)"
            )
        if name in DENIED:
            raise Refused(f"aten.{name} acts beyond its outputs: a plan cannot hold it")
        what = f"an argument of aten.{name}"
        if name in ("lift_fresh", "lift_fresh_copy") and id(args[0]) not in self.known:
            args = (self.constant(args[0]), *args[1:])  # torch.tensor(Python data) in forward
        step = {
            "op": "aten",
            "fn": f"{name}.{func._overloadname}",
            "args": [self.encode(a, what) for a in args],
            "kwargs": {k: self.encode(v, what) for k, v in kwargs.items()},
        }
        result = func(*args, **kwargs)
        self.steps.append(step)
        self.register(result, f"aten.{name}")
        return result

    def ext(self, module: str, fn: str, real: Any, args: tuple, kwargs: dict) -> Any:  # noqa: ANN401
        what = f"an argument of {module}.{fn}"
        step = {
            "op": "ext",
            "module": module,
            "fn": fn,
            "args": [self.encode(a, what) for a in args],
            "kwargs": {k: self.encode(v, what) for k, v in kwargs.items()},
        }
        self.suspended += 1
        try:
            result = real(*args, **kwargs)
        finally:
            self.suspended -= 1
        single = isinstance(result, torch.Tensor)
        outs = [result] if single else [] if result is None else result  # None: wrote in place
        if not isinstance(outs, (list, tuple)) or not all(type(t) is torch.Tensor for t in outs):
            raise Refused(
                f"{module}.{fn} returned {type(result).__name__}: a plan replays extension "
                "functions that return a tensor, a tuple of tensors or nothing"
            )
        step["results"] = [self.result_spec(t) for t in outs]
        step["single"] = single
        self.steps.append(step)
        self.register(result, f"{module}.{fn}")
        return result

    def result_spec(self, t: torch.Tensor) -> dict:
        device = "job" if t.device.type == self.device_type else "cpu"
        return spec_of(t) | {"device": device}


class _Trace(TorchDispatchMode):
    """Every aten op the forward's Python calls, recorded (KbRecording.aten)."""

    def __init__(self, rec: KbRecording) -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if self.rec.suspended:
            return func(*args, **kwargs)
        return self.rec.aten(func, args, kwargs)


class RecordingExtension:
    """A prebuilt extension module whose functions record one "ext" step when called during a
    recorded forward (and simply run outside one: ModelNew's __init__)."""

    def __init__(self, name: str, module: Any, holder: dict) -> None:  # noqa: ANN401
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_holder", holder)

    def __getattr__(self, fn: str) -> Any:  # noqa: ANN401
        real = getattr(self._module, fn)
        if not callable(real) or fn.startswith("_"):
            return real
        name, holder = self._name, self._holder

        def call(*args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
            rec = holder.get("rec")
            if rec is None or rec.suspended:
                return real(*args, **kwargs)
            return rec.ext(name, fn, real, args, kwargs)

        return call

    def __setattr__(self, name: str, value: Any) -> None:  # noqa: ANN401
        raise Refused(f"the file rebinds {self._name}.{name}: extension functions are fixed")


def use_recording_extensions(folder: str | None, holder: dict) -> None:
    """load_inline (and load) return recording wrappers of the prebuilt modules from now on."""
    import torch.utils.cpp_extension as cpp

    from hipevolve.verifier.gpu.sandbox.prebuilt import load_extension

    def prebuilt(name: str, *args: Any, **kwargs: Any) -> RecordingExtension:  # noqa: ANN401
        if folder is None:
            raise ImportError("load_inline: the build stage built no extensions for this file")
        return RecordingExtension(name, load_extension(folder, name), holder)

    cpp.load_inline = prebuilt
    cpp.load = prebuilt


def record_case(model: Any, case: dict, inputs: list, device: str, holder: dict) -> dict:  # noqa: ANN401
    """One case's plan: the forward run once on `inputs` (stand-ins of the case's shapes)."""
    rec = KbRecording(torch.device(device).type)
    specs: list[dict | None] = []
    for i, (v, want) in enumerate(zip(inputs, case["inputs"], strict=True)):
        if isinstance(v, torch.Tensor):
            if spec_of(v) != {k: want[k] for k in ("dtype", "shape", "stride")}:
                raise Refused(f"input {i}: the task's get_inputs drew {spec_of(v)}, not {want}")
            rec.track(v, {"t": f"in{i}"})
            specs.append(spec_of(v))
        else:
            specs.append(None)
    params: list[dict] = []
    if isinstance(model, torch.nn.Module):
        for name, t in [*model.named_parameters(), *model.named_buffers()]:
            rec.track(t, {"t": f"p{len(params)}"})
            params.append({"name": name, **spec_of(t)})
    holder["rec"] = rec
    try:
        with _Trace(rec), torch.no_grad():
            result = model(*inputs)
    finally:
        holder["rec"] = None
    outs = [result] if isinstance(result, torch.Tensor) else result
    if not isinstance(outs, (list, tuple)) or not outs:
        raise Refused(f"forward returned {type(result).__name__}, expected tensors")
    refs = []
    for k, o in enumerate(outs):
        if type(o) is not torch.Tensor:
            raise Refused(f"output {k} is a {type(o).__qualname__}, not a plain torch.Tensor", True)
        refs.append(rec.ref(o, f"output {k}"))
    return used_params_only(
        {"inputs": specs, "params": params, "steps": rec.steps, "outputs": refs}
    )


def used_params_only(plan: dict) -> dict:
    """The plan with only the parameters its steps and outputs use (renumbered): one the
    forward never touches needs no same-named tensor in the task's Model."""
    used: list[str] = []

    def visit(v: Any) -> None:  # noqa: ANN401
        if isinstance(v, dict):
            if str(v.get("t", "")).startswith("p") and v["t"] not in used:
                used.append(v["t"])
            for x in v.values():
                visit(x)
        elif isinstance(v, list):
            for x in v:
                visit(x)

    visit([plan["steps"], plan["outputs"]])
    order = sorted(used, key=lambda r: int(r[1:]))
    new = {old: f"p{j}" for j, old in enumerate(order)}

    def rename(v: Any) -> Any:  # noqa: ANN401
        if isinstance(v, dict):
            return {k: new[x] if k == "t" and x in new else rename(x) for k, x in v.items()}
        if isinstance(v, list):
            return [rename(x) for x in v]
        return v

    return plan | {
        "params": [plan["params"][int(r[1:])] for r in order],
        "steps": rename(plan["steps"]),
        "outputs": rename(plan["outputs"]),
    }


def record_job(data: dict, send: Any) -> None:  # noqa: ANN401
    """The recorder's whole life: imports the KernelBench file with load_inline answered by the
    prebuilt extensions, records every case and sends one "plan" message (or "refused" with the
    reason). data: {"reference", "candidate", "device", "cases": {name: {"init", "inputs"
    (stand-in specs), "draw" (the case's get_inputs arguments)}}}."""

    from hipevolve.core import reference

    cand, device = data["candidate"], data["device"]
    holder: dict = {"rec": None}
    use_recording_extensions(cand.get("library"), holder)
    ref_module = reference.load_module(data["reference"])
    module = reference.load_candidate(cand["model"], "the file")
    cases = {}
    for name, case in data["cases"].items():
        # Seeds of this process's own, from os.urandom: never a seed of the job.
        inputs = reference.build_inputs(
            ref_module, case["draw"], device, secrets.randbits(62), draw_on_device=True
        )
        torch.manual_seed(secrets.randbits(62))
        init = list(ref_module.get_init_inputs(**case["init"]))
        try:
            model = module.ModelNew(*init)
            if isinstance(model, torch.nn.Module):
                model = model.to(device).eval()
            cases[name] = record_case(model, case, inputs, device, holder)
        except Refused as e:
            send("refused", message=f"case {name}: {e}"[:300], hacked=e.hacked)
            return
    text = to_json(cases)
    if len(text) > MAX_PLAN_BYTES:  # the wire's header limit (wire.MAX_HEADER) is 4 MiB
        send(
            "refused",
            message=f"the plan is {len(text) >> 10} KiB of JSON, over "
            f"{MAX_PLAN_BYTES >> 10} KiB: the forward makes too many ops or holds too much "
            "Python data",
            hacked=False,
        )
        return
    send("plan", plan=json.loads(text))
