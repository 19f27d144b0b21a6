"""The reference's inputs and outputs a judge checks candidates against, kept between its jobs.

A judge serves up to 64 jobs, and in a run they are all of one task: the same reference file,
cases and device, and the same public seeds (the last seed is drawn fresh for each evaluation:
pipeline.check_seeds). A judge keeps the inputs and outputs of its last job (`Kept`) and builds
only the seeds its next job adds, when that job's `job_key` is the same; a different key drops
them all before anything new is built. Only the judge holds them: candidates never see the
judge's memory, and a judge whose evaluation ended in doubt exits with them (worker.REUSABLE).
A run's evaluations share their hidden seed too (RunBounds.hidden_seed), so within a run a
judge builds each (case, seed) once. The outputs on the timing inputs (the judge checks timed
calls at random: judge.timed_refs) are kept the same way, without their inputs (a timed
call's check reads none), while the model seed they were built with (the last check seed)
stays the same. It keeps them in the job's order up to 1/KEEP_SHARE of
the device's memory (KEEP_BYTES where they live on the host): the pairs past that are built
again by each job. A slot's judges serve in turn (isolate.StandbyPool: a judge's clean-up runs
while the next one serves), so each of its STANDBY_JUDGES + 1 may hold that much.

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

KEEP_BYTES = 4 << 30  # on the host (a lean plan's references; softmax's three seeds: 2.5 GiB)
KEEP_SHARE = 10  # of the device's memory (a 141 GiB H200: 14.1; GDN's three seeds take 12.8)

Refs = dict[tuple[str, int], tuple[list[torch.Tensor], list[torch.Tensor]]]


class Kept:
    """What one judge process keeps from its last job: its key, module and references."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.module: ModuleType | None = None
        self.refs: Refs = {}
        self.on_host = False  # its references are on the host (build's on_host)
        self.model_seed: int | None = None  # the timed outputs' model seed (job.seeds[-1])

    def drop(self) -> None:
        self.key, self.module, self.refs, self.model_seed = None, None, {}, None

    def offer(self, job: WorkerJob, name_seed: tuple[str, int], pair: tuple[list, list]) -> None:
        """Keeps one more (case, seed) of `job` (judge.timed_refs') if it fits the limit."""
        if self.key != _key(job, self.on_host) or self.model_seed != job.seeds[-1]:
            return
        if self.device_bytes() + _bytes(pair[0] + pair[1]) <= _keep_limit(job.device, self.on_host):
            self.refs[name_seed] = pair

    def device_bytes(self) -> int:
        """What the kept references take on the job's device (0 when they are on the host)."""
        if self.on_host:
            return 0
        return sum(_bytes(ins + outs) for ins, outs in self.refs.values())


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
            )
            for case in job.cases
        ]
    except Exception:  # noqa: BLE001 (any reference code: sizes() decides then)
        return None


def _sizes_on(module: ModuleType, job: WorkerJob, device: str) -> list[CaseBytes]:
    found = []
    for case in job.cases:
        with torch.device(device):  # parameters made where they go (meta: no memory, no time)
            model = reference.build_model(module, case.init, device, job.seeds[0])
        inputs = reference.build_inputs(
            module, case.inputs, device, job.seeds[0], draw_on_device=True
        )
        with torch.no_grad():
            outs = reference.as_outputs(model(*inputs))
        found.append(
            CaseBytes(
                name=case.name,
                input_bytes=_bytes(inputs),
                output_bytes=_bytes(outs),
                timed=case.timed,
            )
        )
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
    if kept.model_seed == job.seeds[-1]:
        wanted |= {k for k in kept.refs if timed_seed(job, k[1])}
    for name_seed in [k for k in kept.refs if k not in wanted]:
        del kept.refs[name_seed]  # the last job's fresh seed, before this job's takes memory
    refs.update((k, kept.refs[k]) for k in wanted if k in kept.refs and timed_seed(job, k[1]))
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
    kept.key, kept.refs = key, _within(refs, _keep_limit(device, on_host))
    kept.model_seed = job.seeds[-1]
    return module, refs


def timed_seed(job: WorkerJob, seed: int) -> bool:
    """Whether `seed` draws one of `job`'s timing input sets (job.timing_seed onwards), never
    one of its check seeds."""
    n = job.warmup + job.trials
    return job.timing_seed <= seed < job.timing_seed + n and seed not in job.seeds


def _keep_limit(device: str, on_host: bool) -> int:
    if on_host or not device.startswith("cuda"):
        return KEEP_BYTES
    return torch.cuda.get_device_properties(device).total_memory // KEEP_SHARE


def _within(refs: Refs, limit: int) -> Refs:
    """The first of `refs`, in order, whose tensors together take at most `limit` bytes."""
    kept, held = {}, 0
    for name_seed, pair in refs.items():
        held += _bytes(pair[0] + pair[1])
        if held > limit:
            break
        kept[name_seed] = pair
    return kept
