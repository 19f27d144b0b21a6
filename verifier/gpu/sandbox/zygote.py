"""A Python with torch already imported that forks each evaluation's sandbox.

A sandbox started from nothing spends most of its start-up importing torch: about a second of
CPU per evaluation, on the cores every GPU slot shares. The judge (worker.py) therefore starts
one zygote, `python -m hipevolve.verifier.gpu.sandbox.zygote SOCKET_FD`, which imports torch and the
sandbox's modules once and never creates a device context (a process forked from one could not
use the device). For each evaluation the zygote forks a new process. That process confines
itself and runs exactly as a spawned sandbox does (`sandbox_process.serve`).

What stays as it was with a spawned sandbox:
- A fresh process per candidate, forked from a zygote that has never run one, so nothing passes
  from one candidate to the next.
- One thread at the fork (the zygote checks), so Landlock and seccomp still bind every thread
  the candidate will ever have.
- The sandbox's parent is the judge: the zygote's child forks the sandbox and exits at once, so
  the sandbox is re-parented to the judge (a subreaper). It stays in the judge's process group,
  and the judge waits for it and kills it as it would a process it spawned.
- The candidate cannot reach the zygote. The zygote is not dumpable (no /proc/<pid>/fd or mem
  for it), its one line to the judge is an anonymous socket pair with no name to connect to and
  is closed in the sandbox, and Landlock keeps the sandbox from signalling it. A zygote that
  dies anyway costs only speed: the judge spawns its sandboxes from then on (`ZygoteError`).

The request, over a SOCK_SEQPACKET socket pair: one JSON object {seq, workdir, device, env} with
four descriptors (the sandbox's stdin, stdout, stderr and message pipe). The answer: {seq, pid}
or {seq, error}.

Imports the standard library and hipevolve.verifier.gpu.confine at module level; the sandbox's
modules are imported in the zygote process only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

from hipevolve.verifier.gpu import confine

MSG_FD = 3  # the message pipe's number in the sandbox (stdin, stdout, stderr are 0-2)
READY_S = 60.0  # the zygote imports torch before its first answer (Timeouts.startup)
ANSWER_S = 10.0  # two forks, afterwards


class ZygoteError(Exception):
    """The zygote could not fork a sandbox: the judge spawns one instead."""


class Forked:
    """A sandbox the zygote forked, seen from the judge: the subprocess.Popen surface that
    channel.Channel uses (pid, stdin, stdout, stderr, poll, wait, returncode)."""

    def __init__(self, pid: int, stdin: int, stdout: int, stderr: int) -> None:
        self.pid = pid
        self.stdin = os.fdopen(stdin, "wb")
        self.stdout = os.fdopen(stdout, "rb")
        self.stderr = os.fdopen(stderr, "rb")
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by a group kill: its status is gone (as Popen)
                pid, status = self.pid, 0
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """As Popen.wait: polls, sleeping at most 50 ms at a time."""
        end = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(f"sandbox {self.pid}", timeout)
            delay = min(2 * delay, 0.05)
            time.sleep(delay if end is None else min(delay, max(end - time.monotonic(), 0)))
        return self.returncode


class Zygote:
    """The judge's handle on its zygote process."""

    def __init__(self, proc: subprocess.Popen, sock: socket.socket) -> None:
        self.proc = proc
        self.sock = sock
        self.seq = 0
        self.failed = ""
        self.ready = False

    @classmethod
    def start(cls) -> Zygote:
        """Starts the zygote in this process's group, with this process's environment."""
        confine.become_subreaper()  # the sandboxes it forks are re-parented to this process
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # OpenBLAS (loaded with numpy by torch) would start a thread per core at import.
        env = dict(os.environ) | {"OPENBLAS_NUM_THREADS": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "hipevolve.verifier.gpu.sandbox.zygote", str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
            env=env,
        )
        theirs.close()
        return cls(proc, ours)

    def spared(self) -> frozenset[int]:
        """Processes of the judge's group that a group kill must leave alone."""
        return frozenset() if self.failed else frozenset({self.proc.pid})

    def fork(self, workdir: str, device: str, env: dict[str, str], msg_fd: int) -> Forked:
        """A sandbox in `workdir` writing its messages to `msg_fd` (the caller keeps and closes
        msg_fd), or ZygoteError; after one error every call raises it."""
        if self.failed:
            raise ZygoteError(self.failed)
        self.seq += 1
        pipes = [os.pipe() for _ in range(3)]  # stdin, stdout, stderr
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1], msg_fd]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0]]
        try:
            request = {"seq": self.seq, "workdir": workdir, "device": device, "env": env}
            socket.send_fds(self.sock, [json.dumps(request).encode()], theirs)
            pid = self._answer()
        except (OSError, ValueError, ZygoteError) as e:
            for fd in ours:
                os.close(fd)
            self.close(f"{type(e).__name__}: {e}")
            raise ZygoteError(self.failed) from None
        finally:
            for fd in theirs[:3]:
                os.close(fd)
        return Forked(pid, *ours)

    def _answer(self) -> int:
        end = time.monotonic() + (ANSWER_S if self.ready else READY_S)
        while True:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise ZygoteError("no answer in time")
            data = self.sock.recv(1 << 16)
            if not data:
                raise ZygoteError(f"the zygote exited (code {self.proc.poll()})")
            answer = json.loads(data)
            if not isinstance(answer, dict):
                raise ZygoteError(f"a malformed answer: {data[:100]!r}")
            if answer.get("seq") == self.seq:  # an older request's answer is stale
                break
        if not isinstance(answer.get("pid"), int):
            raise ZygoteError(str(answer.get("error", "an answer without a pid"))[:300])
        self.ready = True
        return answer["pid"]

    def close(self, why: str = "closed") -> None:
        """Ends the zygote; fork raises ZygoteError(why) from now on."""
        self.failed = self.failed or why
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


