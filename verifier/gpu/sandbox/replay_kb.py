"""The trusted executor for a KernelBench-format candidate: replays its plan (plan_kb.py) with no
candidate Python.

The candidate's .py ran once, in a recorder process (record_kb.py); what its forward did arrives
here as a plan of aten ops and extension calls. This process validates it, imports the build
stage's prebuilt extension modules the plan names (prebuilt.load_extension) and, for every
checked and every timed call, replays it through `KbPlanModel`: aten ops through
torch.ops.aten, extension functions by name, on the current stream (the executor's, or the
capture stream of a CUDA graph), each extension call's results checked against the recorded
dtype, shape, strides and device (a mismatch fails the candidate). ModelNew's parameters and
buffers are the reference model's same-named tensors, drawn by trusted code under the case's
seed, copied afresh before every call. Everything else is the native executor's (executor.py):
its inputs built by trusted code and copied between canaries at shifted addresses, its checked
calls, flush, events, trial loop, checked timed calls and check calls slipped in among them.

What it does not protect against: the extension's C++ runs in this process (its static
initialisers when it loads, its functions when the plan calls them) and could read or write
this process's memory, as a native candidate's library could; a KernelBench extension is a
PyTorch extension linked against libtorch. The build stage refuses one that imports compute
(kb_library_check.py: aten ops that compute, ATen's per-backend entry points, vendor libraries,
run-time symbol lookup), and the watch here sees any op its C++ dispatches; native code that
finds a libtorch function by other means (an address computed from an allowed one) is seen by
neither. So a KernelBench candidate with an extension is less isolated than a native one, and
its verdict's flag says so (kb_stage.kb_flag); a pure-torch one runs no code of its own here at
all.

Imports torch, the standard library and hipevolve.verifier.gpu.{sandbox.executor,plan,plan_kb,
sandbox.prebuilt}.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hipevolve.verifier.gpu.plan import PlanError
from hipevolve.verifier.gpu.plan_kb import MOVES_DATA, Hacked, aten_op, is_kb_plan, validate
from hipevolve.verifier.gpu.sandbox.executor import Executor, reseed

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import SandboxCase


class KbPlanModel:
    """One case's plan as a callable: `model(*inputs)` replays it and returns its outputs."""

    def __init__(
        self,
        plan: dict,
        functions: dict[tuple[str, str], Any],
        device: str,
        weights: dict[str, torch.Tensor] | None = None,
    ) -> None:
        self.plan = plan
        self.functions = functions  # (module, fn) -> the prebuilt extension's function
        self.device = device
        self.weights = weights or {}
        self.ops = [aten_op(s["fn"]) if s["op"] == "aten" else None for s in plan["steps"]]
        self.stream = None  # set by the graph timing's capture; aten ops use the current stream
        self.kernels_only = False  # set by KbExecutor from the job (WorkerJob.kernels_only)

    def broken(self) -> list[int]:
        return []  # the replay allocates through the caching allocator, poisoned by the checks

    def __call__(self, *args: Any) -> list[torch.Tensor]:  # noqa: ANN401
        """A check call (timed calls run prepare and run apart): under a kernels-only job, its
        extension calls are watched for PyTorch compute inside them."""
        return self.run(self.prepare(*args), watch=self.kernels_only)

    def prepare(self, *args: Any) -> dict[str, Any]:  # noqa: ANN401
        """The harness's part of a call, never timed: the inputs checked against the plan, the
        parameters copied afresh from the reference's (a call that writes one changes no
        later call)."""
        values: dict[str, Any] = {}
        for i, (arg, spec) in enumerate(zip(args, self.plan["inputs"], strict=True)):
            if spec is None:
                continue
            if (
                str(arg.dtype).removeprefix("torch.") != spec["dtype"]
                or list(arg.shape) != spec["shape"]
                or list(arg.stride()) != spec["stride"]
            ):
                raise RuntimeError(f"input {i} does not match the recorded plan")
            values[f"in{i}"] = arg
        for j, p in enumerate(self.plan["params"]):
            t = torch.empty_strided(
                p["shape"], p["stride"], dtype=getattr(torch, p["dtype"]), device=self.device
            )
            values[f"p{j}"] = t.copy_(self.weights[p["name"]])
        return values

    def refresh(self, values: dict[str, Any], weights: dict[str, torch.Tensor]) -> None:
        """What prepare did to the parameters, again in place before a graph replay."""
        for j, p in enumerate(self.plan["params"]):
            values[f"p{j}"].copy_(weights[p["name"]])

    def run(self, values: dict[str, Any], watch: bool = False) -> list[torch.Tensor]:
        """The candidate's part, timed: its aten ops and extension calls, as it made them.
        `watch`: each extension call under _Watch, which sees the aten ops its C++ dispatches."""
        results: list[Any] = []
        for step, op in zip(self.plan["steps"], self.ops, strict=True):
            args = [self.value(a, values, results) for a in step["args"]]
            kwargs = {k: self.value(a, values, results) for k, a in step["kwargs"].items()}
            if op is not None:
                results.append(op(*args, **kwargs))
                continue
            fn = self.functions[(step["module"], step["fn"])]
            if watch:
                with _Watch() as seen:
                    out = fn(*args, **kwargs)
                if seen.computed:
                    raise Hacked(
                        f"{step['module']}.{step['fn']} computes "
                        f"{', '.join(f'aten.{n}' for n in seen.computed)} with PyTorch inside "
                        "the extension: the work must be the extension's own kernels"
                    )
            else:
                out = fn(*args, **kwargs)
            self.check_results(step, out)
            results.append(out)
        return [self.value(r, values, results) for r in self.plan["outputs"]]

    def check_results(self, step: dict, out: Any) -> None:  # noqa: ANN401
        where = f"{step['module']}.{step['fn']}"
        single = type(out) is torch.Tensor
        outs = [out] if single else [] if out is None and not step["results"] else out
        if single != step["single"] or not isinstance(outs, (list, tuple)):
            raise RuntimeError(f"{where} returned {type(out).__name__}, not what it was recorded")
        if len(outs) != len(step["results"]):
            raise RuntimeError(
                f"{where} returned {len(outs)} tensors, recorded {len(step['results'])}"
            )
        for k, (t, want) in enumerate(zip(outs, step["results"], strict=True)):
            got = (
                None
                if type(t) is not torch.Tensor
                else {
                    "dtype": str(t.dtype).removeprefix("torch."),
                    "shape": list(t.shape),
                    "stride": list(t.stride()),
                    "device": "job"
                    if t.device.type == torch.device(self.device).type
                    else t.device.type,
                }
            )
            if got != want:
                raise RuntimeError(
                    f"{where} result {k} is {got}, recorded {want}: an extension "
                    "must return what it returned when recorded"
                )

    def value(self, v: dict, values: dict[str, Any], results: list) -> Any:  # noqa: ANN401, PLR0911
        if "t" in v:
            name = v["t"]
            t = results[int(name[1:])] if name[0] == "v" else values[name]
            return t[v["i"]] if "i" in v else t
        ((kind, x),) = v.items()
        if kind == "const":  # a small tensor of Python data, made afresh each call
            dtype = getattr(torch, x["dtype"])
            return torch.tensor(x["data"], dtype=dtype).reshape(x["shape"])
        if kind == "list":
            return [self.value(a, values, results) for a in x]
        if kind == "none":
            return None
        if kind == "dtype":
            return getattr(torch, x)
        if kind == "device":
            return torch.device(self.device if x == "job" else "cpu")
        if kind == "layout":
            return torch.strided
        if kind == "memory_format":
            return getattr(torch, x)
        return x


