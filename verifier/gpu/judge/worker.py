"""The judge: `python -m hipevolve.verifier.gpu.judge.worker --result-fd N [--device cuda]`.

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
- writes outside the sandbox folder, reads outside it and Python's and the system's folders
  (the judge hands the sandbox copies of its job's files: channel.hand_over), TCP sockets,
  signals to or ptrace of other processes, and API keys: Landlock, seccomp and an allowlisted
  environment (8, 12);
- state one candidate leaves for the next: a fresh folder and a private /dev/shm per sandbox,
  and no SysV IPC, POSIX message queue or keyring object can be made (41);
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
- times beyond the roofline, or past a case's `fastest_us` (the run's strongest baseline over
  its margin), are `suspect`, not crowned; a speedup over the reference above `suspect_speedup`
  only on a case with neither bound (21).

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
- reading files: a candidate still reads what Python and the system hold (site-packages, /usr,
  /opt, /proc, /sys): nothing of the user's, but it can list a source checkout that is on
  sys.path; where Landlock is missing it reads anything the user can;
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
(reference_side.py: the reference's side, before the candidate exists), `Judge` (judge.py: the
candidate's side, its sandbox stage by stage) and `Scorecard` (scorecard.py: what the
sandbox's reports add up to).

Imports torch, numpy, the standard library, hipevolve.core.reference and
hipevolve.verifier.gpu.{confine,ipc,job,memplan,plan,plan_kb,timing,wire}, the judge's own
modules (hipevolve.verifier.gpu.judge) and the zygote's handle (sandbox.zygote) only (no pydantic).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys

from hipevolve.verifier.gpu import confine
from hipevolve.verifier.gpu.job import WorkerJob, on_card
from hipevolve.verifier.gpu.judge.channel import Channel, kill_group_except_self
from hipevolve.verifier.gpu.judge.judge import Judge
from hipevolve.verifier.gpu.judge.record_ahead import spare
from hipevolve.verifier.gpu.sandbox.zygote import Zygote

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

    from hipevolve.verifier.gpu.judge import references

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
        # The job's references past the kept ones, its timed calls' outputs and the rest of
        # the job go now, not when the next job replaces them.
        judge = None
        if not reusable:
            break
        if args.device.startswith("cuda"):
            # Back in the pool, the judge keeps its context and kept references, not its cache:
            # four judges of one slot each holding a GDN job's cache (up to a sixteenth of the
            # device) left the next judge no room for its 512 MiB flush on an 80 GB H100.
            gc.collect()  # what only a cycle still holds
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
