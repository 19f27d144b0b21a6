"""The recorder started ahead: a native candidate's launch plan recorded beside the reference.

Recording (record.py) needs only the candidate and the stand-in specs of each case's inputs, and
those exist once the judge has built the reference's inputs. Run after the reference's timing,
it cost about 0.2 s of every evaluation on an H100 (fork, confine, import model.py, record),
all of it on the evaluation's critical path. So the judge (worker.py) forks the recorder from
its zygote while it waits for the job, next to the job's sandbox (`spare`; or, where none
could be forked then, as the job arrives), hands it the record job as soon as the reference's
inputs exist (`send`: recording overlaps the reference's timing), and reads the plan only when
the candidate's sandbox needs it (`plan`).

What stays as it was:
- The recorder is the same process as before: forked by the zygote, confined (Landlock,
  seccomp, no device, the "cpu" device), in a folder of its own, in the judge's process group,
  killed once its plan is read or the evaluation ends (the judge's group kill). Nothing it
  sends is trusted: the executor validates every plan it runs (plan.validate).
- The recording's time limit is the load stage's, counted from the moment the job was sent; a
  plan that arrives later is a timeout, however late the judge reads it.
- A plan recorded before (the judge's cache at the bottom of this module: keyed by model.py,
  the launchers' signatures, the reference and the cases) is not recorded again; the recorder
  forked for it is killed unused, as is a spare the job does not need (a KernelBench-format
  candidate): a recorder that never got a job has run no candidate code. The executor
  validates a cached plan as it does a new one.

What changes, and why it is safe:
- The candidate's model.py runs while the judge times the reference. Its process has no device
  context and cannot reach the judge, so it can touch the reference's timing only through the
  CPU it uses (a model.py that spins until its timeout). Inside an evaluation the reference's
  timing is a check of the machine's noise, never a term of the fitness (DESIGN.md, Fitness:
  every speedup's denominator is the run's stored baseline).

Imports the standard library and hipevolve.verifier.gpu.judge.channel (hipevolve.runtime when a
plan's key is computed) only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from hipevolve.verifier.gpu.judge.channel import Channel, SandboxError
from hipevolve.verifier.gpu.refusal import refused

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import RecordJob, WorkerJob
    from hipevolve.verifier.gpu.sandbox.zygote import Zygote


class Recorder:
    """One recorder process, forked when made, given its job by `send`, read by `plan`."""

    def __init__(self, workdir: str, zygote: Zygote | None) -> None:
        self.line = Channel(workdir, "cpu", zygote)  # forked now
        self.sent_at: float | None = None  # time.perf_counter when the job was sent
        self.stopped = False

    def send(self, job: RecordJob) -> None:
        self.line.tell(self.line.given(job).to_json())
        self.sent_at = time.perf_counter()

    def plan(self, limit_s: float) -> dict:
        """The recorded plan (the message's "plan"), read as soon as it has come. Raises
        SandboxError: timeout past `limit_s` from `send`, hacked for a refused forward or an
        unexpected message, runtime_error for a recorder that crashed."""
        if self.sent_at is None:
            raise RuntimeError("the recorder was given no job")
        # Messages are stamped with perf_counter as they arrive; waiting at least a moment
        # reads a plan that came long ago, while the reference was timed.
        left = max(self.sent_at + limit_s - time.perf_counter(), 0.5)
        deadline = time.monotonic() + left
        try:
            self.line.next("record", deadline)  # ready
            header, _, at = self.line.next("record", deadline)
        finally:
            self.stop()
        if at - self.sent_at > limit_s:
            raise SandboxError("timeout", "timeout in stage record: the candidate was killed")
        if header["kind"] == "refused":
            raise SandboxError(*refused("launch_plan", str(header.get("message", ""))))
        if header["kind"] != "plan" or not isinstance(header.get("plan"), dict):
            raise SandboxError("hacked", f"unexpected message {header['kind']!r} from the recorder")
        return header["plan"]

    def seconds_ahead(self) -> float:
        """Seconds from sending the job until now: how long recording ran beside the rest."""
        return time.perf_counter() - self.sent_at if self.sent_at is not None else 0.0

    def stop(self) -> None:
        """Kills the recorder (read, unused, or the evaluation ended) and reaps it."""
        if self.stopped:
            return
        self.stopped = True
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(self.line.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.line.proc.wait(timeout=5)


def spare(sandbox_dir: str, device: str, zygote: Zygote | None) -> Recorder | None:
    """A recorder forked while the judge waits for its next job (a fork from the zygote took
    about 0.09 s of the judge's time, measured on 2 CPU cores), next to that job's sandbox.
    Only a judge on a GPU gets one: native candidates run there. None when no process can be
    had now (the judge forks one when the job needs it)."""
    if not device.startswith("cuda"):
        return None
    try:
        return Recorder(sandbox_dir + "-record", zygote)
    except OSError:
        return None


# --- launch plans recorded before: a candidate whose model.py, launchers and cases were recorded
# once is not recorded again (evolution mostly changes kernel.hip, not model.py) ---------------
_PLANS: dict[str, tuple[dict, str | None]] = {}  # key -> (plan, library sha256 if it ran any)
PLANS_KEPT = 512


def plan_key(job: WorkerJob, cases: dict) -> str:
    """What a plan depends on: model.py, the launchers' signatures (not kernel.hip's kernels),
    the reference and every case's init arguments and input specs."""
    import hashlib

    from hipevolve.runtime import launcher_signatures

    cand = job.candidate
    with open(cand.model, "rb") as f:
        model = f.read()
    with open(cand.source) as f:
        signatures = launcher_signatures(f.read())
    h = hashlib.sha256(model)
    h.update(json.dumps([signatures, str(job.reference), cases], sort_keys=True).encode())
    return h.hexdigest()


def recall(key: str, library: Any) -> dict | None:  # noqa: ANN401 (a path)
    """The plan recorded before under `key`, if its recording ran no launcher on the host or
    ran this very library's."""
    cached = _PLANS.get(key)
    if cached is not None and cached[1] in (None, _sha256(library)):
        return cached[0]
    return None


def remember(key: str, plan: dict, library: Any) -> None:  # noqa: ANN401 (a path)
    """Keeps `plan` under `key`, tied to the library's sha256 when a launcher ran on the host
    while it was recorded (its answer is baked into the plan)."""
    if len(_PLANS) >= PLANS_KEPT:
        _PLANS.pop(next(iter(_PLANS)))
    _PLANS[key] = (plan, _sha256(library) if _host_calls(plan) else None)


def _sha256(path: Any) -> str:  # noqa: ANN401
    import hashlib

    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _host_calls(plan: dict) -> bool:
    """Whether a launcher ran on the host while it was recorded (a workspace query): its
    answer, baked into the plan, came from this library."""
    for case in plan.get("cases", {}).values():
        devices = [b.get("device") for b in case.get("buffers", [])]
        for step in case.get("steps", []):
            bufs = [a["ref"]["buf"] for a in step.get("args", []) if "ref" in a]
            if bufs and all(b.startswith("a") and devices[int(b[1:])] == "cpu" for b in bufs):
                return True
    return False
