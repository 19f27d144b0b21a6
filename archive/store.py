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
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlite_utils import Database

from hipevolve.archive import lock, schema
from hipevolve.errors import UserError
from hipevolve.taskspec import TaskSpec
from hipevolve.verifier.candidate import Candidate
from hipevolve.verifier.evaluation import Evaluation

BUSY_TIMEOUT_MS = 5000
SQLITE_HEADER = b"SQLite format 3\x00"

RunStatus = Literal["running", "finished", "interrupted"]
QueueState = Literal["queued", "in_flight", "done"]
EdgeKind = Literal["mutation", "crossover", "inspiration", "migration"]


class ArchiveFull(UserError):
    """The disk (or the archive's size limit) filled up during a write; nothing half-written."""


class Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class RunInfo(Record):
    id: int
    task: str
    settings: dict[str, Any]
    seed: int
    budget: int | None
    status: RunStatus
    started: str
    finished: str | None
    writer_pid: int | None = None
    writer_host: str | None = None


class Resumed(Record):
    run: RunInfo
    requeued: tuple[int, ...]  # candidates that were in flight when the run stopped
    queued: tuple[int, ...]  # everything now waiting, requeued included, oldest first


class CandidateRecord(Record):
    id: int
    run: int
    source_hash: str
    agent: str
    model: str
    prompt_hash: str
    island: int
    generation: int
    created: str
    fitness: float | None
    candidate: Candidate


class Scored(Record):
    candidate_id: int
    island: int
    fitness: float
    evaluation: Evaluation


class Elite(Record):
    run: int
    island: int
    cell: str
    candidate_id: int
    fitness: float


class LlmUsage(Record):
    calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float


class Event(Record):
    id: int
    run: int
    kind: str
    data: dict[str, Any]
    created: str


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def canonical_json(value: BaseModel | Mapping[str, Any]) -> str:
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else dict(value)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


def evaluation_key(source_hash: str, settings_key: str, toolchain: str) -> str:
    """The idempotency key of an evaluation: same source, settings and toolchain, same result.

    `settings_key` is the evaluation settings as canonical JSON; it must name the task and
    its cases (so one kernel on two tasks never shares a key). `toolchain` is the compiler and
    runtime versions and the device.
    """
    return hashlib.sha256("\0".join((source_hash, settings_key, toolchain)).encode()).hexdigest()