class _Watch(TorchDispatchMode):
    """The aten ops an extension's C++ dispatches (at:: calls reach the Python dispatch mode of
    this thread), those that compute on data kept in `computed`; every op still runs."""

    def __init__(self) -> None:
        super().__init__()
        self.computed: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        full = func._schema.name
        name = full.removeprefix("aten::")
        if full.startswith("aten::") and name not in MOVES_DATA and name not in self.computed:
            self.computed.append(name)
        return func(*args, **(kwargs or {}))


class KbExecutor(Executor):
    """The sandbox for a KernelBench candidate with a plan: replays it, never imports its .py."""

    def load(self) -> None:
        plan = self.job.plan
        if not is_kb_plan(plan) or not isinstance(plan.get("cases"), dict):
            raise PlanError("a KernelBench candidate's job carries no KernelBench plan")
        folder = self.job.candidate.library
        built = {p.stem for p in Path(folder).glob("*.so")} if folder is not None else set()
        for case in self.job.cases:
            if case.name not in plan["cases"]:
                raise PlanError(f"the plan has no case {case.name!r}")
            validate(plan["cases"][case.name], built)
        functions: dict[tuple[str, str], Any] = {}
        if built:
            from hipevolve.verifier.gpu.sandbox.prebuilt import load_extension

            for c in plan["cases"].values():
                for s in c["steps"]:
                    if s["op"] == "ext" and (s["module"], s["fn"]) not in functions:
                        fn = getattr(load_extension(folder, s["module"]), s["fn"], None)
                        if type(fn).__name__ != "builtin_function_or_method":
                            raise PlanError(f"extension {s['module']} has no function {s['fn']!r}")
                        functions[(s["module"], s["fn"])] = fn
        self.models = {
            name: KbPlanModel(plan["cases"][name], functions, self.device)
            for name in (c.name for c in self.job.cases)
        }
        for model in self.models.values():
            model.kernels_only = bool(self.job.kernels_only)

    def build_model(self, case: SandboxCase, seed: int) -> KbPlanModel:
        """The case's plan with the reference model's parameters drawn under `seed` (trusted
        code: the task's Model under the seed)."""
        model = self.models[case.name]
        params = model.plan["params"]
        if not params:
            return model
        ref = self.reference.build_model(self.ref_module, case.init, self.device, seed)
        reseed()
        state = {n: t.detach() for n, t in [*ref.named_parameters(), *ref.named_buffers()]}
        for p in params:
            t = state.get(p["name"])
            if t is None:
                raise PlanError(
                    f"ModelNew has a parameter {p['name']!r} the task's Model lacks "
                    f"(it has {', '.join(state) or 'none'}): name it as the Model does"
                )
            if str(t.dtype).removeprefix("torch.") != p["dtype"] or list(t.shape) != p["shape"]:
                raise PlanError(
                    f"ModelNew's parameter {p['name']!r} is {p['dtype']} {tuple(p['shape'])}; "
                    f"the task's Model has {t.dtype} {tuple(t.shape)}: make them the same"
                )
        built = KbPlanModel(model.plan, model.functions, self.device, state)
        built.kernels_only = model.kernels_only
        return built
