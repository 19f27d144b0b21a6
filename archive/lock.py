"""The run lock: one process writes a run at a time (FAULTS 32), and a dead writer never blocks.

A lock is a row in `run_locks` (run, pid, host, process start time, token, heartbeat), taken
inside the caller's BEGIN IMMEDIATE transaction, so two processes racing for one run serialise
on SQLite's write lock and exactly one wins. A holder counts as alive when:
- it is this process: its token belongs to an Archive still open here;
- it is another process on this host: the pid exists, is not a zombie, and started when the
  holder did (so a recycled pid is not mistaken for it). A SIGKILLed writer is therefore stale
  the moment it dies: nothing to clean up, nothing to wait for;
- it is on another host (a shared home directory): its heartbeat is younger than
  OTHER_HOST_STALE_S. SQLite's WAL mode needs one host anyway; this only keeps a stray second
  machine from writing.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from hipevolve.core.errors import UserError

OTHER_HOST_STALE_S = 3600.0
HEARTBEAT_EVERY_S = 10.0

# Tokens of the Archive objects open in this process: a lock row with our pid and a token not
# in here was left by an Archive that was dropped without close().
_LIVE_TOKENS: set[str] = set()


class Holder(BaseModel):
    """Who holds (or wants) a run's lock."""

    model_config = ConfigDict(frozen=True)

    pid: int
    host: str
    proc_start: str | None
    token: str
    heartbeat: float


def register(token: str) -> None:
    _LIVE_TOKENS.add(token)


def unregister(token: str) -> None:
    _LIVE_TOKENS.discard(token)


def this_process(token: str) -> Holder:
    pid = os.getpid()
    return Holder(
        pid=pid,
        host=socket.gethostname(),
        proc_start=_proc_start(pid),
        token=token,
        heartbeat=time.time(),
    )


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name; None if unreadable."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces and parentheses.
    return text[text.rfind(")") + 2 :].split()


def _proc_start(pid: int) -> str | None:
    fields = _proc_stat(pid)
    return fields[19] if fields and len(fields) > 19 else None  # field 22: starttime


def _pid_alive(pid: int, proc_start: str | None) -> bool:
    fields = _proc_stat(pid)
    if fields is None:
        if Path("/proc/self/stat").exists():
            return False  # Linux: no /proc entry, no process
        try:  # no /proc (macOS): ask the kernel
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    if fields[0] in ("Z", "X"):  # killed, not yet reaped by its parent
        return False
    return proc_start is None or len(fields) <= 19 or fields[19] == proc_start


def alive(holder: Holder, now: float) -> bool:
    if holder.host != socket.gethostname():
        return now - holder.heartbeat < OTHER_HOST_STALE_S
    if holder.pid == os.getpid():
        return holder.token in _LIVE_TOKENS
    return _pid_alive(holder.pid, holder.proc_start)


def holder_of(conn: sqlite3.Connection, run: int) -> Holder | None:
    row = conn.execute(
        "SELECT pid, host, proc_start, token, heartbeat FROM run_locks WHERE run = ?", [run]
    ).fetchone()
    if row is None:
        return None
    pid, host, proc_start, token, heartbeat = row
    return Holder(pid=pid, host=host, proc_start=proc_start, token=token, heartbeat=heartbeat)


def busy_error(run: int, holder: Holder) -> UserError:
    where = "" if holder.host == socket.gethostname() else f" on host {holder.host}"
    return UserError(
        f"run {run} is being written by pid {holder.pid}{where}",
        "wait for that process to finish or stop it; a dead writer's lock is taken over "
        "automatically",
    )


def acquire(conn: sqlite3.Connection, run: int, me: Holder) -> Holder | None:
    """Takes the run's lock; returns the stale holder it replaced, if any.

    Call inside a BEGIN IMMEDIATE transaction. Raises UserError if a live holder has it.
    """
    current = holder_of(conn, run)
    if current is not None and current.token != me.token and alive(current, me.heartbeat):
        raise busy_error(run, current)
    conn.execute(
        "INSERT INTO run_locks(run, pid, host, proc_start, token, heartbeat)"
        " VALUES(?, ?, ?, ?, ?, ?) ON CONFLICT(run) DO UPDATE SET pid = excluded.pid,"
        " host = excluded.host, proc_start = excluded.proc_start, token = excluded.token,"
        " heartbeat = excluded.heartbeat",
        [run, me.pid, me.host, me.proc_start, me.token, me.heartbeat],
    )
    return current if current is not None and current.token != me.token else None


def ensure_held(conn: sqlite3.Connection, run: int, token: str) -> None:
    """Raises UserError unless `token` holds the run's lock. Call inside a write transaction."""
    current = holder_of(conn, run)
    if current is None:
        raise UserError(
            f"run {run} is not open for writing here",
            "start it with Archive.start_run or resume it with Archive.resume first",
        )
    if current.token != token:
        raise busy_error(run, current)


def beat(conn: sqlite3.Connection, run: int, token: str, now: float) -> None:
    conn.execute(
        "UPDATE run_locks SET heartbeat = ? WHERE run = ? AND token = ?", [now, run, token]
    )


def release(conn: sqlite3.Connection, run: int, token: str) -> None:
    conn.execute("DELETE FROM run_locks WHERE run = ? AND token = ?", [run, token])
