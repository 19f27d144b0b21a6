"""The judge's record stage for a KernelBench-format candidate: its plan, from a recorder of its own.

The judge (worker.py) asks its zygote for one more process on the job's device, hands it the
file, the reference and each case's stand-in specs (no seed, no data), and reads back one plan
(plan_kb.py) or a refusal. The candidate's Python never runs anywhere else: the sandbox that is
checked and timed replays the plan (replay_kb.py).

Under a kernels-only job (the pipeline's) a plan whose forward computes with PyTorch (aten ops
outside plan_kb.MOVES_DATA) is hacked: the screen's rule, on what the forward really did, where
a name laundered past the screen cannot hide.

Imports the standard library and hipevolve.verifier.gpu.{judge.channel,plan,plan_kb} only (no
pydantic).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from typing import Any

from hipevolve.verifier.gpu.judge.channel import Channel, SandboxError, hand_over
from hipevolve.verifier.gpu.plan_kb import computes
from hipevolve.verifier.gpu.refusal import refused


def plannable(candidate: Any) -> bool:  # noqa: ANN401 (a job.CandidateJob)
    """A KernelBench file gets a plan unless its load_inline was built nowhere (it would have
    to compile inside its sandbox: worker-level jobs with no extension folder)."""
    return candidate.format == "kernelbench" and not candidate.may_start_processes()


def record_kb_plan(judge: Any, deadline: float) -> dict:  # noqa: ANN401 (a worker.Judge)
    """The candidate's plan. A refused forward is `rejected` (or `hacked` where what it did can
    only be a hack), with the recorder's one-line reason and its fix (refusal.py's rules)."""
    from hipevolve.verifier.gpu.plan import input_specs

    job = judge.job
    cases = {
        c.name: {
            "init": c.init,
            "inputs": input_specs(judge.ref.refs[(c.name, job.seeds[0])][0]),
            "draw": c.inputs,
        }
        for c in job.cases
    }
    rec = Channel(judge.chan.workdir + "-record", job.device, judge.chan.zygote)
    judge.sandbox_pid = rec.proc.pid  # the process that runs the candidate's Python
    try:
        reference, candidate = hand_over(rec.workdir, job.reference, job.candidate)
        data = {
            "record": True,
            "reference": str(reference),
            "candidate": candidate.resolved(),
            "device": job.device,
            "cases": cases,
        }
        rec.tell(json.dumps(data))
        rec.next("record", deadline)  # ready
        header, _, _ = rec.next("record", deadline)
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(rec.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            rec.proc.wait(timeout=5)
    if header["kind"] == "refused":
        rule = "kb_plan_hack" if header.get("hacked") is True else "kb_plan"
        status, message = refused(rule, str(header.get("message", "")))
        raise SandboxError(status, message[:400])
    if header["kind"] != "plan" or not isinstance(header.get("plan"), dict):
        raise SandboxError("hacked", f"unexpected message {header['kind']!r} from the recorder")
    plan = header["plan"]
    if job.kernels_only:
        found = [
            n
            for c in (plan.get("cases") or {}).values()
            if isinstance(c, dict)
            for n in computes(c)
        ]
        if found:
            ops = ", ".join(f"aten.{n}" for n in dict.fromkeys(found))
            status, message = refused(
                "kernels_only",
                f"the forward computes {ops} with PyTorch outside its kernels: a KernelBench "
                "candidate's forward may only allocate, view, copy and call its extension",
            )
            raise SandboxError(status, message[:400])
    return plan


def kb_flag(plan: dict) -> str:
    """The verdict's flag: how isolated the replayed candidate is (replay_kb.py)."""
    ext = any(
        s.get("op") == "ext" for c in plan.get("cases", {}).values() for s in c.get("steps", [])
    )
    if ext:
        return (
            "plan:kb-executor (KernelBench format: its Python ran only in a recorder; its "
            "extension's C++ runs beside the checks and the timer)"
        )
    return (
        "plan:kb-executor (KernelBench format: its Python ran only in a recorder; its aten "
        "ops are replayed)"
    )
