"""The sandbox process: forked for the judge by its zygote (zygote.py), or spawned by the judge
as `python -m hipevolve.verifier.gpu.sandbox.sandbox_process MSG_FD WORKDIR DEVICE`. It confines
itself, creates its device context and loads the check's kernels before its job exists, reads
the job, and runs it: a recorder's (record.py, record_kb.py), or a candidate's in a Sandbox
(sandbox.py: what checking and timing one candidate is), an Executor (executor.py) or a
KbExecutor (replay_kb.py); anything raised becomes an `error` message to the judge. It leaves
with os._exit, so atexit handlers and lingering threads never run past the end.

Imports what sandbox.py imports (no pydantic).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

from hipevolve.verifier.gpu import confine
from hipevolve.verifier.gpu.job import SandboxJob
from hipevolve.verifier.gpu.sandbox.sandbox import CANARY, GUARD, Sandbox, first_line


def reserve(torch, device: str, nbytes: int) -> None:  # noqa: ANN001
    """Takes `nbytes` of device memory in one allocation and frees it into the caching
    allocator, which then serves the check and timing stages from it
    (judge.Judge.sandbox_reserve)."""
    if nbytes > 0:
        with contextlib.suppress(RuntimeError):  # short of memory: allocate as the run goes
            block = torch.empty(nbytes, dtype=torch.uint8, device=device)
            del block


def load_kernels(torch, device: str) -> None:  # noqa: ANN001
    """Runs, once and small, the kernels every check runs (drawing inputs in the usual float
    types, poison and canary fills, the canary test and its read back), before the job arrives.
    CUDA loads a kernel when it is first launched (lazy loading), and each sandbox is a fresh
    process: launched first during the check, the canary test took 38-43 ms of each softmax
    evaluation on an H200; loaded here, all of a check's canary tests take 3-4 ms
    (bench/scaling.py, docs/SCALING.md). The global random state is left as it was."""
    draws = torch.Generator(device=device)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        torch.randn(64, dtype=dtype, device=device, generator=draws)
    buf = torch.empty(2 * GUARD, dtype=torch.uint8, device=device)
    buf.fill_(CANARY)
    bool((buf[:GUARD] == CANARY).all())
    buf.zero_()


def record(data: dict, out, flags: list[str]) -> None:  # noqa: ANN001
    """A candidate's recorder (record.py for a native one, record_kb.py for a KernelBench one):
    its Python runs here, and nothing else of the evaluation does."""
    from hipevolve.verifier.gpu import wire
    from hipevolve.verifier.gpu.job import RecordJob
    from hipevolve.verifier.gpu.sandbox import record as recorder

    flags.append(confine.confine_syscalls(False))
    wire.write_message(out, "ready", [], flags=flags, pid=os.getpid())
    send = lambda kind, **f: wire.write_message(out, kind, [], **f)  # noqa: E731
    if data.get("candidate", {}).get("format") == "kernelbench":
        from hipevolve.verifier.gpu.sandbox import record_kb

        record_kb.record_job(data, send)
    else:
        recorder.record_job(RecordJob.from_dict(data), out, send)
    out.flush()


def _error_fields(e: BaseException, torch) -> dict:  # noqa: ANN001
    # torch's CPU allocator raises a plain RuntimeError when the address space limit is hit.
    oom = (
        isinstance(e, MemoryError)
        or (torch is not None and isinstance(e, torch.cuda.OutOfMemoryError))
        or (isinstance(e, RuntimeError) and "can't allocate memory" in str(e))
    )
    line = first_line(e)
    found = {"message": f"resource exhaustion: {line}" if oom else line, "oom": oom}
    rule = getattr(e, "rule", None)  # a rule's refusal (verifier/gpu/refusal.py), not a crash
    if isinstance(rule, str):
        found["rule"] = rule
        found["message"] = (str(e).strip().splitlines() or [""])[0][:300]
    return found


def main() -> None:
    """argv: MSG_FD WORKDIR DEVICE: a sandbox spawned as a new Python (the judge's fallback
    when its zygote cannot fork one, zygote.py)."""
    serve(int(sys.argv[1]), sys.argv[2], sys.argv[3], forked=False)


def serve(msg_fd: int, workdir: str, device: str, forked: bool) -> None:
    """Confines this process, creates its device context and loads the check's kernels
    (load_kernels), waits for its job, runs it and exits. Starts before its job exists, so the
    judge's next evaluation finds it ready. In a process forked from the zygote torch is
    imported already; in a spawned one it is imported here, after confine_process."""
    # CUDA's driver writes under the process's own /proc entry while it initialises (measured on
    # an H200: without it cudaGetDeviceCount fails with error 304); "/proc/self" resolves to
    # this process's folder when the rule is made, so no other process's entry becomes writable.
    flags = confine.confine_process([workdir, "/dev", "/proc/self"])
    flags.append("sandbox:forked" if forked else "sandbox:spawned")
    out = os.fdopen(msg_fd, "wb")
    torch = None
    stage = "start"
    try:
        import torch

        if device.startswith("cuda"):
            torch.cuda.init()
            torch.zeros(1, device=device)
            load_kernels(torch, device)
        else:
            torch.set_num_threads(1)  # judge and sandbox share the cores: no spinning pools
        data = json.loads(sys.stdin.readline())
        if not data:
            os._exit(0)  # the judge needs no candidate run (a bad reference)
        if data.get("record"):
            stage = "record"
            record(data, out, flags)
            os._exit(0)
        job = SandboxJob.from_dict(data)
        if device.startswith("cuda"):
            reserve(torch, device, job.reserve_bytes)
        if job.candidate.format == "native":
            from hipevolve.verifier.gpu.sandbox.executor import Executor

            box: Sandbox = Executor(job, out)
        elif job.plan is not None:  # KernelBench format, recorded (plan_kb.py)
            from hipevolve.verifier.gpu.sandbox.replay_kb import KbExecutor

            box = KbExecutor(job, out)
        else:
            box = Sandbox(job, out)
        flags.append(confine.confine_syscalls(job.allow_processes))
        if not job.allow_processes:
            flags.append("processes:denied")
        box.send("ready", flags=flags, pid=os.getpid())
        stage = "load"
        box.load()
        box.send("loaded")
        stage = "check"
        box.check()
        if sys.stdin.readline().strip() == "time":
            stage = "timing"
            box.time_cases()
    except BaseException as e:  # noqa: BLE001 (everything the candidate raises is a result)
        from hipevolve.verifier.gpu import wire

        with contextlib.suppress(BaseException):  # else the judge sees the pipe close
            wire.write_message(out, "error", [], stage=stage, **_error_fields(e, torch))
    try:
        out.flush()
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
