"""The SQLite archive: runs, candidates, lineage, evaluations, the work queue, elites, accounting.

One file per search (or shared by several runs). Every add and record is its own transaction,
committed before the call returns (write-through), so a SIGKILL loses at most the call in
progress and resume finds everything else. Write transactions are BEGIN IMMEDIATE: they take
SQLite's write lock up front and wait up to BUSY_TIMEOUT_MS for it, rather than failing halfway.

PRAGMAs: WAL (readers never block the writer, nor it them); synchronous=NORMAL (with WAL, a
committed transaction survives any process crash; only a power cut can undo the last few);
foreign_keys=ON; busy_timeout.

Only the process holding a run's lock (archive/lock.py) writes that run: start_run and resume
take it, finish_run and close release it. Reading needs no lock.

This module holds opening, transactions and runs; the candidate, queue, evaluation, elite and
accounting reads and writes are the Tables mixin (tables.py), the exports' and the report's
read-only questions the Queries mixin (queries.py), the record types records.py; the records are
re-exported here.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from sqlite_utils import Database

from hipevolve.archive import lock, schema
from hipevolve.archive.queries import Queries
from hipevolve.archive.records import (
    Attempted,
    CandidateRecord,
    Credit,
    EdgeKind,
    Elite,
    EvaluatedRecord,
    EvaluationCounts,
    Event,
    LineageEdge,
    LlmUsage,
    ModelUsage,
    Note,
    Outcome,
    QueueState,
    Record,
    Resumed,
    RoleUsage,
    RunInfo,
    RunStatus,
    Scored,
    Stored,
    evaluation_key,
    now_iso,
)
from hipevolve.archive.tables import Tables
from hipevolve.core.base import canonical_json
from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import TaskSpec

__all__ = [
    "BUSY_TIMEOUT_MS",
    "SQLITE_HEADER",
    "Archive",
    "ArchiveFull",
    "Attempted",
    "CandidateRecord",
    "Credit",
    "EdgeKind",
    "Elite",
    "EvaluatedRecord",
    "EvaluationCounts",
    "Event",
    "LineageEdge",
    "LlmUsage",
    "ModelUsage",
    "Note",
    "Outcome",
    "QueueState",
    "Record",
    "Resumed",
    "RoleUsage",
    "RunInfo",
    "RunStatus",
    "Scored",
    "Stored",
    "canonical_json",
    "evaluation_key",
    "now_iso",
]

BUSY_TIMEOUT_MS = 5000
SQLITE_HEADER = b"SQLite format 3\x00"


class ArchiveFull(UserError):
    """The disk (or the archive's size limit) filled up during a write, or refused it (a quota
    or file-size limit); the write was rolled back, nothing half-written."""


def _storage_error(path: Path, e: sqlite3.Error) -> UserError | None:
    name = getattr(e, "sqlite_errorname", "")
    if name.startswith("SQLITE_FULL") or "disk is full" in str(e):
        return ArchiveFull(
            f"archive {path}: the disk is full, the last write was rolled back ({e})",
            "free space on that disk, then resume the run; everything committed is kept",
        )
    if name == "SQLITE_IOERR_WRITE":
        # SQLite reports only ENOSPC as SQLITE_FULL: a quota (EDQUOT) or a file-size limit
        # (EFBIG, `ulimit -f`) comes back as a failed write, and is a full disk to the user.
        return ArchiveFull(
            f"archive {path}: the disk refused a write ({e}: out of quota, over the file-size"
            " limit, or failing); the last write was rolled back",
            "free space or quota there, or raise `ulimit -f`, then resume the run;"
            " everything committed is kept",
        )
    if name.startswith("SQLITE_BUSY") or "database is locked" in str(e):
        return UserError(
            f"archive {path}: another process kept it locked for over {BUSY_TIMEOUT_MS} ms",
            "let the other writer finish, or stop it",
        )
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return _corrupt(path, str(e))
    return None


def _corrupt(path: Path, detail: str) -> UserError:
    return UserError(
        f"archive {path} is corrupt ({detail})",
        f"restore it from a backup, or salvage it with `sqlite3 {path} .recover`",
    )


class Archive(Tables, Queries):
    """The archive of one SQLite file. Open with Archive.open; use as a context manager."""

    def __init__(self, path: Path, db: Database) -> None:
        self.path = path
        self.db = db  # sqlite-utils Database, for ad-hoc reads (reports, exports)
        self._conn = db.conn
        self._mutex = threading.RLock()  # one transaction at a time on the shared connection
        self._token = secrets.token_hex(16)
        self._held: dict[int, float] = {}  # run -> time of our last heartbeat
        lock.register(self._token)

    # ------------------------------------------------------------------------ open and close

    @classmethod
    def open(cls, path: str | Path, create: bool = True, read_only: bool = False) -> Archive:
        """Opens (creating or migrating if needed) an archive; UserError if it is not one.

        `read_only`: for the exports and the report, which only read. The file is opened
        read-only, so an archive in a folder or on a disk that cannot be written still opens
        (SQLite's WAL needs files beside it: where it cannot make them, the file is read as
        immutable, nothing writing it, which a read-only folder guarantees); it is never created
        nor migrated. Otherwise a folder that cannot be written is refused in one line, before
        SQLite fails on it."""
        path = Path(path)
        check_path(path, create=create, read_only=read_only)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
        if read_only:
            return cls(path, _open_read_only(path))
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        try:
            db = _prepare(path, conn, create)
        except BaseException:
            conn.close()
            raise
        return cls(path, db)

    def close(self) -> None:
        """Marks runs still held here as interrupted, releases their locks, closes the file."""
        with self._mutex:
            if self._held:
                try:
                    with self._write():
                        for run in self._held:
                            self._conn.execute(
                                "UPDATE runs SET status = 'interrupted' WHERE id = ?"
                                " AND status = 'running'",
                                [run],
                            )
                            lock.release(self._conn, run, self._token)
                except UserError:
                    pass  # disk full or busy: the lock goes stale with this Archive anyway
                self._held.clear()
            lock.unregister(self._token)
            self._conn.close()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------------ transactions

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction, committed on exit; storage failures become UserErrors."""
        conn = self._conn
        with self._mutex:
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as e:
                error = _storage_error(self.path, e)
                if error is None:
                    raise
                raise error from None

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._mutex:
            cursor = self._conn.cursor()
            cursor.row_factory = sqlite3.Row
            return cursor.execute(sql, params).fetchall()

    def _owned(self, run: int) -> None:
        """Inside a write: refuse unless this Archive holds the run; refresh the heartbeat."""
        lock.ensure_held(self._conn, run, self._token)
        now = time.time()
        if now - self._held.get(run, 0.0) > lock.HEARTBEAT_EVERY_S:
            lock.beat(self._conn, run, self._token, now)
            self._held[run] = now

    # ------------------------------------------------------------------------ runs

    def start_run(
        self,
        task: TaskSpec | str,
        settings: BaseModel | Mapping[str, Any],
        seed: int,
        budget: int | None,
    ) -> int:
        """Records a new run of `task` and takes its lock; returns the run id."""
        name = task if isinstance(task, str) else task.name
        with self._write():
            if isinstance(task, TaskSpec):
                self.db["tasks"].upsert({"name": name, "spec": task.model_dump_json()}, pk="name")
            else:
                self._conn.execute("INSERT OR IGNORE INTO tasks(name) VALUES(?)", [name])
            run = (
                self.db["runs"]
                .insert(
                    {
                        "task": name,
                        "settings": canonical_json(settings),
                        "seed": seed,
                        "budget": budget,
                        "status": "running",
                        "started": now_iso(),
                    }
                )
                .last_pk
            )
            lock.acquire(self._conn, run, lock.this_process(self._token))
        self._held[run] = time.time()
        return run

    def runs(self) -> list[RunInfo]:
        """Every run, oldest first; a 'running' run whose writer is dead shows 'interrupted'."""
        return [self._run_info(r) for r in self._rows(_RUN_SQL + " ORDER BY r.id")]

    def run(self, run_id: int) -> RunInfo:
        rows = self._rows(_RUN_SQL + " WHERE r.id = ?", [run_id])
        if not rows:
            raise UserError(f"no run {run_id} in {self.path}", "`evolve report` lists the runs")
        return self._run_info(rows[0])

    def _run_info(self, row: sqlite3.Row) -> RunInfo:
        status = row["status"]
        if status == "running" and row["token"] is not None:
            holder = lock.Holder(
                pid=row["pid"],
                host=row["host"],
                proc_start=row["proc_start"],
                token=row["token"],
                heartbeat=row["heartbeat"],
            )
            if not lock.alive(holder, time.time()):
                status = "interrupted"
        elif status == "running":
            status = "interrupted"
        return RunInfo(
            id=row["id"],
            task=row["task"],
            settings=json.loads(row["settings"]),
            seed=row["seed"],
            budget=row["budget"],
            status=status,
            started=row["started"],
            finished=row["finished"],
            writer_pid=row["pid"],
            writer_host=row["host"],
        )

    def resume(self, run_id: int) -> Resumed:
        """Takes the run's lock and puts what was in flight back in the queue."""
        self.run(run_id)  # a clear error for an unknown id
        with self._write():
            replaced = lock.acquire(self._conn, run_id, lock.this_process(self._token))
            requeued = [
                r[0]
                for r in self._conn.execute(
                    "SELECT candidate FROM queue WHERE run = ? AND state = 'in_flight'"
                    " ORDER BY candidate",
                    [run_id],
                )
            ]
            self._conn.execute(
                "UPDATE queue SET state = 'queued', updated = ? WHERE run = ?"
                " AND state = 'in_flight'",
                [now_iso(), run_id],
            )
            self._conn.execute(
                "UPDATE runs SET status = 'running', finished = NULL WHERE id = ?", [run_id]
            )
            self._log(run_id, "resumed", {"requeued": requeued, "stale_writer": _who(replaced)})
        self._held[run_id] = time.time()
        return Resumed(
            run=self.run(run_id), requeued=tuple(requeued), queued=tuple(self.queued(run_id))
        )

    def finish_run(self, run_id: int, status: RunStatus = "finished") -> None:
        """Records how the run ended and releases its lock."""
        with self._write():
            self._owned(run_id)
            self._conn.execute(
                "UPDATE runs SET status = ?, finished = ? WHERE id = ?",
                [status, now_iso(), run_id],
            )
            lock.release(self._conn, run_id, self._token)
        self._held.pop(run_id, None)

    def heartbeat(self, run_id: int) -> None:
        """Proves this writer alive (only other hosts look at it); writes do it as they go."""
        with self._write():
            self._owned(run_id)
            lock.beat(self._conn, run_id, self._token, time.time())


