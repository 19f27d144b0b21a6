"""The judge: `python -m hipevolve.verifier.gpu.worker --result-fd N [--device cuda]`.

A judge process scores candidates one at a time; the controller (isolate.py) spawns it in its
own process group with an allowlisted environment, writes one JSON job per line on stdin and reads
one JSON result line per job from fd N. For each job the judge builds every reference output
(keeping those of the seeds its next job shares: references.py) and times the reference before
the candidate exists, then runs the candidate in a fresh process (sandbox.py, in a fresh folder)
that it watches, times out and kills, and decides the status from what comes back. It serves
another job only after one that ended ok, incorrect or suspect, with its device context still
sound, and at most JOBS_PER_JUDGE. Every number the tool reports comes from here.

What it protects against (FAULTS.md):
- hangs in host code or kernels (stage timeouts here, a group kill in the controller), crashes
  (SIGSEGV, SIGABRT, os._exit) and device errors: all recorded, never a pass (1-3);
- unwritten or stale outputs: the allocator is poisoned with NaN before each call, every call
  runs twice on fresh input copies and both must pass; outputs sharing memory across calls,
  aliasing an input, or mutated inputs fail (5, 11);
- out-of-bounds writes next to an input: every input copy sits between canary regions that
  must come back intact (4). Writes past an output's end are caught only when they land in an
  input's canary or corrupt values: the candidate allocates its own outputs;
- fork bombs (no new processes at all unless the candidate compiles with load_inline, then
  RLIMIT_NPROC and a process-count watchdog), OOM (resource exhaustion), a gigabyte on stdout
  (only the first 64 KiB kept, drained by threads so nothing blocks) (6, 7);
- writes outside the sandbox folder, TCP sockets, signals to or ptrace of other processes, and
  API keys: Landlock, seccomp and an allowlisted environment (8);
- wrong shape, dtype, strides, device, NaN/Inf, lazy tensor subclasses (9, 10, 14);
- reaching the expected outputs: they never exist in the candidate's process, the judge is not
  dumpable, and the result channel is closed in the sandbox (12, 19);
- caching by input identity and replaying warm-up answers: several seeds, the last one never
  shown to agents, all inputs alive at once, a distinct input set per timed trial, and one
  more checked call after timing (13, 15, 20);
- patched timers and statistics: the sandbox captured its timer before the candidate was
  imported, statistics are computed in the judge (scorecard.py) from raw trials, and the
  trials must fit inside the wall time the judge measured itself (17); threads left running
  are `hacked`; work on another stream is inside the window because timing synchronises the
  whole device (18);
- speedups beyond the roofline or above `suspect_speedup` are `suspect`, not crowned (21).

What it does not protect against:
- the task's own code: the reference and, in a run's reference-only job, the strong baselines
  the task names (TaskSpec.baselines: torch.compile of the reference, or a module such as FLA's
  kernels) run in the judge itself, as trusted code shipped with the task; never a candidate's;
- native or ctypes code in the candidate process can rewrite the sandbox's own memory: it can
  forge timing messages and metadata (not output values, which the judge compares). The
  wall-clock cross-check, the roofline and 10x gates and the static checker are the mitigations;
- Python code in the candidate cannot reach the sandbox's objects: a native candidate's
  model.py and a KernelBench file both run only in a recorder process, and the sandbox
  replays their plans (record.py / executor.py, record_kb.py / replay_kb.py); only a
  load_inline file built nowhere (a job with no extension folder) still runs its Python in the
  sandbox, where it can reach the sandbox's objects through gc (flag `plan:none`); a
  KernelBench extension's C++ runs in the sandbox, as native code above;
- reading files: Landlock here restricts writes only; the reference outputs are never in a file,
  but anything else the user can read, the candidate can read (a judge removes each sandbox's
  folder before the next sandbox starts, so nothing one candidate writes reaches the next);
- where Landlock, seccomp or RLIMIT_NPROC are missing (other kernels, other architectures, root
  for RLIMIT_NPROC) the layer is off; the result's flags say which;
- a candidate that compiles with load_inline may start processes, bounded only by
  RLIMIT_NPROC and the watchdog's poll (which a fast fork bomb can outrun when running as root);
- work moved off the timed stream is flagged only when the device stays busy at least 50 us and
  twice the timed time past the timed stream; a smaller escape shows as a speedup, which the
  roofline and 10x gates catch when it is large;
- outputs come by CUDA IPC (ipc.py): a forged description naming more memory than the
  allocation holds makes the judge read out of bounds; its own context faults and the
  evaluation ends as a runtime error, never a pass;
- GPU side effects beyond the process: another process's device memory is protected by the
  driver, not by us; a kernel that hangs the GPU itself (not just its context) needs a reset.
- under a lean memory plan (memplan.py: a case too large for today's plan, flag `memory:lean`)
  a case's check calls no longer hold every input set and output at once: outputs sharing
  memory are found only between calls at most `kept_calls` apart, and with one timing set each
  timed call's inputs are drawn afresh before it (still none seen by another call).

The running sandbox, its pipe and drained output, and the group kill live in channel.py. The
job is job.WorkerJob, read once and never changed; one evaluation is three parts: `References`
(reference_side.py: the reference's side, before the candidate exists), `Judge` (the
candidate's side: its sandbox, stage by stage) and `Scorecard` (scorecard.py: what the
sandbox's reports add up to).

Imports torch, numpy, the standard library, hipevolve.core.reference and
hipevolve.verifier.gpu.{channel,compare,confine,ipc,job,kb_stage,record_ahead,reference_side,
references,scorecard,strong,timing,wire,zygote}
only (no pydantic).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from typing import TYPE_CHECKING, Any

from hipevolve.verifier.gpu import confine
from hipevolve.verifier.gpu.channel import Channel, SandboxError, kill_group_except_self
from hipevolve.verifier.gpu.job import RecordJob, SandboxJob, WorkerJob, on_card
from hipevolve.verifier.gpu.kb_stage import kb_flag, plannable, record_kb_plan
from hipevolve.verifier.gpu.record_ahead import Recorder, plan_key, recall, remember, spare
from hipevolve.verifier.gpu.reference_side import References
from hipevolve.verifier.gpu.scorecard import Scorecard
from hipevolve.verifier.gpu.zygote import Zygote

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.memplan import MemoryPlan
    from hipevolve.verifier.gpu.references import Kept

RESERVE_SLACK = 64 << 20  # the candidate's own weights and scratch, beyond what the case needs


class Judge:
    """One evaluation: the reference's side first (References), then the candidate in its
    sandbox, stage by stage, each report judged by the Scorecard."""

    def __init__(
        self, job: WorkerJob, chan: Channel, kept: Kept | None = None, rec: Recorder | None = None
    ) -> None:
        import torch

        from hipevolve.verifier.gpu import ipc, references

        self.torch, self.ipc = torch, ipc
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
            if self.job.do_timing:
                t = time.monotonic()
                self.card.reference_trials(self.ref.time())
                self.card.flags += self.ref.flags
                self.between_phases()
                self.seconds["reference_timing"] = round(time.monotonic() - t, 3)
            if self.job.reference_only:  # a run's baseline: no candidate, nothing else to do
                if self.job.do_timing and self.job.baselines:
                    from hipevolve.verifier.gpu.strong import time_baselines

                    t = time.monotonic()
                    self.baselines = time_baselines(self.ref)
                    self.seconds["baselines"] = round(time.monotonic() - t, 3)
                return self.result("ok", "reference timed")
            if self.device.startswith("cuda"):
                self.trim_cache()
                self.between_phases()
            status, message = self.run_candidate()
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
        when it names them, else what the device has free now and this judge's allocator holds
        unused."""
        torch, told = self.torch, self.job.device_memory_bytes
        if not self.device.startswith("cuda"):
            return told or 0, told or 0
        free, total = torch.cuda.mem_get_info(self.device)
        if told is not None:
            return told, total
        return free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated(), total

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
            self.job, self.ref.sizes, self.sandbox_reserve(), plan,
            kept_calls=memory.kept_calls if memory is not None else 0,
        )  # fmt: skip

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
                card.flags.append("plan:none (KernelBench format: less isolated than a native plan)")
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


