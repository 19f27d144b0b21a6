"""Hack: take over the judge's zygote, the process that forks every sandbox of this judge. Kill
it, list and steal its descriptors (the judge's line to it) through /proc and pidfd_getfd, read
its memory, and look for a socket left open in this process. Any of these would reach the
sandboxes forked after this one, or the judge. Runs as the candidate module is imported.

Not a dyn_ attack: tests/test_zygote.py runs it, then a healthy candidate in the same judge.
It answers correctly when it reached nothing (so the judge serves again), and otherwise raises,
naming what it reached.
"""

import ctypes
import os
import signal
import stat

import torch
import torch.nn as nn

SYS_PIDFD_GETFD = 438


def _zygotes() -> list[int]:
    """The zygote of this sandbox's judge: same parent, zygote.py on the command line (so has
    this process: forked from the zygote, it never ran another program)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except OSError:
            continue
        zygote = b"hipevolve.verifier.gpu.sandbox.zygote" in cmdline and int(entry) != os.getpid()
        if zygote and ppid == os.getppid():
            found.append(int(entry))
    return found


def _attempts(pid: int) -> dict:
    libc = ctypes.CDLL(None, use_errno=True)

    def steal() -> None:
        pidfd = os.pidfd_open(pid)
        if all(libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0) < 0 for fd in range(64)):
            raise PermissionError("no descriptor taken")

    def links() -> None:  # the numbers alone are listed to the owner (root owns a non-dumpable's)
        if not [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]:
            raise PermissionError("no descriptor")

    return {
        "fd-links": links,
        "mem": lambda: open(f"/proc/{pid}/mem", "rb").close(),
        "pidfd_getfd": steal,
        "kill": lambda: os.kill(pid, signal.SIGKILL),
    }


def _reach() -> list[str]:
    """The attempts that worked: each returns only when it reached the zygote."""
    zygotes = _zygotes()
    reached = [] if zygotes else ["no zygote found"]
    for pid in zygotes:
        for name, attempt in _attempts(pid).items():
            try:
                attempt()
            except OSError:
                continue
            reached.append(name)
    for fd in os.listdir("/proc/self/fd"):
        try:
            if stat.S_ISSOCK(os.fstat(int(fd)).st_mode):
                reached.append(f"socket fd {fd}")
        except OSError:
            continue
    return reached


REACHED = _reach()


class ModelNew(nn.Module):
    def forward(self, x):
        if REACHED:
            raise RuntimeError(f"reached={REACHED}")
        return torch.softmax(x.float(), dim=-1).to(x.dtype)