_RUN_SQL = (
    "SELECT r.*, l.pid, l.host, l.proc_start, l.token, l.heartbeat"
    " FROM runs r LEFT JOIN run_locks l ON l.run = r.id"
)


def _who(holder: lock.Holder | None) -> str | None:
    return None if holder is None else f"pid {holder.pid} on {holder.host}"


def _prepare(path: Path, conn: sqlite3.Connection, create: bool) -> Database:
    """Checks the file is a healthy archive of a version we read, sets PRAGMAs, migrates."""
    try:
        db = Database(conn, execute_plugins=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
        if check != ["ok"]:
            raise _corrupt(path, f"quick_check: {'; '.join(check[:3])}")
        version = schema.stored_version(db)
        if version is None or (version == 0 and not create):
            raise UserError(
                f"{path} is an SQLite database but not a hipevolve archive (no hipevolve marker "
                "in its meta table)",
                "pass an archive written by evolve, or a new path to create one there",
            )
        if version > schema.SCHEMA_VERSION:
            raise UserError(
                f"archive {path} has schema v{version}; this hipevolve reads up to "
                f"v{schema.SCHEMA_VERSION}",
                "upgrade hipevolve (pip install -U hipevolve)",
            )
        # Only now, knowing the file is ours, change its journal mode (a persistent setting).
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        if version < schema.SCHEMA_VERSION:
            schema.migrate(db, now_iso())
        return db
    except sqlite3.Error as e:
        error = _storage_error(path, e)
        raise (error or _corrupt(path, str(e))) from None


def check_path(path: Path, create: bool = True, read_only: bool = False) -> None:
    """The checks Archive.open makes before it opens anything, cheap enough to run before any
    slow work: a folder, a missing file (unless `create`), a file that is not SQLite, a folder
    that cannot be written (unless `read_only`) are each refused in one line."""
    if path.is_dir():
        raise UserError(f"{path} is a folder, not an archive", "pass the archive's .db file")
    if not path.exists():
        if not create or read_only:
            raise UserError(f"no archive at {path}", "check the path; a search creates it")
    else:
        with path.open("rb") as f:
            header = f.read(len(SQLITE_HEADER))
        if header and header != SQLITE_HEADER:
            raise UserError(
                f"{path} is not an SQLite file, so not a hipevolve archive",
                "pass an archive written by evolve, or a new path to create one there",
            )
    if not read_only:
        _require_writable_folder(path)


def _require_writable_folder(path: Path) -> None:
    """UserError unless a file can be made beside `path` (SQLite's journal and WAL live there):
    tried, not inferred from permission bits, which say nothing of a read-only disk or root."""
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    try:
        if not folder.is_dir():
            raise NotADirectoryError(f"{folder} is a file")
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise UserError(
            f"archive {path}: cannot write in {folder} ({e.strerror or e}); a search writes its "
            "archive as it goes",
            "pass --archive with a path in a folder you can write to (export and report read "
            "an archive where it is)",
        ) from None


def _open_read_only(path: Path) -> Database:
    """The archive at `path`, read-only: checked like _prepare, nothing written."""
    uri = path.resolve().as_uri()
    for query in ("?mode=ro", "?mode=ro&immutable=1"):  # immutable: no WAL files can be made
        conn = sqlite3.connect(
            uri + query, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False
        )
        try:
            db = Database(conn, execute_plugins=False)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
        except sqlite3.OperationalError as e:
            conn.close()
            if getattr(e, "sqlite_errorname", "").startswith("SQLITE_CANTOPEN") or (
                "unable to open" in str(e)
            ):
                continue
            raise _storage_error(path, e) or _corrupt(path, str(e)) from None
        except sqlite3.Error as e:
            conn.close()
            raise _storage_error(path, e) or _corrupt(path, str(e)) from None
        if check != ["ok"]:
            conn.close()
            raise _corrupt(path, f"quick_check: {'; '.join(check[:3])}")
        version = schema.stored_version(db)
        problem = None
        if not version:
            problem = UserError(
                f"{path} is an SQLite database but not a hipevolve archive (no hipevolve marker "
                "in its meta table)",
                "pass an archive written by evolve",
            )
        elif version > schema.SCHEMA_VERSION:
            problem = UserError(
                f"archive {path} has schema v{version}; this hipevolve reads up to "
                f"v{schema.SCHEMA_VERSION}",
                "upgrade hipevolve (pip install -U hipevolve)",
            )
        elif version < schema.SCHEMA_VERSION:
            problem = UserError(
                f"archive {path} has schema v{version} and must be migrated to "
                f"v{schema.SCHEMA_VERSION}, which writes it",
                "open it once where it can be written (resume or start a run with it), or "
                "copy it to a writable folder",
            )
        if problem is not None:
            conn.close()
            raise problem
        return db
    raise UserError(
        f"archive {path} cannot be opened, even read-only",
        "check its permissions: the file must be readable",
    )
