"""The archive's tables and their migrations.

The schema version is the number of migrations applied. A new archive runs every migration from
an empty file, so the path an old archive takes to the present is the same code a new one runs.
Append a migration to MIGRATIONS to change the schema; never edit one that has shipped.

v1: meta, tasks, runs, run_locks, candidates, lineage, evaluations, queue, elites.
v2: evaluations.fitness (backfilled from the stored Evaluation JSON),
    candidates.evaluation_id and candidates.fitness (the evaluation that scores a candidate,
    cache hits from other runs included; indexed for best-k),
    llm_calls and events (accounting and the run's log).
v3: attempts: the idea, diagnosis and model reply behind a candidate an agent wrote (the
    agents' memory of what was tried, and the dataset's reasoning fields).
v4: notes: the run's scratchpad, a summary of what was tried and learned written every few
    generations (agents/scratchpad.py), shown to the optimizer and the mutator.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlite_utils import Database

from hipevolve.core.evaluation import Evaluation

MARKER = "hipevolve"  # meta 'app' value: tells our archives from other SQLite files

RUN_STATUSES = ("running", "finished", "interrupted")
QUEUE_STATES = ("queued", "in_flight", "done")
EDGE_KINDS = ("mutation", "crossover", "inspiration", "migration")


def _v1_initial(db: Database) -> None:
    db["meta"].create({"key": str, "value": str}, pk="key")
    db["tasks"].create({"name": str, "spec": str}, pk="name")
    db["runs"].create(
        {
            "id": int,
            "task": str,
            "settings": str,
            "seed": int,
            "budget": int,
            "status": str,
            "started": str,
            "finished": str,
        },
        pk="id",
        foreign_keys=[("task", "tasks", "name")],
        not_null=["task", "settings", "status", "started"],
    )
    # One row per run being written: who holds it. See archive/lock.py.
    db["run_locks"].create(
        {
            "run": int,
            "pid": int,
            "host": str,
            "proc_start": str,
            "token": str,
            "heartbeat": float,
        },
        pk="run",
        foreign_keys=[("run", "runs", "id")],
        not_null=["pid", "host", "token", "heartbeat"],
    )
    db["candidates"].create(
        {
            "id": int,
            "run": int,
            "source_hash": str,
            "format": str,
            "name": str,
            "hip_source": str,
            "python_source": str,
            "agent": str,
            "model": str,
            "prompt_hash": str,
            "island": int,
            "generation": int,
            "created": str,
        },
        pk="id",
        foreign_keys=[("run", "runs", "id")],
        not_null=["run", "source_hash", "format", "python_source", "created"],
    )
    # Dedupe: one candidate per normalised source per run.
    db["candidates"].create_index(["run", "source_hash"], unique=True)
    db["lineage"].create(
        {"child": int, "parent": int, "kind": str},
        pk=("child", "parent", "kind"),
        foreign_keys=[("child", "candidates", "id"), ("parent", "candidates", "id")],
    )
    db["lineage"].create_index(["parent"])
    db["evaluations"].create(
        {
            "id": int,
            "candidate": int,
            "key": str,
            "status": str,
            "evaluation": str,
            "created": str,
        },
        pk="id",
        foreign_keys=[("candidate", "candidates", "id")],
        not_null=["candidate", "key", "status", "evaluation", "created"],
    )
    db["evaluations"].create_index(["key"], unique=True)
    db["evaluations"].create_index(["candidate"])
    db["queue"].create(
        {"candidate": int, "run": int, "state": str, "updated": str},
        pk="candidate",
        foreign_keys=[("candidate", "candidates", "id"), ("run", "runs", "id")],
        not_null=["run", "state", "updated"],
    )
    db["queue"].create_index(["run", "state"])
    db["elites"].create(
        {"run": int, "island": int, "cell": str, "candidate": int, "fitness": float},
        pk=("run", "island", "cell"),
        foreign_keys=[("run", "runs", "id"), ("candidate", "candidates", "id")],
        not_null=["candidate", "fitness"],
    )


def _v2_fitness_and_accounting(db: Database) -> None:
    evaluations = db["evaluations"]
    evaluations.add_column("fitness", float)
    rows = list(db.query("SELECT id, evaluation FROM evaluations"))
    for row in rows:
        fitness = Evaluation.model_validate_json(row["evaluation"]).fitness
        db.execute("UPDATE evaluations SET fitness = ? WHERE id = ?", [fitness, row["id"]])
    evaluations.create_index(["fitness"])

    # The scoring evaluation and its fitness sit on the candidate too, so best-k of a run is
    # one index walk (run, fitness) instead of a join and sort over every evaluation.
    candidates = db["candidates"]
    candidates.add_column("evaluation_id", int)
    candidates.add_column("fitness", float)
    db.execute(
        "UPDATE candidates SET evaluation_id ="
        " (SELECT max(e.id) FROM evaluations e WHERE e.candidate = candidates.id)"
    )
    db.execute(
        "UPDATE candidates SET fitness ="
        " (SELECT e.fitness FROM evaluations e WHERE e.id = candidates.evaluation_id)"
    )
    candidates.create_index(["run", "fitness"])
    candidates.create_index(["run", "island"])
    # Covers the lineage graph's node query: without it each row is read past its source
    # text (SQLite keeps long text in overflow pages), 50 MB at 10,000 candidates.
    candidates.create_index(
        ["run", "id", "island", "generation", "agent", "fitness", "evaluation_id"],
        index_name="idx_candidates_lineage",
    )

    db["llm_calls"].create(
        {
            "id": int,
            "run": int,
            "role": str,
            "model": str,
            "prompt_hash": str,
            "tokens_in": int,
            "tokens_out": int,
            "cost_usd": float,
            "latency_s": float,
            "created": str,
        },
        pk="id",
        foreign_keys=[("run", "runs", "id")],
        not_null=["run", "role", "created"],
    )
    db["llm_calls"].create_index(["run"])
    db["events"].create(
        {"id": int, "run": int, "kind": str, "data": str, "created": str},
        pk="id",
        foreign_keys=[("run", "runs", "id")],
        not_null=["run", "kind", "data", "created"],
    )
    db["events"].create_index(["run", "kind"])


def _v3_attempts(db: Database) -> None:
    db["attempts"].create(
        {"candidate": int, "idea": str, "diagnosis": str, "reply": str},
        pk="candidate",
        foreign_keys=[("candidate", "candidates", "id")],
    )


def _v4_notes(db: Database) -> None:
    db["notes"].create(
        {"run": int, "generation": int, "text": str, "author": str, "created": str},
        pk=("run", "generation"),
        foreign_keys=[("run", "runs", "id")],
        not_null=["text", "created"],
    )


MIGRATIONS: list[Callable[[Database], None]] = [
    _v1_initial,
    _v2_fitness_and_accounting,
    _v3_attempts,
    _v4_notes,
]
SCHEMA_VERSION = len(MIGRATIONS)


def stored_version(db: Database) -> int | None:
    """The archive's schema version; 0 for an empty file; None when it is not our archive."""
    if not db.table_names():
        return 0
    if "meta" not in db.table_names():
        return None
    rows = dict(db.execute("SELECT key, value FROM meta").fetchall())
    if rows.get("app") != MARKER:
        return None
    try:
        return int(rows.get("schema_version", ""))
    except ValueError:
        return None


def migrate(db: Database, now: str) -> int:
    """Brings the schema to SCHEMA_VERSION in one IMMEDIATE transaction; returns the old version.

    The version is read again inside the transaction, so two processes opening one old archive
    at once migrate it once. Raises ValueError for a file that is not our archive.
    """
    conn = db.conn
    conn.execute("BEGIN IMMEDIATE")
    try:
        old = stored_version(db)
        if old is None:
            raise ValueError("not a hipevolve archive")
        for step in MIGRATIONS[old:]:
            step(db)
        if old < SCHEMA_VERSION:
            values = {"app": MARKER, "schema_version": str(SCHEMA_VERSION)}
            if old == 0:
                values["created"] = now
            for key, value in values.items():
                db.execute(
                    "INSERT INTO meta(key, value) VALUES(?, ?)"
                    " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    [key, value],
                )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return old
