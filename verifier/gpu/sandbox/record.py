"""Recording a native candidate's launch plan (plan.py): model.py runs against stand-ins.

The recorder is the only process that imports a native candidate's model.py. It runs each case's
forward once against stand-in inputs (FakeTensorMode: shape, dtype, strides and device "cuda",
no data, no GPU needed) with `hipevolve.runtime.kernels` replaced by a recording object, and
turns what the forward did into a `CasePlan`:
- allocations (empty, zeros, ones, full and their _like/new_ forms) become buffers; views of
  inputs and allocations (view, reshape into a view, slicing, transpose, as_strided, ...) become
  references into them (buffer, byte offset, dtype, shape, strides); zero_ and fill_ become fill
  steps;
- each `kernels.NAME(...)` call becomes a call step: tensors by reference, numbers as numbers,
  the stream as the executor's own;
- a launcher whose tensors all live in host memory (a workspace-size query) really runs here,
  on host memory of the recorder's own, so that `int(size)` afterwards reads what it wrote;
  the call is kept in the plan too, and the number it gave is baked into the plan.
ModelNew's __init__ runs on stand-ins too (FakeTensorMode, no allowlist: it may draw weights);
its parameters and buffers become device buffers that the executor fills from the reference
model's tensors of the same names, drawn by trusted code under the case's seed.
Anything else the forward computes with torch is refused (`Refused`), with the operator's name:
PyTorch compute outside the kernels, reading a device value on the host, in-place metadata
changes, tensors that are neither an input, an allocation nor a view of one, `kernels.NAME`
rebound to something else. The stand-ins hold no data and no seed exists in this process, so
nothing here can depend on the inputs the candidate is judged with.

What this does not protect against, and need not: the recorder runs candidate Python and may be
subverted (a forward that pops the modes, a forged message). Its product is only a plan, and
the executor validates every plan it runs (plan.validate): a forged plan asks for nothing an
honest forward could not have asked for.

Imports torch, the standard library and hipevolve.runtime / hipevolve.verifier.gpu.plan only.
"""

from __future__ import annotations

import ctypes
import json
import numbers
from dataclasses import replace
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from hipevolve.runtime import Launcher, launcher_signatures
from hipevolve.verifier.gpu.plan import ALIGN, Buffer, CasePlan, Ref, Step

aten = torch.ops.aten


class Refused(Exception):
    """What model.py did that a launch plan cannot hold, in one line; the `rule` it breaks
    (verifier/gpu/refusal.py), raised in a case or while model.py is imported."""

    rule = "launch_plan"


# name -> index of the fill value among the arguments (None: zeros; -1: ones)
_FILLED = {
    "zeros": None,
    "zeros_like": None,
    "new_zeros": None,
    "ones": -1,
    "ones_like": -1,
    "new_ones": -1,
    "full": 1,
    "full_like": 1,
    "new_full": 2,
}
_EMPTY = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}
_FILL_INPLACE = {"zero_": None, "fill_": 1}
_METADATA = {
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "is_contiguous",
    "is_strides_like_format",
    "is_non_overlapping_and_dense",
    "size",
    "stride",
    "numel",
    "dim",
    "storage_offset",
}


def _name(func: Any) -> str:
    return func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)


def _is_view(func: Any) -> bool:
    """Every result an alias of the first argument and nothing written: a view."""
    schema = getattr(func, "_schema", None)
    if schema is None or not schema.returns or not schema.arguments:
        return False
    if any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments):
        return False
    return all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