REUSABLE = ("ok", "incorrect", "suspect")  # the judge's own state cannot have been harmed
JOBS_PER_JUDGE = 64  # then a fresh judge: a bounded life for anything a long one accumulates


def healthy(torch, device: str) -> bool:  # noqa: ANN001
    """The judge's device context still works (a fault reading shared memory is sticky)."""
    if not device.startswith("cuda"):
        return True
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device=device).add_(1).item()
    except RuntimeError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description="hipevolve judge (evaluations, one at a time)")
    parser.add_argument("--result-fd", type=int, required=True)
    parser.add_argument("--device", default="cpu", help="cuda: create the context before the job")
    parser.add_argument("--workdir", required=True, help="this judge's folder")
    args = parser.parse_args()
    os.set_inheritable(args.result_fd, False)  # the sandbox must never hold it (FAULTS 19)
    confine.set_not_dumpable()
    confine.become_subreaper()
    # The zygote starts first, so its torch import overlaps ours. Every evaluation gets a fresh
    # sandbox process, forked by the zygote, in a fresh, empty folder; it waits for its job.
    zygote = Zygote.start()
    import torch

    from hipevolve.verifier.gpu import references

    # The reference's inputs and outputs, kept for the judge's next job of the same task.
    kept = references.Kept()
    card = ""  # the GPU's name: the roofline gate holds at its peaks (job.on_card)
    if args.device.startswith("cuda"):
        torch.cuda.init()
        torch.zeros(1, device=args.device)
        card = torch.cuda.get_device_name(args.device)
    sandbox_dir = os.path.join(args.workdir, "sandbox-0")
    chan: Channel | None = Channel(sandbox_dir, args.device, zygote)
    rec = spare(sandbox_dir, args.device, zygote)
    # A judge serves jobs, one JSON line each on stdin, until stdin closes or a job leaves it in
    # doubt: it answers each with one JSON line on the result pipe, whose "reusable" says
    # whether it waits for another. Reusing a judge saves creating and destroying one device
    # context per evaluation: driver work that all the GPUs of a machine wait on in turn.
    # What the next job needs and this answer does not (closing the last sandbox's mappings,
    # removing its folder, forking the next sandbox) comes after the answer: the slot sends
    # its next job to another warm judge meanwhile.
    for served in range(1, JOBS_PER_JUDGE + 1):
        line = sys.stdin.readline()  # a standby judge waits here, torch and context ready
        if not line:
            break
        judge: Judge | None = None
        try:
            job = on_card(WorkerJob.from_json(line), card)
            if job.device == "cpu":
                torch.set_num_threads(1)  # judge and sandbox share the cores: no spinning pools
            if chan is None:  # the sandbox after the last answer could not be started
                chan = Channel(sandbox_dir, args.device, zygote)
            judge = Judge(job, chan, kept, rec)
            result = judge.run()
        except BaseException as e:  # noqa: BLE001 (the judge itself failing is a result too)
            kill_group_except_self(zygote.spared())
            result = {
                "status": "runtime_error",
                "cases": [],
                "flags": ["judge-error"],
                "message": f"judge error: {type(e).__name__}: {str(e)[:300]}",
            }
        # A judge that imported a baseline's libraries (Triton, FLA, TileLang) or ran
        # torch.compile keeps their caches and threads: it judges no candidate after that.
        timed_baselines = judge is not None and bool(judge.job.baselines)
        reusable = (
            result["status"] in REUSABLE
            and served < JOBS_PER_JUDGE
            and not timed_baselines
            and healthy(torch, args.device)
        )
        result["reusable"] = reusable
        answer = memoryview(json.dumps(result).encode() + b"\n")
        while answer:
            answer = answer[os.write(args.result_fd, answer) :]
        if judge is not None:
            judge.release()
        if not reusable:
            break
        if args.device.startswith("cuda"):
            # Back in the pool, the judge keeps its context and kept references, not its cache:
            # four judges of one slot each holding a GDN job's cache (up to a sixteenth of the
            # device) left the next judge no room for its 512 MiB flush on an 80 GB H100.
            torch.cuda.empty_cache()
        # The next candidate's sandbox starts now, in a new folder; nothing passes to it.
        shutil.rmtree(sandbox_dir, ignore_errors=True)
        shutil.rmtree(sandbox_dir + "-record", ignore_errors=True)  # its recorder's
        sandbox_dir = os.path.join(args.workdir, f"sandbox-{served}")
        try:
            chan = Channel(sandbox_dir, args.device, zygote)
        except OSError:  # no process or folder to be had now: tried again with the next job
            chan = None
        rec = spare(sandbox_dir, args.device, zygote)
    os.close(args.result_fd)
    zygote.close()
    os._exit(0)


if __name__ == "__main__":
    main()
