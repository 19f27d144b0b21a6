"""A check case of wide magnitudes, added by the judge when the reference is pointwise.

A task's inputs come from one distribution, most often torch.randn's: values within about 5 of
zero. A kernel that is right only there (a clamp: red team round 10's ReLU6 scored `ok` as ReLU;
an activation approximated on a short interval; an exp that overflows just past it) passes
every check. For a reference whose every aten op computes element by element (tagged
`pointwise`) or only allocates, views or copies (plan_kb.MOVES_DATA), the judge adds one
untimed case: the smallest case again, its floating-point inputs with each element scaled by a
factor of its own, log-uniform in [1/SPREAD, SPREAD] (core.reference.spread_out; the sign is
kept, the factors follow the seed, so the judge and the sandbox draw the same inputs).

Only pointwise references get it: where elements meet (a reduction, a matmul, a recurrence such
as gated_delta_net's) wider inputs change the problem's conditioning, and an honest kernel could
fail where the reference is itself inexact. The case is added only when the reference's outputs
on it are all finite (the judge runs the reference once on the case, on its device), and only
when that case's inputs are small (MAX_INPUT_BYTES): a check, not a second timing set.

Imports torch, the standard library and hipevolve.{core.reference, verifier.gpu.{job,plan_kb}}.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import TYPE_CHECKING, Any

from hipevolve.core import reference
from hipevolve.verifier.gpu.job import CaseJob
from hipevolve.verifier.gpu.plan_kb import MOVES_DATA

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import WorkerJob

SPREAD = 16.0  # factors in [1/16, 16]: randn's values reach about 80, short of exp's overflow
MAX_INPUT_BYTES = 256 << 20
SUFFIX = "-wide"

_decided: dict[str, str | None] = {}  # this judge's answers: job key -> base case name or None


def with_wide_case(job: WorkerJob) -> WorkerJob:
    """`job` with the wide case last, when its reference is pointwise and finite on it."""
    if job.reference_only or not job.cases or any(c.name.endswith(SUFFIX) for c in job.cases):
        return job
    key = _key(job)
    if key not in _decided:
        try:
            _decided[key] = _base_case(job)
        except Exception:  # noqa: BLE001 (the reference's own failures are the judge's to report)
            _decided[key] = None
    base = next((c for c in job.cases if c.name == _decided[key]), None)
    if base is None:
        return job
    wide = CaseJob(
        name=base.name + SUFFIX,
        init=base.init,
        timed=False,
        inputs={**base.inputs, reference.SPREAD: SPREAD},
    )
    return dataclasses.replace(job, cases=(*job.cases, wide))


def wide_note(case: str) -> str:
    """What a failure of `case` says beyond "wrong values" when it is the wide case."""
    if not case.endswith(SUFFIX):
        return ""
    return (
        f" on inputs of wide magnitudes (each element scaled by 1/{SPREAD:g} to {SPREAD:g}: "
        "the kernel must hold beyond the task's usual range)"
    )


def _key(job: WorkerJob) -> str:
    source = hashlib.sha256(job.reference.read_bytes()).hexdigest()
    cases = [[c.name, c.init, c.inputs] for c in job.cases]
    return json.dumps([source, job.device, cases], sort_keys=True, default=str)


def _base_case(job: WorkerJob) -> str | None:
    """The name of the case the wide one copies (the smallest), or None: not pointwise, too
    large, or not finite on wide inputs."""
    import torch

    module = reference.load_module(job.reference)
    seed = job.seeds[0]
    sizes = {}
    for case in job.cases:
        inputs = reference.build_inputs(module, case.inputs, "meta", seed, draw_on_device=True)
        sizes[case.name] = sum(
            v.numel() * v.element_size() for v in inputs if isinstance(v, torch.Tensor)
        )
    base = min(job.cases, key=lambda c: sizes[c.name])
    if sizes[base.name] > MAX_INPUT_BYTES or not pointwise(module, base):
        return None
    wide = {**base.inputs, reference.SPREAD: SPREAD}
    model = reference.build_model(module, base.init, job.device, seed)
    inputs = reference.build_inputs(module, wide, job.device, seed, draw_on_device=True)
    with torch.no_grad():
        outputs = reference.as_outputs(model(*inputs))
    finite = all(bool(torch.isfinite(o).all()) for o in outputs if o.is_floating_point())
    return base.name if finite else None


def pointwise(module: Any, case: CaseJob) -> bool:  # noqa: ANN401 (a reference module)
    """The reference's forward, run on the meta device for `case`, computes only with pointwise
    aten ops (and at least one), besides ops that allocate, view or copy."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    computed: list[Any] = []

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            if func.__name__.split(".")[0] not in MOVES_DATA:
                computed.append(func)
            return func(*args, **(kwargs or {}))

    with torch.device("meta"):
        model = reference.build_model(module, case.init, "meta")
    inputs = reference.build_inputs(module, case.inputs, "meta", 0, draw_on_device=True)
    with torch.no_grad(), Ops():
        model(*inputs)
    return bool(computed) and all(torch.Tag.pointwise in f.tags for f in computed)