# --- the zygote process ----------------------------------------------------------------------
def _preload() -> str:
    """Imports what every sandbox imports; '' if forking is safe afterwards, else why not."""
    try:
        import torch

        from hipevolve.core import reference  # noqa: F401
        from hipevolve.verifier.gpu import ipc, timing, wire  # noqa: F401
        from hipevolve.verifier.gpu.sandbox import executor, record, sandbox_process  # noqa: F401

        record.warm()  # the recorder's FakeTensorMode imports torch._dynamo: seconds, once here
        confine.python_roots()  # cached: what each sandbox may read, worked out once here
    except Exception as e:  # noqa: BLE001 (the judge hears why, and spawns instead)
        return f"importing the sandbox's modules failed: {type(e).__name__}: {e}"
    if torch.cuda.is_initialized():
        return "the zygote created a device context"
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        return f"{threads} threads after importing torch: forking would be unsafe"
    return ""


def _become_sandbox(request: dict, fds: list[int], sock: socket.socket) -> None:
    """In the forked child: the four descriptors become 0-3, everything else is closed, the
    judge's environment and the sandbox's folder are taken, and the sandbox runs."""
    try:
        sock.close()
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 16) for fd in fds]  # clear of 0-3 first
        for fd, target in zip(high, (0, 1, 2, MSG_FD), strict=True):
            os.dup2(fd, target)
        os.closerange(MSG_FD + 1, os.sysconf("SC_OPEN_MAX"))
        confine.set_dumpable()  # inherited from the zygote; a spawned sandbox is dumpable
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["workdir"])
        tempfile.tempdir = None  # TMPDIR is read again
        sys.dont_write_bytecode = True
        sys.argv = [
            "hipevolve.verifier.gpu.sandbox.sandbox_process",
            str(MSG_FD),
            request["workdir"],
            request["device"],
        ]
        from hipevolve.verifier.gpu.sandbox import sandbox_process

        sandbox_process.serve(MSG_FD, request["workdir"], request["device"], forked=True)
    finally:
        os._exit(70)


def _fork_sandbox(request: dict, fds: list[int], sock: socket.socket) -> int:
    """Forks a child that forks the sandbox and exits; returns the sandbox's pid."""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        try:
            os.close(r)
            pid = os.fork()
            if pid == 0:
                os.close(w)
                _become_sandbox(request, fds, sock)
            os.write(w, str(pid).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        pid = f.read()
    os.waitpid(child, 0)  # once reaped, the sandbox's parent is the judge
    if not pid:
        raise ZygoteError("the sandbox's fork failed")
    return int(pid)


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    confine.set_not_dumpable()
    confine.die_with_parent(signal.SIGKILL)
    refused = _preload()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 4)
        except OSError:
            break
        if not data:  # the judge has gone
            break
        request: dict = {}
        try:
            request = json.loads(data)
            if refused:
                raise ZygoteError(refused)
            answer = {"pid": _fork_sandbox(request, fds, sock)}
        except Exception as e:  # noqa: BLE001 (every failure is an answer)
            answer = {"error": f"{type(e).__name__}: {e}"[:300]}
        finally:
            for fd in fds:
                os.close(fd)
        answer["seq"] = request.get("seq") if isinstance(request, dict) else None
        sock.send(json.dumps(answer).encode())
    os._exit(0)


if __name__ == "__main__":
    main()