class Recording:
    """The buffers, steps and tensors of one case's forward as it is recorded."""

    def __init__(self, library: ctypes.CDLL | None, signatures: dict) -> None:
        self.library = library
        self.signatures = signatures
        self.tensors: dict[int, tuple[torch.Tensor, str]] = {}  # id -> (tensor kept alive, buf)
        self.buffers: list[Buffer] = []
        self.dtypes: list[str] = []  # the dtype each allocation was made with
        self.steps: list[Step] = []
        self.shadows: dict[str, torch.Tensor] = {}  # host buffers: real bytes for host calls
        self.device_written: set[str] = set()  # host buffers a device call was given
        self.inputs: list[dict | None] = []

    # --- tensors ------------------------------------------------------------------------------
    def track(self, t: torch.Tensor, buf: str) -> None:
        self.tensors[id(t)] = (t, buf)

    def buffer_of(self, t: Any) -> str | None:
        entry = self.tensors.get(id(t))
        return entry[1] if entry is not None and entry[0] is t else None

    def ref(self, t: Any, what: str) -> Ref:
        buf = self.buffer_of(t)
        if buf is None:
            raise Refused(
                f"{what} is a tensor that is not an input, an allocation or a view of one "
                "(a launch plan holds only those)"
            )
        return Ref(
            buf=buf,
            offset=t.storage_offset() * t.element_size(),
            dtype=str(t.dtype).removeprefix("torch."),
            shape=tuple(int(n) for n in t.shape),
            stride=tuple(int(s) for s in t.stride()),
        )

    def device_of(self, buf: str) -> str:
        return "cuda" if buf.startswith("in") else self.buffers[int(buf[1:])].device

    def address(self, t: torch.Tensor) -> int:
        """A stand-in's data_ptr: 256-byte aligned, as the executor's buffers are, no more."""
        buf = self.buffer_of(t)
        if buf is None:
            raise Refused("data_ptr of a tensor that is not an input or an allocation")
        index = int(buf[2:]) if buf.startswith("in") else 4096 + int(buf[1:])
        return ((index + 1) << 36) + ALIGN + t.storage_offset() * t.element_size()

    def allocate(self, t: torch.Tensor, fill: float | int | None) -> None:
        nbytes = 0
        if t.numel():
            span = sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=False))
            nbytes = (span + 1) * t.element_size()
        dtype = str(t.dtype).removeprefix("torch.")
        self.buffers.append(Buffer(device=t.device.type, nbytes=nbytes, fill=fill, dtype=dtype))
        self.dtypes.append(dtype)
        self.track(t, f"a{len(self.buffers) - 1}")

    # --- host memory for host calls -----------------------------------------------------------
    def shadow(self, buf: str) -> torch.Tensor:
        if buf not in self.shadows:
            j = int(buf[1:])
            b = self.buffers[j]
            with _disable_current_modes():
                raw = torch.zeros(b.nbytes, dtype=torch.uint8)
                if b.fill is not None and b.nbytes:
                    raw.view(getattr(torch, self.dtypes[j])).fill_(b.fill)
            self.shadows[buf] = raw
        return self.shadows[buf]

    def host_view(self, t: torch.Tensor) -> torch.Tensor:
        ref = self.ref(t, "a host tensor")
        raw = self.shadow(ref.buf)
        with _disable_current_modes():
            size = t.element_size()
            return torch.as_strided(raw.view(t.dtype), ref.shape, ref.stride, ref.offset // size)

    def scalar(self, t: torch.Tensor) -> Any:
        buf = self.buffer_of(t)
        if buf is None or self.device_of(buf) != "cpu":
            raise Refused("model.py reads a device tensor's value on the host (.item(), int(t))")
        if buf in self.device_written:
            raise Refused("model.py reads host memory a device launcher was given")
        view = self.host_view(t)
        with _disable_current_modes():
            return view.item()

    # --- launcher calls -----------------------------------------------------------------------
    def call(self, name: str, args: tuple) -> None:
        ret, decls = self.signatures[name]
        wants_stream = bool(decls) and "hipStream_t" in decls[-1]
        if wants_stream and len(args) == len(decls) - 1:
            args = (*args, None)
        if len(args) != len(decls):
            raise TypeError(f"{name} takes {len(decls)} arguments, got {len(args)}")
        recorded: list[dict] = []
        refs: list[Ref] = []
        for k, (a, decl) in enumerate(zip(args, decls, strict=False)):
            what = f"argument {k} of kernels.{name}"
            if "hipStream_t" in decl:
                recorded.append({"stream": True})
            elif isinstance(a, torch.Tensor):
                ref = self.ref(a, what)
                refs.append(ref)
                recorded.append({"ref": ref})
            elif isinstance(a, (bool, numbers.Integral)):
                recorded.append({"int": int(a)})
            elif isinstance(a, numbers.Real):
                recorded.append({"float": float(a)})
            else:
                raise Refused(f"{what} is a {type(a).__name__}: a plan holds tensors and numbers")
        self.steps.append(Step(op="call", launcher=name, args=tuple(recorded)))
        if all(self.device_of(r.buf) == "cpu" for r in refs):
            self.run_on_host(name, ret, decls, recorded)
        else:
            self.device_written.update(r.buf for r in refs if self.device_of(r.buf) == "cpu")

    def run_on_host(self, name: str, ret: str, decls: list[str], recorded: list[dict]) -> None:
        """Runs a launcher that touches host memory only (a workspace-size query) for real."""
        if self.library is None:
            raise Refused(f"kernels.{name} runs on the host but no library was given")
        fn = Launcher(getattr(self.library, name), name, ret, decls)
        values: list[Any] = []
        for a in recorded:
            if "ref" in a:
                ref = a["ref"]
                raw = self.shadow(ref.buf)
                values.append(raw.data_ptr() + ref.offset)
            elif "stream" in a:
                values.append(None)
            else:
                values.append(a.get("int", a.get("float")))
        code = fn.fn(*values)
        if fn.checks and code != 0:
            raise RuntimeError(f"launcher {name} returned HIP error {code}")


_SCALARS = {
    torch.Tensor.item: lambda v: v,
    torch.Tensor.__int__: int,
    torch.Tensor.__float__: float,
    torch.Tensor.__bool__: bool,
    torch.Tensor.__index__: int,
}


class _Addresses(TorchFunctionMode):
    """data_ptr of a stand-in: its place in the plan's address space (Recording.address)."""

    def __init__(self, rec: Recording) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        if args and isinstance(args[0], FakeTensor):
            if func is torch.Tensor.data_ptr:
                return self.rec.address(args[0])
            if func in _SCALARS:
                value = self.rec.scalar(args[0])
                return _SCALARS[func](value)
        return func(*args, **(kwargs or {}))


class _Allowlist(TorchDispatchMode):
    """Lets allocations, views, fills and metadata through and records them; refuses the rest."""

    def __init__(self, rec: Recording) -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204, C901
        kwargs = kwargs or {}
        name = _name(func)
        rec = self.rec
        if name in _METADATA or getattr(func, "namespace", "") == "prim":
            return func(*args, **kwargs)
        if name == "_local_scalar_dense":
            return rec.scalar(args[0])
        if name in _EMPTY or name in _FILLED:
            out = func(*args, **kwargs)
            fill = None
            if name in _FILLED:
                at = _FILLED[name]
                fill = (
                    0
                    if at is None
                    else 1
                    if at == -1
                    else _plain(args[at] if len(args) > at else kwargs["fill_value"])
                )
            rec.allocate(out, fill)
            return out
        if name in _FILL_INPLACE:
            at = _FILL_INPLACE[name]
            value = 0 if at is None else _plain(args[at])
            rec.steps.append(Step(op="fill", ref=rec.ref(args[0], f"{name} target"), value=value))
            return func(*args, **kwargs)
        if _is_view(func) and args and isinstance(args[0], torch.Tensor):
            buf = rec.buffer_of(args[0])
            if buf is None:
                raise Refused(f"aten.{name} of a tensor that is not an input or an allocation")
            out = func(*args, **kwargs)
            for t in out if isinstance(out, (list, tuple)) else [out]:
                rec.track(t, buf)
            return out
        raise Refused(
            f"model.py computes aten.{name} with PyTorch outside the kernels: a native "
            "candidate's forward may only allocate, view and call kernels.*"
        )


def _plain(v: Any) -> float | int:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise Refused(f"a fill value must be a number, got {type(v).__name__}")
    return int(v) if isinstance(v, numbers.Integral) else float(v)


class RecordingKernels:
    """Stands in for hipevolve.runtime.kernels while a forward is recorded."""

    def __init__(self, signatures: dict) -> None:
        object.__setattr__(self, "_signatures", signatures)
        object.__setattr__(self, "_recording", None)

    def __setattr__(self, name: str, value: Any) -> None:
        raise Refused(f"model.py rebinds kernels.{name}: launchers cannot be replaced")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._signatures:
            raise AttributeError(f'no extern "C" launcher named {name!r} in kernel.hip')
        rec = self._recording
        if rec is None:
            raise Refused(f"kernels.{name} called outside forward")
        return lambda *args: rec.call(name, args)


def stand_in(spec: dict) -> torch.Tensor:
    return torch.empty_strided(
        tuple(spec["shape"]),
        tuple(spec["stride"]),
        dtype=getattr(torch, spec["dtype"]),
        device="cuda",
    )


def record_case(
    model_class: Any,
    init: list,
    inputs: list[dict | Any],
    kernels: RecordingKernels,
    library: ctypes.CDLL | None,
) -> CasePlan:
    """One case's plan. inputs: per forward argument, a tensor spec (dict: dtype, shape,
    stride) or a plain value passed as it is. Raises Refused, or whatever the forward raises."""
    rec = Recording(library, kernels._signatures)
    fake = FakeTensorMode()
    specs: list[dict | None] = []
    with fake:
        args = []
        for i, spec in enumerate(inputs):
            if isinstance(spec, dict):
                t = stand_in(spec)
                rec.track(t, f"in{i}")
                args.append(t)
                specs.append(
                    {
                        k: list(spec[k]) if k != "dtype" else spec[k]
                        for k in ("dtype", "shape", "stride")
                    }
                )
            else:
                args.append(spec)
                specs.append(None)
    object.__setattr__(kernels, "_recording", rec)
    try:
        with fake, torch.no_grad():  # __init__ may draw weights: their values never matter here
            model = model_class(*init)
            if isinstance(model, torch.nn.Module):
                model.eval()
                bind_weights(model, rec)
        with fake, _Allowlist(rec), _Addresses(rec), torch.no_grad():
            result = model(*args)
            outs = [result] if isinstance(result, torch.Tensor) else result
            if not isinstance(outs, (list, tuple)) or not all(
                isinstance(o, torch.Tensor) for o in outs
            ):
                raise Refused(f"forward returned {type(result).__name__}, expected tensors")
            refs = tuple(rec.ref(o, f"output {k}") for k, o in enumerate(outs))
    finally:
        object.__setattr__(kernels, "_recording", None)
    return CasePlan(
        inputs=tuple(specs), buffers=tuple(rec.buffers), steps=tuple(rec.steps), outputs=refs
    )


def warm() -> None:
    """Pays FakeTensorMode's first use (it imports torch._dynamo, sympy and the fake-tensor
    machinery: seconds) once, in the zygote, so that every recorder forked from it starts warm.
    Touches no device: constructing the mode creates no tensor and asks nothing of CUDA."""
    FakeTensorMode()


def bind_weights(model: torch.nn.Module, rec: Recording) -> None:
    """Each parameter and buffer of the model becomes a device buffer of the plan that the
    executor fills from the reference model's tensor of the same name, drawn under the same
    seed by trusted code (what the old sandbox got by building ModelNew under that seed). The
    module holds the stand-in as a plain attribute from then on."""
    named = [*model.named_parameters(), *model.named_buffers()]
    for name, value in named:
        t = torch.empty(tuple(value.shape), dtype=value.dtype, device="cuda")
        rec.allocate(t, None)
        rec.buffers[-1] = replace(rec.buffers[-1], param=name)
        prefix, _, leaf = name.rpartition(".")
        owner = model.get_submodule(prefix)
        owner._parameters.pop(leaf, None)
        owner._buffers.pop(leaf, None)
        owner.__dict__[leaf] = t


def recording_kernels(source: str) -> RecordingKernels:
    return RecordingKernels(launcher_signatures(source))


def record_job(job: Any, out: Any, send: Any) -> None:  # noqa: ANN401
    """The recorder's whole life: binds the recording kernels, imports model.py, records every
    case and sends one "plan" message (or "refused" with the reason). job: job.RecordJob."""

    import hipevolve.runtime as runtime
    from hipevolve.core import reference
    from hipevolve.verifier.gpu.plan import Plan

    cand = job.candidate
    with open(cand.source) as f:
        kernels = recording_kernels(f.read())
    runtime.kernels = kernels  # what `from hipevolve.runtime import kernels` finds
    library = ctypes.CDLL(str(cand.library), mode=ctypes.RTLD_LOCAL)
    ref_module = reference.load_module(job.reference)
    module = reference.load_candidate(cand.model, "model.py")
    cases = {}
    for name, case in job.cases.items():
        torch.manual_seed(0)  # public: init arguments are never secret
        init = list(ref_module.get_init_inputs(**case["init"]))
        if any(isinstance(v, torch.Tensor) for v in init):  # no shipped task passes any
            raise Refused("a native candidate's init arguments cannot be tensors in a plan")
        try:
            cases[name] = record_case(module.ModelNew, init, case["inputs"], kernels, library)
        except Refused as e:
            send("refused", message=f"case {name}: {e}"[:300])
            return
    send("plan", plan=json.loads(Plan(cases=cases).to_json()))