def _storage_error(path: Path, e: sqlite3.Error) -> UserError | None:
    name = getattr(e, "sqlite_errorname", "")
    if name.startswith("SQLITE_FULL") or "disk is full" in str(e):
        return ArchiveFull(
            f"archive {path}: the disk is full, the last write was rolled back ({e})",
            "free space on that disk, then resume the run; everything committed is kept",
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


class Archive:
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
    def open(cls, path: str | Path, create: bool = True) -> Archive:
        """Opens (creating or migrating if needed) an archive; UserError if it is not one."""
        path = Path(path)
        if path.is_dir():
            raise UserError(f"{path} is a folder, not an archive", "pass the archive's .db file")
        if not path.exists():
            if not create:
                raise UserError(f"no archive at {path}", "check the path; a search creates it")
            path.parent.mkdir(parents=True, exist_ok=True)
        else:
            with path.open("rb") as f:
                header = f.read(len(SQLITE_HEADER))
            if header and header != SQLITE_HEADER:
                raise UserError(
                    f"{path} is not an SQLite file, so not a hipevolve archive",
                    "pass an archive written by evolve, or a new path to create one there",
                )
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

    def _run_of(self, candidate_id: int) -> tuple[int, str]:
        row = self._conn.execute(
            "SELECT run, source_hash FROM candidates WHERE id = ?", [candidate_id]
        ).fetchone()
        if row is None:
            raise KeyError(f"no candidate {candidate_id} in {self.path}")
        return row[0], row[1]

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

    # ------------------------------------------------------------------------ candidates

    def add_candidate(
        self,
        run: int,
        candidate: Candidate,
        *,
        parents: Sequence[int] = (),
        kind: EdgeKind = "mutation",
        inspirations: Sequence[int] = (),
        agent: str = "",
        model: str = "",
        prompt_hash: str = "",
        island: int = 0,
        generation: int = 0,
    ) -> int:
        """Stores a candidate with its lineage; returns its id.

        A candidate whose normalised source is already in the run returns the existing id and
        records nothing (its first lineage stands), so a duplicate never reaches a GPU.
        """
        if kind not in schema.EDGE_KINDS:
            raise ValueError(f"unknown lineage kind {kind!r}; one of {schema.EDGE_KINDS}")
        source_hash = candidate.source_hash
        with self._write():
            self._owned(run)
            existing = self._conn.execute(
                "SELECT id FROM candidates WHERE run = ? AND source_hash = ?", [run, source_hash]
            ).fetchone()
            if existing is not None:
                return existing[0]
            cid = (
                self.db["candidates"]
                .insert(
                    {
                        "run": run,
                        "source_hash": source_hash,
                        "format": candidate.format,
                        "name": candidate.name,
                        "hip_source": candidate.hip_source,
                        "python_source": candidate.python_source,
                        "agent": agent,
                        "model": model,
                        "prompt_hash": prompt_hash,
                        "island": island,
                        "generation": generation,
                        "created": now_iso(),
                    }
                )
                .last_pk
            )
            edges = [(cid, p, kind) for p in parents]
            edges += [(cid, p, "inspiration") for p in inspirations]
            self._conn.executemany(
                "INSERT OR IGNORE INTO lineage(child, parent, kind) VALUES(?, ?, ?)", edges
            )
        return cid

    def add_edge(self, child: int, parent: int, kind: EdgeKind) -> None:
        """Records one more lineage edge parent -> child (a migration, a late inspiration)."""
        if kind not in schema.EDGE_KINDS:
            raise ValueError(f"unknown lineage kind {kind!r}; one of {schema.EDGE_KINDS}")
        with self._write():
            self._owned(self._run_of(child)[0])
            self._conn.execute(
                "INSERT OR IGNORE INTO lineage(child, parent, kind) VALUES(?, ?, ?)",
                [child, parent, kind],
            )

    def candidate(self, candidate_id: int) -> CandidateRecord:
        rows = self._rows("SELECT * FROM candidates WHERE id = ?", [candidate_id])
        if not rows:
            raise KeyError(f"no candidate {candidate_id} in {self.path}")
        r = rows[0]
        return CandidateRecord(
            id=r["id"],
            run=r["run"],
            source_hash=r["source_hash"],
            agent=r["agent"] or "",
            model=r["model"] or "",
            prompt_hash=r["prompt_hash"] or "",
            island=r["island"] or 0,
            generation=r["generation"] or 0,
            created=r["created"],
            fitness=r["fitness"],
            candidate=Candidate(
                format=r["format"],
                hip_source=r["hip_source"],
                python_source=r["python_source"],
                name=r["name"] or f"c{r['id']}",
            ),
        )

    def candidate_ids(self, run: int) -> list[int]:
        return [r[0] for r in self._rows("SELECT id FROM candidates WHERE run = ?", [run])]

    # ------------------------------------------------------------------------ queue

    def enqueue(self, candidate_id: int) -> None:
        self._set_state(candidate_id, "queued")

    def mark_in_flight(self, candidate_id: int) -> None:
        self._set_state(candidate_id, "in_flight")

    def mark_done(self, candidate_id: int) -> None:
        self._set_state(candidate_id, "done")

    def _set_state(self, candidate_id: int, state: QueueState) -> None:
        with self._write():
            run, _ = self._run_of(candidate_id)
            self._owned(run)
            self._conn.execute(
                "INSERT INTO queue(candidate, run, state, updated) VALUES(?, ?, ?, ?)"
                " ON CONFLICT(candidate) DO UPDATE SET state = excluded.state,"
                " updated = excluded.updated",
                [candidate_id, run, state, now_iso()],
            )

    def queued(self, run: int, state: QueueState = "queued") -> list[int]:
        """Candidates of the run in that queue state, oldest first."""
        rows = self._rows(
            "SELECT candidate FROM queue WHERE run = ? AND state = ? ORDER BY candidate",
            [run, state],
        )
        return [r[0] for r in rows]

    # ------------------------------------------------------------------------ evaluations

    def record_evaluation(
        self, candidate_id: int, evaluation: Evaluation, settings_key: str, toolchain: str
    ) -> Evaluation:
        """Stores the evaluation and marks the candidate's queue row done, in one transaction.

        Idempotent: if an evaluation with the same key (evaluation_key) is stored, nothing new
        is written and the stored one is returned and scores this candidate too.
        """
        with self._write():
            run, source_hash = self._run_of(candidate_id)
            self._owned(run)
            key = evaluation_key(source_hash, settings_key, toolchain)
            row = self._conn.execute(
                "SELECT id, evaluation, fitness FROM evaluations WHERE key = ?", [key]
            ).fetchone()
            if row is not None:
                eval_id, stored, fitness = row[0], Evaluation.model_validate_json(row[1]), row[2]
            else:
                stored, fitness = evaluation, evaluation.fitness
                eval_id = (
                    self.db["evaluations"]
                    .insert(
                        {
                            "candidate": candidate_id,
                            "key": key,
                            "status": evaluation.status.value,
                            "fitness": fitness,
                            "evaluation": evaluation.model_dump_json(),
                            "created": now_iso(),
                        }
                    )
                    .last_pk
                )
            self._conn.execute(
                "UPDATE candidates SET evaluation_id = ?, fitness = ? WHERE id = ?",
                [eval_id, fitness, candidate_id],
            )
            self._conn.execute(
                "UPDATE queue SET state = 'done', updated = ? WHERE candidate = ?",
                [now_iso(), candidate_id],
            )
        return stored

    def evaluated(self, key: str) -> Evaluation | None:
        """The stored evaluation with this idempotency key, if any: check before a GPU run."""
        rows = self._rows("SELECT evaluation FROM evaluations WHERE key = ?", [key])
        return Evaluation.model_validate_json(rows[0][0]) if rows else None

    def evaluation_of(self, candidate_id: int) -> Evaluation | None:
        """The evaluation that scores the candidate (the latest recorded for it)."""
        rows = self._rows(
            "SELECT e.evaluation FROM candidates c JOIN evaluations e ON e.id = c.evaluation_id"
            " WHERE c.id = ?",
            [candidate_id],
        )
        return Evaluation.model_validate_json(rows[0][0]) if rows else None

    def count_evaluations(self, run: int) -> int:
        """Evaluations this run paid for (cache hits from other runs are not counted)."""
        rows = self._rows(
            "SELECT count(*) FROM evaluations e JOIN candidates c ON c.id = e.candidate"
            " WHERE c.run = ?",
            [run],
        )
        return rows[0][0]

    def top(self, run: int, k: int) -> list[Scored]:
        """The k fittest ok candidates of the run, best first (ties: the older first)."""
        rows = self._rows(
            "SELECT c.id, c.island, c.fitness, e.evaluation FROM candidates c"
            " JOIN evaluations e ON e.id = c.evaluation_id"
            " WHERE c.run = ? AND c.fitness > 0 ORDER BY c.fitness DESC, c.id LIMIT ?",
            [run, k],
        )
        return [
            Scored(
                candidate_id=r[0],
                island=r[1] or 0,
                fitness=r[2],
                evaluation=Evaluation.model_validate_json(r[3]),
            )
            for r in rows
        ]

    def best(self, run: int) -> Scored | None:
        found = self.top(run, 1)
        return found[0] if found else None

    # ------------------------------------------------------------------------ elites

    def set_elite(
        self, run: int, island: int, cell: str, candidate_id: int, fitness: float
    ) -> None:
        """Puts the candidate in the island's MAP-Elites cell, replacing whoever was there."""
        with self._write():
            self._owned(run)
            self._conn.execute(
                "INSERT INTO elites(run, island, cell, candidate, fitness) VALUES(?, ?, ?, ?, ?)"
                " ON CONFLICT(run, island, cell) DO UPDATE SET candidate = excluded.candidate,"
                " fitness = excluded.fitness",
                [run, island, cell, candidate_id, fitness],
            )

    def elites(self, run: int, island: int | None = None) -> list[Elite]:
        """The run's elites (of one island, or all), by island then cell."""
        sql = "SELECT run, island, cell, candidate, fitness FROM elites WHERE run = ?"
        params: list[Any] = [run]
        if island is not None:
            sql += " AND island = ?"
            params.append(island)
        return [_elite(r) for r in self._rows(sql + " ORDER BY island, cell", params)]

    def random_elite(self, run: int, island: int, rng: random.Random) -> Elite | None:
        """A uniform draw from the island's elites; deterministic for the rng's seed."""
        n = self._rows("SELECT count(*) FROM elites WHERE run = ? AND island = ?", [run, island])
        if not n[0][0]:
            return None
        rows = self._rows(
            "SELECT run, island, cell, candidate, fitness FROM elites WHERE run = ?"
            " AND island = ? ORDER BY cell LIMIT 1 OFFSET ?",
            [run, island, rng.randrange(n[0][0])],
        )
        return _elite(rows[0])

    # ------------------------------------------------------------------------ accounting

    def record_llm_call(
        self,
        run: int,
        role: str,
        model: str,
        prompt_hash: str,
        tokens_in: int,
        tokens_out: int,
        cost_usd: float,
        latency_s: float,
    ) -> int:
        with self._write():
            self._owned(run)
            return (
                self.db["llm_calls"]
                .insert(
                    {
                        "run": run,
                        "role": role,
                        "model": model,
                        "prompt_hash": prompt_hash,
                        "tokens_in": tokens_in,
                        "tokens_out": tokens_out,
                        "cost_usd": cost_usd,
                        "latency_s": latency_s,
                        "created": now_iso(),
                    }
                )
                .last_pk
            )

    def llm_usage(self, run: int) -> LlmUsage:
        """Totals over the run's LLM calls, for token and cost budgets."""
        r = self._rows(
            "SELECT count(*), coalesce(sum(tokens_in), 0), coalesce(sum(tokens_out), 0),"
            " coalesce(sum(cost_usd), 0.0) FROM llm_calls WHERE run = ?",
            [run],
        )[0]
        return LlmUsage(calls=r[0], tokens_in=r[1], tokens_out=r[2], cost_usd=r[3])

    def log_event(self, run: int, kind: str, data: Mapping[str, Any]) -> int:
        with self._write():
            self._owned(run)
            return self._log(run, kind, data)

    def _log(self, run: int, kind: str, data: Mapping[str, Any]) -> int:
        cursor = self._conn.execute(
            "INSERT INTO events(run, kind, data, created) VALUES(?, ?, ?, ?)",
            [run, kind, canonical_json(data), now_iso()],
        )
        return cursor.lastrowid or 0

    def events(self, run: int, kind: str | None = None) -> list[Event]:
        sql, params = "SELECT * FROM events WHERE run = ?", [run]
        if kind is not None:
            sql, params = sql + " AND kind = ?", [run, kind]
        return [
            Event(
                id=r["id"],
                run=r["run"],
                kind=r["kind"],
                data=json.loads(r["data"]),
                created=r["created"],
            )
            for r in self._rows(sql + " ORDER BY id", params)
        ]


_RUN_SQL = (
    "SELECT r.*, l.pid, l.host, l.proc_start, l.token, l.heartbeat"
    " FROM runs r LEFT JOIN run_locks l ON l.run = r.id"
)


def _elite(r: sqlite3.Row) -> Elite:
    return Elite(run=r[0], island=r[1], cell=r[2], candidate_id=r[3], fitness=r[4])


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
