"""One evaluation in the judge process (worker.py serves them): `Judge` runs the reference's
side first (reference_side.References), then the candidate in its sandbox, stage by stage
(record, load, check, time), and the Scorecard (scorecard.py) turns what the sandbox reports
into the verdict. Like worker.py, it imports no pydantic."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from hipevolve.verifier.gpu.job import RecordJob, SandboxJob, WorkerJob
from hipevolve.verifier.gpu.judge.channel import Channel, SandboxError, kill_group_except_self
from hipevolve.verifier.gpu.judge.kb_stage import kb_flag, plannable, record_kb_plan
from hipevolve.verifier.gpu.judge.record_ahead import Recorder, plan_key, recall, remember
from hipevolve.verifier.gpu.judge.reference_side import References
from hipevolve.verifier.gpu.judge.scorecard import Scorecard

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.judge.references import Kept
    from hipevolve.verifier.gpu.memplan import MemoryPlan

RESERVE_SLACK = 64 << 20  # the candidate's own weights and scratch, beyond what the case needs


class Judge:
    """One evaluation: the reference's side first (References), then the candidate in its
    sandbox, stage by stage, each report judged by the Scorecard."""

    def __init__(
        self, job: WorkerJob, chan: Channel, kept: Kept | None = None, rec: Recorder | None = None
    ) -> None:
        import torch

        from hipevolve.verifier.gpu import ipc
        from hipevolve.verifier.gpu.judge import references
        from hipevolve.verifier.gpu.judge.wide_case import with_wide_case

        self.torch, self.ipc = torch, ipc
        job = with_wide_case(job)  # a pointwise reference: a case of wide magnitudes too
        self.job = job
        self.device = job.device
        self.ref = References(job, kept if kept is not None else references.Kept())
        self.card = Scorecard(job)
        self.counter = ipc.JudgeCounter() if self.device.startswith("cuda") else None
        self.seconds: dict[str, float] = {}
        self.sandbox_pid: int | None = None
        self.chan = chan
        self.baselines: dict[str, dict] = {}  # a reference-only job's strong baselines
        self.recorder: Recorder | None = None  # a native candidate's, started ahead
        self.spare = rec  # forked while the judge waited for this job (record_ahead.spare)
        self.cached_plan: dict | None = None
        self.plan_key = ""

    # --- judging what comes back --------------------------------------------------------------
    def receive_outputs(self, header: dict, items: list) -> None:
        """Judges one `outputs` message; shared tensors are opened in place, released, and
        acknowledged, so the sandbox may go on (ipc.py)."""
        flags = self.card.flags
        shared = any(isinstance(t, self.ipc.Shared) for t in items)
        why = header.get("not_shared")
        if isinstance(why, str) and not any(f.startswith("outputs:bytes") for f in flags):
            flags.append(f"outputs:bytes ({why[:120]})")
        if shared:
            if self.counter is None:
                raise SandboxError("hacked", "shared GPU memory sent to a judge on the CPU")
            try:
                items = [
                    self.counter.open(t) if isinstance(t, self.ipc.Shared) else t for t in items
                ]
            except RuntimeError as e:
                raise SandboxError(
                    "runtime_error", f"could not open the candidate's shared outputs: {e}"[:300]
                ) from None
            if "outputs:ipc" not in flags:
                flags.append("outputs:ipc")
        # Under a lean plan the references are on the host: compared in chunks (compare.py).
        self.card.judge_outputs(header, items, self.ref.refs)
        if self.lean and header.get("run") == "timed":
            self.ref.refs.pop((header.get("case"), header.get("seed")), None)
        if shared:
            del items
            self.torch.cuda.synchronize()  # comparisons done before the sandbox may free
            self.chan.tell("ack")
        self.between_phases()

    # --- the whole evaluation -----------------------------------------------------------------
    def run(self) -> dict:
        """The evaluation's result. The sandbox's memory stays mapped until `release`, which
        the judge calls after answering: unmapping is driver work that waits on other
        processes' contexts, and nothing is read from the mappings after this returns."""
        try:
            t0 = time.monotonic()
            self.fork_recorder()
            if self.device.startswith("cuda") or self.job.device_memory_bytes is not None:
                too_big = self.ref.plan(*self.free_memory())
                if too_big:  # in one line, before any reference output exists
                    return self.result("runtime_error", too_big)
            bad = self.ref.build()
            if self.lean:
                self.card.flags.append(memory_flag(self.ref.memory))
            self.between_phases()
            self.seconds["reference"] = round(time.monotonic() - t0, 3)
            if bad:
                return self.result("runtime_error", bad)
            self.start_recording()
            if self.job.do_timing and (self.job.time_reference or self.job.reference_only):
                t = time.monotonic()
                self.card.reference_trials(self.ref.time())
                self.card.flags += self.ref.flags
                self.between_phases()
                self.seconds["reference_timing"] = round(time.monotonic() - t, 3)
            if self.job.reference_only:  # a run's baseline: no candidate, nothing else to do
                if self.job.do_timing and self.job.baselines:
                    from hipevolve.verifier.gpu.judge.strong import time_baselines

                    t = time.monotonic()
                    self.baselines = time_baselines(self.ref)
                    self.seconds["baselines"] = round(time.monotonic() - t, 3)
                return self.result("ok", "reference timed")
            if self.device.startswith("cuda"):
                self.trim_cache()
                self.between_phases()
            status, message = self.run_candidate()
            if self.job.side_by_side and self.job.baselines and status in ("ok", "suspect"):
                # A re-check: the strong baselines timed right after the candidate, on the
                # same inputs and clock (strong.py), for its verdict's side-by-side line.
                from hipevolve.verifier.gpu.judge.strong import time_baselines

                t = time.monotonic()
                self.baselines = time_baselines(self.ref)
                self.seconds["baselines"] = round(time.monotonic() - t, 3)
        finally:
            t = time.monotonic()
            killed = kill_group_except_self(self.chan.spared())
            self.seconds["sandbox_end"] = round(time.monotonic() - t, 3)
            # What the candidate left running; the sandbox itself may still be exiting.
            left = [pid for pid in killed if pid != self.sandbox_pid]
            if left:
                self.card.flags.append(f"killed:{len(left)}")
        return self.result(status, message)

    def free_memory(self) -> tuple[int, int]:
        """(bytes free for this evaluation, the device's total): the job's device_memory_bytes
        when it names them, else what the device has free now, what this judge's allocator
        holds unused, and the references it kept from its last job (this job reuses them, or
        they are dropped before its own are built: the plan counts them once, as its own)."""
        torch, told = self.torch, self.job.device_memory_bytes
        if not self.device.startswith("cuda"):
            return told or 0, told or 0
        free, total = torch.cuda.mem_get_info(self.device)
        if told is not None:
            return told, total
        unused = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        return free + unused + self.ref.kept.device_bytes(), total

    @property
    def lean(self) -> bool:
        return self.ref.memory is not None and self.ref.memory.lean

    def between_phases(self) -> None:
        """Under a lean plan, the memory this judge's allocator holds unused goes back to the
        device before the next phase (the sandbox's, or the reference timing's) needs it."""
        if self.lean and self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()

    def release(self) -> None:
        """Closes the mappings of the sandbox's shared memory and the judge's counter file."""
        if self.counter is not None:
            self.counter.close()

    def sandbox_job(self, plan: dict | None = None) -> SandboxJob:
        memory = self.ref.memory
        return SandboxJob.of(
            self.job,
            self.ref.sizes,
            self.sandbox_reserve(),
            plan,
            kept_calls=memory.kept_calls if memory is not None else 0,
        )

    # --- the launch plan, recorded ahead (record_ahead.py) -------------------------------------
    def fork_recorder(self) -> None:
        """A native candidate's recorder: the one forked while the judge waited, else one
        forked now (its start overlaps the reference's build). Another job leaves the spare to
        the group kill at its end."""
        if not self.job.reference_only and self.job.candidate.format == "native":
            self.recorder = self.spare or Recorder(self.chan.workdir + "-record", self.chan.zygote)

    def start_recording(self) -> None:
        """Hands the recorder its job once the reference's inputs exist (their stand-in specs),
        so recording overlaps the reference's timing; a plan recorded before is taken from the
        cache and the recorder is stopped unused."""
        from hipevolve.verifier.gpu.plan import input_specs

        job, rec = self.job, self.recorder
        if rec is None:
            return
        cases = {
            c.name: {
                "init": c.init,
                "inputs": input_specs(self.ref.refs[(c.name, job.seeds[0])][0]),
            }
            for c in job.cases
        }
        self.plan_key = plan_key(job, cases)
        self.cached_plan = recall(self.plan_key, job.candidate.library)
        if self.cached_plan is not None:
            rec.stop()
            return
        rec.send(RecordJob(reference=job.reference, candidate=job.candidate, cases=cases))

    def record_stage(self) -> dict:
        """A native candidate's launch plan, from a recorder process of its own (record.py):
        its model.py runs there, on stand-ins, and never in the process that is checked and
        timed. A refused forward is `hacked`, with what it did."""
        if self.cached_plan is not None:
            self.card.flags.append("plan:executor (cached)")
            return self.cached_plan
        rec = self.recorder
        if rec is None:
            raise RuntimeError("no recorder was started for a native candidate")
        plan = rec.plan(self.job.timeouts.load)
        self.seconds["record_ahead"] = round(rec.seconds_ahead(), 3)
        self.card.flags.append("plan:executor")
        remember(self.plan_key, plan, self.job.candidate.library)
        return plan

    def timed_refs(self, case: str, seed: int) -> None:
        """The reference's outputs on a timing input set whose outputs the executor sent
        (timed calls are checked at random), computed when first needed."""
        job, refs = self.job, self.ref.refs
        n = self.ref.sizes[case].timing_sets if case in self.ref.sizes else 0
        n = max(n, job.warmup + job.trials) if n else 0  # eager calls past the sets draw anew
        if (case, seed) in refs or not job.timing_seed <= seed < job.timing_seed + n:
            return
        from hipevolve.core import reference

        c = job.case(case)
        inputs = reference.build_inputs(
            self.ref.module, c.inputs, self.device, seed, draw_on_device=True
        )
        model = reference.build_model(self.ref.module, c.init, self.device, job.seeds[-1])
        with self.torch.no_grad():
            outs = reference.as_outputs(model(*inputs))
        if self.lean:  # on the host, as the check seeds' are (references.build)
            inputs = [t.cpu() for t in inputs if isinstance(t, self.torch.Tensor)]
            outs = [o.to("cpu", copy=True) for o in outs]
            del model
            refs[(case, seed)] = (inputs, outs)
        else:  # a timed call's check reads no inputs: the judge's next job may reuse these
            refs[(case, seed)] = ([], outs)
            self.ref.kept.offer(job, (case, seed), refs[(case, seed)])

    def trim_cache(self) -> None:
        """Gives the memory this judge holds free back to the device when it is much (the
        sandbox needs it); a smaller cache stays, so the comparisons and the next job allocate
        nothing new (each allocation is a driver call: see sandbox_reserve)."""
        torch = self.torch
        idle = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
        if idle > torch.cuda.get_device_properties(self.device).total_memory // 16:
            torch.cuda.empty_cache()

    def sandbox_reserve(self) -> int:
        """Device memory the sandbox takes in one block before the candidate loads and hands
        back to its caching allocator (sandbox.reserve): enough for the largest case's checked
        outputs (six kept, poison twice over), input copies and timing sets, so that checking
        and timing make no further device allocations and every output shared with this judge
        lies in one allocation, opened once (ipc.JudgeCounter). Each allocation and IPC
        mapping is a driver call that waits on the device contexts other processes create and
        destroy: on two busy H200s, opening and closing mappings took a quarter of the check."""
        if not self.device.startswith("cuda"):
            return 0
        if self.ref.memory is not None:
            return self.ref.memory.reserve_bytes  # the same sum, or 0 under a lean plan
        need = max(
            (
                10 * sum(s.poison_sizes) + (3 + s.timing_sets) * s.input_bytes
                for s in self.ref.sizes.values()
            ),
            default=0,
        )
        cap = self.torch.cuda.get_device_properties(self.device).total_memory // 4
        return min(need + RESERVE_SLACK, cap)

    def run_candidate(self) -> tuple[str, str]:
        job, timeouts, card = self.job, self.job.timeouts, self.card
        chan = self.chan
        mark = time.monotonic()
        stage = "start"
        try:
            plan = None
            if job.candidate.format == "native":
                stage = "record"
                plan = self.record_stage()
                mark = self._stage(stage, mark)
                stage = "start"
            elif plannable(job.candidate):  # KernelBench format: replayed (replay_kb.py)
                stage = "record"
                plan = record_kb_plan(self, mark + timeouts.load)
                card.flags.append(kb_flag(plan))
                mark = self._stage(stage, mark)
                stage = "start"
            else:  # load_inline built nowhere: its Python runs where it is checked and timed
                card.flags.append(
                    "plan:none (KernelBench format: less isolated than a native plan)"
                )
            chan.start(self.sandbox_job(plan), job.max_processes)
            self.sandbox_pid = chan.proc.pid
            ready, _, _ = chan.next("start", mark + timeouts.startup)
            card.flags += [f for f in ready.get("flags", []) if isinstance(f, str)][:10]
            if chan.zygote_failed:
                card.flags.append(f"zygote failed: {chan.zygote_failed[:120]}")
            mark, stage = self._stage(stage, mark), "load"
            chan.next("load", mark + timeouts.load)
            mark, stage = self._stage(stage, mark), "check"
            self.check_stage(chan, mark + timeouts.check)
            mark, stage = self._stage(stage, mark), "timing"
            if card.hacks or card.failed() or not job.do_timing:
                chan.tell("stop")
            else:
                told = time.perf_counter()  # the clock the channel stamps messages with
                chan.tell("time")
                self.timing_stage(chan, mark + timeouts.timing, told)
                self._stage(stage, mark)
        except SandboxError as e:
            self._stage(stage, mark)  # how long the stage ran before it was cut short
            if card.hacks:
                return "hacked", card.hacks[0]
            return e.status, e.message
        return card.verdict()

    def _stage(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.seconds[name] = round(now - since, 3)
        return now

    def check_stage(self, chan: Channel, deadline: float) -> None:
        while True:
            header, tensors, _ = chan.next("check", deadline)
            kind = header["kind"]
            if kind == "outputs":
                self.receive_outputs(header, tensors)
            elif kind == "case_checked":
                reuse = header.get("reuse") or []
                if reuse:
                    self.card.hacks.append(
                        f"{header.get('case')}: outputs of different calls share "
                        f"memory ({str(reuse[0])[:80]})"
                    )
            elif kind == "checked":
                return
            else:
                raise SandboxError("hacked", f"unexpected message {kind!r} in stage check")

    def timing_stage(self, chan: Channel, deadline: float, told: float) -> None:
        """Reads the timing reports. Each case's wall window runs from the moment the judge told
        the waiting sandbox to time (`told`) to the arrival of its report: an upper bound of its
        true duration however late a busy judge reads its messages, so an honest candidate is
        never flagged (a window from the arrival of `timing_start` could shrink to nothing)."""
        card = self.card
        started: set[str] = set()
        while True:
            header, tensors, at = chan.next("timing", deadline)
            kind = header["kind"]
            if kind == "timing_start":
                started.add(header["case"])
            elif kind == "timing_done" and header.get("case") in started:
                started.discard(header["case"])
                wall_us = (at - told) * 1e6
                card.judge_timing(
                    header["case"], header.get("trials"), header.get("windows"), wall_us
                )
                card.flags += timing_flags(header.get("flags"), card.flags)
                if header.get("threads", 0) > 1:
                    card.hacks.append(f"{header['case']}: a thread is still running after timing")
            elif kind == "outputs" and header.get("run") in ("post", "timed", "interleaved"):
                if header.get("run") == "timed":
                    self.timed_refs(str(header.get("case")), int(header.get("seed", -1)))
                self.receive_outputs(header, tensors)
            elif kind == "done":
                missing = [
                    c.name
                    for c in self.job.cases
                    if c.timed and "time_us" not in card.case_out[c.name]
                ]
                if missing:
                    raise SandboxError("hacked", f"no timing for case {missing[0]}")
                return
            else:
                raise SandboxError("hacked", f"unexpected message {kind!r} in stage timing")

    def result(self, status: str, message: str) -> dict:
        verdict = self.card.result(status, message, checked="check" in self.seconds)
        extra = {"baselines": self.baselines} if self.baselines else {}
        return verdict | {"seconds": self.seconds, "sandbox_pid": self.sandbox_pid} | extra


def memory_flag(plan: MemoryPlan) -> str:
    """The result's flag for an evaluation run under a lean memory plan (memplan.py)."""
    sets = ", ".join(f"{n} {'set' if n == 1 else 'sets'}" for n in plan.timing_sets.values())
    return (
        f"memory:lean (references on the host; outputs of {plan.kept_calls} check calls kept "
        f"at once; timing inputs: {sets}; planned peak {plan.peak_bytes / (1 << 30):.1f} GiB)"
    )[:300]


def timing_flags(flags: Any, have: list[str]) -> list[str]:  # noqa: ANN401 (from the sandbox)
    """How the sandbox timed a case (timing.py: `timing:graph`, or `timing:eager (not
    capturable: ...)`), new to the result's flags; anything else it claims is dropped."""
    if not isinstance(flags, list):
        return []
    new = [f[:300] for f in flags[:2] if isinstance(f, str) and f.startswith("timing:")]
    return [f for f in dict.fromkeys(new) if f not in have]
