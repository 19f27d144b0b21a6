"""The archive's search tables: candidates and lineage, the queue, evaluations, elites, accounting.

A mixin of Archive (store.py), which supplies the connection, the write transaction and the run
lock check; every write here is one `_write()` transaction that first proves this Archive holds
the run (`_owned`), so the write-through and single-writer rules of store.py hold for all of it.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hipevolve.archive import schema
from hipevolve.archive.records import (
    Attempt,
    CandidateRecord,
    EdgeKind,
    Elite,
    EvaluationCounts,
    Event,
    LlmUsage,
    Note,
    QueueState,
    Scored,
    Stored,
    evaluation_key,
    now_iso,
)
from hipevolve.core.base import canonical_json
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation

if TYPE_CHECKING:
    from sqlite_utils import Database


class Tables:
    """Reads and writes of a run's records; Archive provides the members declared below."""

    if TYPE_CHECKING:
        path: Path
        db: Database
        _conn: sqlite3.Connection

        def _write(self) -> AbstractContextManager[None]: ...
        def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]: ...
        def _owned(self, run: int) -> None: ...

    def _run_of(self, candidate_id: int) -> tuple[int, str]:
        """Inside a transaction: the candidate's run and source hash (KeyError if unknown)."""
        row = self._conn.execute(
            "SELECT run, source_hash FROM candidates WHERE id = ?", [candidate_id]
        ).fetchone()
        if row is None:
            raise KeyError(f"no candidate {candidate_id} in {self.path}")
        return row[0], row[1]

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
        attempt: Attempt | None = None,
    ) -> int:
        """Stores a candidate with its lineage (and, for one an agent wrote, the idea, diagnosis
        and reply behind it); returns its id.

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
            if attempt is not None and (attempt.idea or attempt.diagnosis or attempt.reply):
                self._conn.execute(
                    "INSERT OR IGNORE INTO attempts(candidate, idea, diagnosis, reply)"
                    " VALUES(?, ?, ?, ?)",
                    [cid, attempt.idea, attempt.diagnosis, attempt.reply],
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
            attempt=self._attempt(candidate_id),
        )

    def _attempt(self, candidate_id: int) -> Attempt:
        """The idea, diagnosis and reply an agent stored with a candidate (empty: none)."""
        rows = self._rows(
            "SELECT idea, diagnosis, reply FROM attempts WHERE candidate = ?", [candidate_id]
        )
        if not rows:
            return Attempt()
        idea, diagnosis, reply = rows[0]
        return Attempt(idea=idea or "", diagnosis=diagnosis or "", reply=reply or "")

    def candidate_ids(self, run: int) -> list[int]:
        return [r[0] for r in self._rows("SELECT id FROM candidates WHERE run = ?", [run])]

    def source_hashes_before(self, run: int, generation: int) -> frozenset[str]:
        """Source hashes of the run's candidates from generations before `generation`: the code
        a (replayed) generation must not propose again, and the budget already spent."""
        rows = self._rows(
            "SELECT source_hash FROM candidates WHERE run = ? AND generation < ?",
            [run, generation],
        )
        return frozenset(r[0] for r in rows)

    def stored(self, run: int) -> list[Stored]:
        """Every candidate of the run with its source hash and generation, by id: what its
        budget admitted (evolution/budget.py RunBudget.from_archive)."""
        rows = self._rows(
            "SELECT id, source_hash, coalesce(generation, 0), coalesce(agent, '') FROM candidates"
            " WHERE run = ? ORDER BY id",
            [run],
        )
        return [
            Stored(candidate_id=r[0], source_hash=r[1], generation=r[2], agent=r[3]) for r in rows
        ]

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
        self,
        candidate_id: int,
        evaluation: Evaluation,
        settings_key: str,
        toolchain: str,
        *,
        scores: bool = True,
    ) -> Evaluation:
        """Stores the evaluation and marks the candidate's queue row done, in one transaction.

        Idempotent: if an evaluation with the same key (evaluation_key) is stored, nothing new
        is written and the stored one is returned and scores this candidate too.
        scores: False stores it beside the candidate's score without replacing it (a round of a
        head-to-head: evolution/duel.py).
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
            if scores:
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

    def evaluation_counts(self, run: int) -> EvaluationCounts:
        """How many of the run's candidates have an evaluation, and how many of those are ok;
        unlike count_evaluations, a cache hit from another run counts (it scores a candidate)."""
        r = self._rows(
            "SELECT count(*), coalesce(sum(e.status = 'ok'), 0) FROM candidates c"
            " JOIN evaluations e ON e.id = c.evaluation_id WHERE c.run = ?",
            [run],
        )[0]
        return EvaluationCounts(evaluated=r[0], ok=r[1])

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
        """The run's best: the champion its referee last recorded (evolution/referee.py: a
        child beats it only clearly or head to head), else the fittest ok candidate."""
        champion = self.champion(run)
        if champion is not None:
            rows = self._rows(
                "SELECT c.id, c.island, c.fitness, e.evaluation FROM candidates c"
                " JOIN evaluations e ON e.id = c.evaluation_id WHERE c.id = ? AND c.run = ?",
                [champion, run],
            )
            if rows:
                r = rows[0]
                return Scored(
                    candidate_id=r[0],
                    island=r[1] or 0,
                    fitness=r[2],
                    evaluation=Evaluation.model_validate_json(r[3]),
                )
        found = self.top(run, 1)
        return found[0] if found else None

    def champion(self, run: int) -> int | None:
        """The candidate the run's last checkpoint (or its end) names as its best, if any."""
        row = self._rows(
            "SELECT data FROM events WHERE run = ? AND kind IN ('generation', 'champion')"
            " ORDER BY id DESC LIMIT 1",
            [run],
        )
        if not row:
            return None
        found = json.loads(row[0][0]).get("champion")
        return int(found["candidate_id"]) if isinstance(found, dict) else None

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

    # ------------------------------------------------------------------------ scratchpad

    def add_note(self, run: int, generation: int, text: str, author: str = "") -> bool:
        """Stores the run's scratchpad note for `generation`; False (nothing written) when the
        generation has one already (a resumed run never writes it twice)."""
        with self._write():
            self._owned(run)
            cursor = self._conn.execute(
                "INSERT OR IGNORE INTO notes(run, generation, text, author, created)"
                " VALUES(?, ?, ?, ?, ?)",
                [run, generation, text, author, now_iso()],
            )
            return cursor.rowcount == 1

    def latest_note(self, run: int) -> Note | None:
        """The run's newest scratchpad note, or None."""
        notes = self.notes(run)
        return notes[-1] if notes else None

    def notes(self, run: int) -> list[Note]:
        """The run's scratchpad notes, oldest first."""
        rows = self._rows(
            "SELECT run, generation, text, author, created FROM notes WHERE run = ?"
            " ORDER BY generation",
            [run],
        )
        return [
            Note(run=r[0], generation=r[1], text=r[2], author=r[3] or "", created=r[4])
            for r in rows
        ]

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


def _elite(r: sqlite3.Row) -> Elite:
    return Elite(run=r[0], island=r[1], cell=r[2], candidate_id=r[3], fitness=r[4])
