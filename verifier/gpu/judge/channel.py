"""The judge's line to the running sandbox: its process, message pipe, drained output, and kill.

The judge (worker.py) starts one Channel per evaluation, as soon as the one before has ended,
so the sandbox has its device context when the job comes; its zygote forks the sandbox with
torch imported (zygote.py). Messages arrive on a reader thread stamped with
the judge's perf_counter; stdout and stderr are drained by threads, keeping only the first
KEEP_OUTPUT bytes, so a candidate writing gigabytes never blocks (FAULTS 7). A stage that times
out, a sandbox that ends early or sends garbage becomes a SandboxError.

Imports the standard library and hipevolve.verifier.{confine,wire,zygote} only (the GPU worker
stays free of pydantic).
"""

from __future__ import annotations

import contextlib
import dataclasses
import getpass
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hipevolve.verifier.gpu import confine
from hipevolve.verifier.gpu.refusal import RULES, refused
from hipevolve.verifier.gpu.sandbox.zygote import Forked, Zygote, ZygoteError

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import CandidateJob, SandboxJob

Job = TypeVar("Job")  # a SandboxJob or a RecordJob: a reference file and a candidate

KEEP_OUTPUT = 64 << 10
GRACE_S = 2.0  # for a sandbox that closed its channel to finish exiting


class SandboxError(Exception):
    """The candidate process ended a stage early: status, message, stage."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def sandbox_error(header: dict, stage: str) -> SandboxError:
    """The error a sandbox reported: a rule's refusal where it names one (refusal.py: the
    recorder's or the executor's, raised outside a plan's cases), else a runtime_error."""
    message = f"{header.get('message', '')} (stage {header.get('stage', stage)})"
    rule = header.get("rule")
    if isinstance(rule, str) and rule in RULES:
        return SandboxError(*refused(rule, message))
    return SandboxError("runtime_error", message)


def _drain(stream, keep: bytearray) -> None:  # noqa: ANN001
    """Reads a pipe to its end, keeping the first KEEP_OUTPUT bytes: the writer never blocks."""
    while True:
        chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
        if not chunk:
            return
        room = KEEP_OUTPUT - len(keep)
        if room > 0:
            keep += chunk[:room]


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _reap_children() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def leads_group() -> bool:
    """Whether this process leads its process group, as a judge does (isolate.py starts it in
    a session of its own)."""
    return os.getpgid(0) == os.getpid()


def kill_group_except_self(spare: frozenset[int] = frozenset()) -> list[int]:
    """SIGKILLs every other process of this process group but `spare` (the judge's zygote)
    until none is left, and reaps. Only a process that leads its group does: anywhere else (a
    test driving a Channel in its own process) the group is its caller's, a shell and a test
    runner among them, and this kills nothing."""
    if not leads_group():
        return []
    me, killed = os.getpid(), set()
    for _ in range(200):
        _reap_children()
        others = [p for p in confine.group_pids(os.getpgid(0)) if p != me and p not in spare]
        if not others:
            break
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    _reap_children()
    return sorted(killed)


def sandbox_env(sandbox_dir: str) -> dict[str, str]:
    env = dict(os.environ)  # already the controller's allowlist
    tmp = os.path.join(sandbox_dir, "tmp")
    os.makedirs(tmp, exist_ok=True)
    # The user's name, which inductor's cache folder takes: getpass.getuser() would look for it
    # in /etc/passwd, which a sandbox cannot read.
    with contextlib.suppress(Exception):
        env["USER"] = env["LOGNAME"] = getpass.getuser()
    env |= {
        "HOME": sandbox_dir,
        "TMPDIR": tmp,
        "PYTHONDONTWRITEBYTECODE": "1",
        "TORCH_EXTENSIONS_DIR": os.path.join(sandbox_dir, "torch_extensions"),
    }
    return env


def hand_over(
    workdir: str, reference: Path, candidate: CandidateJob | None
) -> tuple[Path, CandidateJob | None]:
    """Copies the reference's file and the candidate's (its Python file, source and library,
    or a KernelBench candidate's prebuilt extensions) into the sandbox's folder `workdir`, and
    returns their paths there: a sandbox reads no file of the host's beyond its own folder, the
    system's and Python's (confine.python_roots), so the build cache, the task folders and the
    user's files stay out of its reach. Copies, not links: through a link the sandbox could
    write the cache's file."""
    given = Path(workdir, "given")
    reference = _copy_in(Path(reference), given / "reference")
    if candidate is None:
        return reference, None
    model = _copy_in(candidate.model, given / "candidate")
    library = candidate.library and _copy_in(candidate.library, given / "library")
    source = candidate.source and _copy_in(candidate.source, given / "source")
    return reference, dataclasses.replace(candidate, model=model, library=library, source=source)


def _copy_in(path: Path, folder: Path) -> Path:
    """`path` copied into `folder`: a file under its own name, a folder of prebuilt
    extensions as `folder` holding its .so files."""
    folder.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        for library in path.glob("*.so"):
            shutil.copy2(library, folder / library.name)
        return folder
    shutil.copy2(path, folder / path.name)
    return folder / path.name


