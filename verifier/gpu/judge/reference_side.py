"""The reference's side of one evaluation (worker.py's judge runs it before the candidate
exists): the reference's inputs and outputs for every case and seed, the job's device-memory
plan (memplan.py), what the judge derives per case (job.CaseSizes) and the reference's timing.

Imports the standard library and hipevolve.{core.{noise, reference}, verifier.gpu.{job,
memplan, judge.references, timing}} only (no pydantic).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from hipevolve.verifier.gpu.job import CaseSizes

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import WorkerJob
    from hipevolve.verifier.gpu.judge.references import Kept, Refs
    from hipevolve.verifier.gpu.memplan import MemoryPlan

PLAN_AFTER = 64  # input sets under 1/PLAN_AFTER of free memory: planned once the reference ran
ADAPTIVE_ROUND = 10  # trials a round of an adaptive timing (job.trial_target) takes
ADAPTIVE_S = 3.0  # and the seconds after which it takes no further round


def host_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class References:
    """The reference's side of one evaluation, all of it before the candidate exists: its
    inputs and outputs for every case and seed (kept between a judge's jobs: references.py),
    what the judge derives from them per case (`sizes`: job.CaseSizes, beside the job, never
    in it) and the reference's timing."""

    def __init__(self, job: WorkerJob, kept: Kept) -> None:
        from hipevolve.core import reference
        from hipevolve.verifier.gpu import timing
        from hipevolve.verifier.gpu.judge import references

        self.reference, self.references, self.timing = reference, references, timing
        self.job = job
        self.kept = kept  # from the judge's last job
        self.module: Any = None
        self.refs: Refs = {}
        self.sizes: dict[str, CaseSizes] = {}
        self.flags: list[str] = []  # how the reference was timed, when it differs from the job
        self.memory: MemoryPlan | None = None  # None: a CPU job, today's plan (plan)
        self.device_memory: tuple[int, int, int | None] | None = None  # free, total, host

    def plan(self, free_bytes: int, total_bytes: int) -> str:
        """The job's device-memory plan (memplan.py); why the job cannot run on this device, or
        ''. A job whose input sets are each under 1/PLAN_AFTER of the free memory (every task
        this project ships) is planned from its first seed's tensors once they are built, as
        the reference has always been run; a larger one from sizes measured on the meta device
        before anything is allocated (references.sizes; a reference the meta device cannot run
        is measured on its first seed)."""
        job = self.job
        self.device_memory = (free_bytes, total_bytes, host_available())
        small = self.references.input_bytes(job, self.kept)
        if small is not None and max(small, default=0) * PLAN_AFTER <= free_bytes:
            return ""  # planned in build, from the tensors it makes
        found = self.references.sizes(job, self.kept)
        if isinstance(found, str):
            return ""  # build runs the reference again, and says why it fails
        self.memory = self.plan_of(found)
        return self.memory.message

    def plan_of(self, found: list) -> MemoryPlan:
        from hipevolve.verifier.gpu import memplan

        job = self.job
        shape = memplan.JobShape(
            seeds=len(job.seeds),
            calls=job.warmup + job.trials,
            timing_budget_bytes=job.timing_budget_bytes,
            flush_bytes=job.flush_bytes,
            graph=job.timing == "graph",
        )
        return memplan.plan_memory(found, shape, *self.device_memory)

    def build(self) -> str:
        """Builds every reference output; why the reference cannot judge anything (or cannot
        run on this device), or ''."""
        lean = self.memory is not None and self.memory.lean
        built = self.references.build(self.job, self.kept, on_host=lean)
        if isinstance(built, str):
            return built
        self.module, self.refs = built
        job = self.job
        if self.memory is None and self.device_memory is not None:
            from hipevolve.verifier.gpu.memplan import CaseBytes

            firsts = {c.name: self.refs[(c.name, job.seeds[0])] for c in job.cases}
            self.memory = self.plan_of(
                [
                    CaseBytes(
                        name=name,
                        input_bytes=self.timing.tensor_bytes(ins),
                        output_bytes=self.timing.tensor_bytes(outs),
                    )
                    for name, (ins, outs) in firsts.items()
                ]
            )
            if self.memory.message:
                return self.memory.message
            if self.memory.lean:  # outputs far larger than inputs: the references to the host
                self.kept.drop()
                self.refs = {
                    k: ([t.cpu() for t in ins], [o.cpu() for o in outs])
                    for k, (ins, outs) in self.refs.items()
                }
        for case in job.cases:
            first = self.refs[(case.name, job.seeds[0])]
            set_bytes = self.timing.tensor_bytes(first[0])
            sets = (
                self.memory.timing_sets[case.name]
                if self.memory is not None
                else self.timing.input_sets_for(
                    set_bytes, job.timing_budget_bytes, job.warmup + job.trials
                )
            )
            self.sizes[case.name] = CaseSizes(
                poison_sizes=tuple(o.numel() * o.element_size() for o in first[1]),
                input_bytes=set_bytes,
                timing_sets=sets,
            )
        return ""

    def time(self) -> dict[str, list[float]]:
        """Each timed case's trials (us), timed as the sandbox times the candidate: as CUDA graph
        replays under the job's timing "graph" where the reference can be captured, eagerly
        otherwise, with the flag in `flags`. A job with `reference_trials` (a run with a
        baseline, where this timing is only a check of the machine's noise) takes that many,
        after one warm-up call."""
        job, device = self.job, self.job.device
        clock = self.timing.Clock(device, job.flush_bytes)
        times = {}
        for case in job.cases:
            if not case.timed:
                continue
            model = self.reference.build_model(  # the seed the sandbox times its model with
                self.module, case.init, device, job.seeds[-1]
            )
            times[case.name], eager = self.trials(clock, case, model)
            if eager:
                self.flags.append(
                    f"timing:eager (not capturable: reference {case.name}: {eager})"[:300]
                )
            del model
        del clock
        return times

    def trials(self, clock: Any, case: Any, model: Any) -> tuple[list[float], str]:  # noqa: ANN401
        """(trials in us, why it was timed eagerly under the job's timing "graph", or '') of
        `model` on `case`: the reference's timing input sets, clock and trial counts. A job
        with a `trial_target` (a run's baseline) takes rounds of ADAPTIVE_ROUND trials until its
        median's interval is that tight, `trials` are taken, or ADAPTIVE_S have passed: a 95 ms
        GDN reference timed 100 times on 8 cases took minutes the run's start waited for."""
        job = self.job
        # A run's evaluations take job.reference_trials (only a check there), one warm-up.
        trials = job.reference_trials or job.trials
        warmup = 1 if job.reference_trials else job.warmup
        sets = [
            self.reference.build_inputs(
                self.module, case.inputs, job.device, job.timing_seed + i, draw_on_device=True
            )
            for i in range(self.sizes[case.name].timing_sets)
        ]
        if not job.trial_target:
            return self.timed(clock, model, sets, trials, warmup)
        from hipevolve.core.noise import median_interval

        started, got, eager = time.monotonic(), [], ""
        while len(got) < trials:
            more, eager = self.timed(
                clock, model, sets, min(ADAPTIVE_ROUND, trials - len(got)), warmup if not got else 1
            )
            got += more
            enough = len(got) >= ADAPTIVE_ROUND and median_interval(got)[1] <= job.trial_target
            if enough or time.monotonic() - started > ADAPTIVE_S:
                break
        return got, eager

    def timed(
        self,
        clock: Any,
        model: Any,
        sets: list,
        trials: int,  # noqa: ANN401
        warmup: int,
    ) -> tuple[list[float], str]:
        if self.job.timing == "graph":
            got = self.timing.time_graph_trials(
                clock, lambda a, m=model: m(*a), sets, trials, warmup
            )
            return got.times, got.eager
        times, _ = self.timing.time_trials(clock, lambda a, m=model: m(*a), sets, trials, warmup)
        return times, ""
