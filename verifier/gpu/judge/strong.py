"""The strong baselines a task names, timed in a run's reference-only judge job (issue 33).

After the judge has timed the reference (reference_side.References.time), `time_baselines` times each
baseline of the job (job.BaselineJob; TaskSpec.baselines) the same way: the same clock, trial
and warm-up counts, timing input sets and timing mode (eager, or CUDA graph replays). Before it
is timed, each baseline's outputs on the first seed are compared with the reference's at the
task's tolerance (compare.py, the rule candidates meet). A baseline whose module cannot be
imported (its library is not installed: the module raises ImportError saying so), that fails
to build or run on a case, or whose outputs fall outside the tolerance is not timed and comes
back with one line why; it never fails the job.

Baselines are trusted code shipped with the task, run in the judge like the reference: a
`module` baseline's file defines `Model`, built with the reference's init arguments under the
reference's seed and called with the reference's inputs; a `torch_compile` baseline is the
reference's own Model under torch.compile (static shapes: one compile per case, untimed, in the
correctness call). The judge that ran them serves no candidate afterwards (worker.main).

Imports torch, the standard library and hipevolve.{core.reference,
verifier.gpu.judge.compare_chunks} only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from hipevolve.core import reference
from hipevolve.verifier.gpu.judge.compare_chunks import compare_anywhere

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import BaselineJob, CaseJob
    from hipevolve.verifier.gpu.judge.reference_side import References

Maker = Callable[["CaseJob"], torch.nn.Module]


def time_baselines(ref: References) -> dict[str, dict]:
    """{name: {"trials": {case: [us]}, "flags": [...]}} for each baseline of `ref`'s job that
    was timed, {name: {"unavailable": why}} for each that was not (module docstring); each
    with the "seconds" it held the judge (imports, builds, compiles and autotuning included)."""
    clock = ref.timing.Clock(ref.job.device, ref.job.flush_bytes)
    answers = {}
    try:
        for b in ref.job.baselines:
            start = time.monotonic()  # "seconds": how long it held the judge, compiles included
            answers[b.name] = time_one(ref, clock, b) | {"seconds": time.monotonic() - start}
        return answers
    finally:
        del clock


def time_one(ref: References, clock: Any, spec: BaselineJob) -> dict:  # noqa: ANN401
    answer: dict[str, Any] = {"trials": {}, "flags": []}
    try:
        make = maker(ref, spec)
    except Exception as e:  # noqa: BLE001 (not installed, not importable: one line why)
        return {"unavailable": why(e)}
    for case in (c for c in ref.job.cases if c.timed):
        try:
            model = make(case)
            bad = outside_tolerance(ref, case, model)
            if bad:
                return {"unavailable": f"outside the task's tolerance on {case.name}: {bad}"}
            trials, eager = ref.trials(clock, case, model)
        except Exception as e:  # noqa: BLE001 (a build or run failure of the task's code)
            return {"unavailable": f"{case.name}: {why(e)}"}
        answer["trials"][case.name] = trials
        if eager:
            answer["flags"].append(f"timing:eager ({case.name}: {eager})"[:300])
        del model
    return answer


def maker(ref: References, spec: BaselineJob) -> Maker:
    """case -> the baseline's model for it, seeded as the reference's is."""
    device, seed = ref.job.device, ref.job.seeds[0]
    share_compiles(spec)
    if spec.kind == "torch_compile":
        return lambda case: torch.compile(
            reference.build_model(ref.module, case.init, device, seed), dynamic=False
        )
    module = load(spec)
    # The baseline's Model, built from the reference's init arguments.
    shim = types.SimpleNamespace(Model=module.Model, get_init_inputs=ref.module.get_init_inputs)
    return lambda case: reference.build_model(shim, case.init, device, seed)


def share_compiles(spec: BaselineJob) -> None:
    """Points Triton's and Inductor's kernel caches at the baseline's shared folder
    (BaselineJob.compiles) before anything compiles: a judge's own folder goes with it, and
    FLA's cold Triton compiles took about 40 s a case on an H200. Read by each library when it
    first compiles; this process never judges a candidate afterwards (module docstring)."""
    if spec.compiles is None:
        return
    for variable, folder in (
        ("TRITON_CACHE_DIR", "triton"),
        ("TORCHINDUCTOR_CACHE_DIR", "inductor"),
    ):
        path = spec.compiles / folder
        path.mkdir(parents=True, exist_ok=True)
        os.environ[variable] = str(path)


def load(spec: BaselineJob) -> types.ModuleType:
    """The baseline's module, imported under a private name; ImportError says why not."""
    path = spec.module
    if path is None or not path.is_file():
        raise ImportError(f"no baseline module at {path}")
    name = f"hipevolve_baseline_{abs(hash(str(path)))}"
    found = importlib.util.spec_from_file_location(name, path)
    if found is None or found.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module  # as an import would (dataclasses look their module up)
    try:
        found.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    if not hasattr(module, "Model"):
        raise ImportError(f"{path.name} has no Model class")
    return module


def outside_tolerance(ref: References, case: CaseJob, model: torch.nn.Module) -> str:
    """Why `model`'s outputs on the first seed are not the reference's at the task's
    tolerance, or ''."""
    job, seed = ref.job, ref.job.seeds[0]
    inputs = reference.build_inputs(ref.module, case.inputs, job.device, seed, draw_on_device=True)
    with torch.no_grad():
        got = reference.as_outputs(model(*inputs))
    want = ref.refs[(case.name, seed)][1]
    if len(got) != len(want):
        return f"{len(got)} outputs, the reference has {len(want)}"
    for i, (g, r) in enumerate(zip(got, want, strict=True)):
        if g.shape != r.shape:
            return f"output {i}: shape {tuple(g.shape)}, the reference's {tuple(r.shape)}"
        ok, _, _, mismatch = compare_anywhere(i, g.to(r.dtype), r, job.tolerance)
        if not ok:
            return mismatch or f"output {i} differs"
    return ""


def why(e: BaseException) -> str:
    """One line: an ImportError's own message (a baseline says what is not installed), else
    the exception's type and first line."""
    lines = str(e).strip().splitlines()
    first = lines[0] if lines else ""
    if isinstance(e, ImportError) and first:
        return first[:300]
    return f"{type(e).__name__}: {first}"[:300]