class Channel:
    """The running sandbox: its message pipe, drained stdout/stderr, and its lifetime.

    zygote: forks the sandbox with torch already imported (zygote.py); without one, or once it
    has failed, the sandbox is spawned as a new Python."""

    def __init__(self, workdir: str, device: str, zygote: Zygote | None = None) -> None:
        r, w = os.pipe()
        os.makedirs(workdir, exist_ok=True)
        env = sandbox_env(workdir)
        self.zygote = zygote
        self.workdir = workdir
        self.zygote_failed = ""  # why this sandbox was spawned although a zygote was given
        self.proc: subprocess.Popen | Forked | None = None
        if zygote is not None:
            try:
                self.proc = zygote.fork(workdir, device, env, w)
            except ZygoteError as e:
                self.zygote_failed = str(e)
                # A zygote that died mid-fork can leave a sandbox holding this pipe: the
                # spawned one gets a pipe of its own, so no message of the other reaches here.
                os.close(r)
                os.close(w)
                r, w = os.pipe()
        if self.proc is None:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hipevolve.verifier.gpu.sandbox.sandbox_process",
                    str(w),
                    workdir,
                    device,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(w,),
                cwd=workdir,
                env=env,
            )
        os.close(w)
        self.max_processes = 0
        self.stdout, self.stderr = bytearray(), bytearray()
        self.messages: queue.Queue = queue.Queue()
        self.reader = os.fdopen(r, "rb", buffering=1 << 20)
        for target, args in (
            (_drain, (self.proc.stdout, self.stdout)),
            (_drain, (self.proc.stderr, self.stderr)),
            (self._read, ()),
        ):
            threading.Thread(target=target, args=args, daemon=True).start()

    def start(self, job: SandboxJob, max_processes: int) -> None:
        """Hands the waiting sandbox its job."""
        self.max_processes = max_processes if job.allow_processes else 0
        self.tell(self.given(job).to_json())

    def given(self, job: Job) -> Job:
        """`job` naming copies, in this sandbox's folder, of the files it names."""
        reference, candidate = hand_over(self.workdir, job.reference, job.candidate)
        return dataclasses.replace(job, reference=reference, candidate=candidate)

    def _read(self) -> None:
        from hipevolve.verifier.gpu import wire

        while True:
            try:
                header, tensors = wire.read_message(self.reader)
            except wire.WireError as e:
                clean = str(e).startswith("stream ended after 0 of 8 bytes")
                truncated = str(e).startswith("stream ended")
                self.messages.put(
                    (
                        "end",
                        "closed" if clean else "truncated" if truncated else f"malformed: {e}",
                        0.0,
                    )
                )
                return
            self.messages.put((header, tensors, time.perf_counter()))

    def tell(self, line: str) -> None:
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def next(self, stage: str, deadline: float) -> tuple[dict, list, float]:
        """The next message, or SandboxError when the stage times out or the sandbox ends."""
        last_count = 0.0
        while True:
            now = time.monotonic()
            if now >= deadline:
                self.kill()
                raise SandboxError("timeout", f"timeout in stage {stage}: the candidate was killed")
            try:
                item = self.messages.get(timeout=min(0.1, deadline - now))
            except queue.Empty:
                if self.max_processes and now - last_count > 0.25:
                    last_count = now
                    group = set(confine.group_pids(os.getpgid(0))) - self.spared()
                    if len(group) - 1 > self.max_processes:
                        self.kill()
                        raise SandboxError(
                            "runtime_error",
                            f"resource exhaustion: more than {self.max_processes} processes",
                        ) from None
                continue
            header, tensors, at = item
            if header == "end":
                raise self._ended(stage, tensors)
            if header["kind"] == "error":
                self.kill()
                raise sandbox_error(header, stage)
            return header, tensors, at

    def _ended(self, stage: str, how: str) -> SandboxError:
        try:
            code = self.proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        self.kill()
        if how.startswith("malformed"):
            return SandboxError(
                "hacked", f"garbage on the result channel in stage {stage} ({how[:120]})"
            )
        if code is not None and code < 0:
            what = f"crashed with {_signal_name(code)}"
        else:
            what = f"exited with code {code}" if code is not None else "closed its channel"
        tail = bytes(self.stderr[-300:]).decode(errors="replace").strip().splitlines()
        hint = f": {tail[-1][:200]}" if tail else ""
        return SandboxError(
            "runtime_error", f"crash: the candidate process {what} in stage {stage}{hint}"
        )

    def spared(self) -> frozenset[int]:
        """The zygote, which a group kill leaves alive for the next sandbox."""
        return self.zygote.spared() if self.zygote is not None else frozenset()

    def kill(self) -> None:
        if leads_group():
            kill_group_except_self(self.spared())
        else:  # driven outside a judge (a test): the group is not ours, the sandbox is
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
