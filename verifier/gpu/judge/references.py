"""The reference's inputs and outputs a judge checks candidates against, kept between its jobs.

A judge serves up to 64 jobs, and in a run they are all of one task: the same reference file,
cases and device, and the same public seeds (the last seed is drawn fresh for each evaluation:
pipeline.check_seeds). A judge keeps the inputs and outputs of its last job (`Kept`) and builds
only the seeds its next job adds, when that job's `job_key` is the same; a different key drops
them all before anything new is built. Only the judge holds them: candidates never see the
judge's memory, and a judge whose evaluation ended in doubt exits with them (worker.REUSABLE).
A job whose references take over KEEP_BYTES, or 1/KEEP_SHARE of the device's memory, leaves
nothing kept.

Imports torch, the standard library and hipevolve.{core.reference, verifier.gpu.judge.compare,
verifier.gpu.memplan} only.
"""

from __future__ import annotations

import hashlib
import json
from types import ModuleType
from typing import TYPE_CHECKING

import torch

from hipevolve.core import reference
from hipevolve.verifier.gpu.judge import compare
from hipevolve.verifier.gpu.memplan import CaseBytes

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import WorkerJob

KEEP_BYTES = 4 << 30  # softmax's three seeds take 2.5 GiB; a judge is one of three per slot
KEEP_SHARE = 32  # and at most this fraction of the device's memory (a 141 GiB H200: 4.4 GiB)

Refs = dict[tuple[str, int], tuple[list[torch.Tensor], list[torch.Tensor]]]


class Kept:
    """What one judge process keeps from its last job: its key, module and references."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.module: ModuleType | None = None
        self.refs: Refs = {}
        self.on_host = False  # its references are on the host (build's on_host)

    def drop(self) -> None:
        self.key, self.module, self.refs = None, None, {}


def job_key(job: WorkerJob) -> str:
    """Equal for two jobs exactly when the references of a seed they share are built the same
    way (the seeds themselves may differ)."""
    source = hashlib.sha256(job.reference.read_bytes()).hexdigest()
    cases = [[c.name, c.init, c.inputs] for c in job.cases]
    return json.dumps([source, job.device, cases], sort_keys=True)


def _module(job: WorkerJob, kept: Kept, key: str) -> ModuleType:
    if key != kept.key:  # kept.drop() leaves no key, so a kept key always has its module
        kept.drop()  # before the new ones take memory
        kept.module = reference.load_module(job.reference)
    return kept.module


def sizes(job: WorkerJob, kept: Kept) -> list[CaseBytes] | str:
    """Each case's input set and output bytes before any reference output is built: from the
    reference run on the meta device (no memory, no data), or where it cannot run there (a
    forward that reads values: .item()) from its first seed on the job's device, freed after;
    or why neither works (build then says why the reference cannot judge)."""
    module = _module(job, kept, _key(job, kept.on_host))
    try:
        return _sizes_on(module, job, "meta")
    except Exception:  # noqa: BLE001 (any reference code: measured on the device instead)
        pass
    try:
        return _sizes_on(module, job, job.device)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e)[:200]}"


def input_bytes(job: WorkerJob, kept: Kept) -> list[int] | None:
    """Each case's input set bytes, drawn on the meta device (get_inputs alone: cheap, where a
    forward on the meta device may take seconds), or None where that fails."""
    module = _module(job, kept, _key(job, kept.on_host))
    try:
        return [
            _bytes(
                reference.build_inputs(
                    module, case.inputs, "meta", job.seeds[0], draw_on_device=True
                )
            )  # fmt: skip
            for case in job.cases
        ]
    except Exception:  # noqa: BLE001 (any reference code: sizes() decides then)
        return None


def _sizes_on(module: ModuleType, job: WorkerJob, device: str) -> list[CaseBytes]:
    found = []
    for case in job.cases:
        with torch.device(device):  # parameters made where they go (meta: no memory, no time)
            model = reference.build_model(module, case.init, device, job.seeds[0])
        inputs = reference.build_inputs(module, case.inputs, device, job.seeds[0],
                                        draw_on_device=True)  # fmt: skip
        with torch.no_grad():
            outs = reference.as_outputs(model(*inputs))
        found.append(CaseBytes(name=case.name, input_bytes=_bytes(inputs),
                               output_bytes=_bytes(outs), timed=case.timed))  # fmt: skip
        del model, inputs, outs
    return found


def _bytes(values: list) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _key(job: WorkerJob, on_host: bool) -> str:
    return job_key(job) + (" host" if on_host else "")


def build(job: WorkerJob, kept: Kept, on_host: bool = False) -> tuple[ModuleType, Refs] | str:
    """(module, {(case, seed): (tensor inputs, outputs)}) for `job`, or why the reference
    cannot judge anything. `kept` then holds exactly this job's references. on_host: each
    seed's inputs and outputs are moved to the host once built (a lean memory plan,
    memplan.py): the judge brings one seed's back to the device while it compares."""
    key = _key(job, on_host)
    _module(job, kept, key)
    kept.on_host = on_host
    module, device, refs = kept.module, job.device, {}
    wanted = {(case.name, seed) for case in job.cases for seed in job.seeds}
    for name_seed in [k for k in kept.refs if k not in wanted]:
        del kept.refs[name_seed]  # the last job's fresh seed, before this job's takes memory
    for case in job.cases:
        for seed in job.seeds:
            if (case.name, seed) in kept.refs:
                refs[(case.name, seed)] = kept.refs[(case.name, seed)]
                continue
            model = reference.build_model(module, case.init, device, seed)
            # drawn on the device (fast; the sandbox draws the same way, so the values match)
            inputs = reference.build_inputs(module, case.inputs, device, seed, draw_on_device=True)
            with torch.no_grad():
                outs = reference.as_outputs(model(*inputs))
            problem = compare.reference_problem(outs)
            # Copies the model cannot reach: on the host at once under on_host.
            outs = [o.detach().to("cpu" if on_host else o.device, copy=True) for o in outs]
            if problem:
                kept.drop()
                return f"bad reference: case {case.name} seed {seed}: {problem}"
            tensors = [i for i in inputs if isinstance(i, torch.Tensor)]
            if on_host:
                tensors = [t.cpu() for t in tensors]
                del inputs, model
            refs[(case.name, seed)] = (tensors, outs)
    held = sum(t.numel() * t.element_size() for ins, outs in refs.values() for t in ins + outs)
    limit = KEEP_BYTES
    if device.startswith("cuda"):
        limit = min(limit, torch.cuda.get_device_properties(device).total_memory // KEEP_SHARE)
    if held <= limit:
        kept.key, kept.refs = key, dict(refs)
    else:
        kept.drop()
    return module, refs
