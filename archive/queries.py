"""Read-only questions the exports and the report ask of a run: outcomes, lineage edges, the
evaluated candidates with their sources, LLM use per role, stored task specs.

A mixin of Archive, like Tables (tables.py): the SQL stays inside archive/, and callers get
frozen records back (records.py).
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hipevolve.archive.records import (
    Attempt,
    Attempted,
    CandidateRecord,
    Credit,
    EvaluatedRecord,
    LineageEdge,
    ModelUsage,
    Outcome,
    RoleUsage,
    Tried,
)
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation
from hipevolve.core.taskspec import TaskSpec

if TYPE_CHECKING:
    from sqlite_utils import Database


class Queries:
    """Reads for the exports and the report; Archive provides the members declared below."""

    if TYPE_CHECKING:
        path: Path
        db: Database

        def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]: ...

    def outcomes(self, run: int) -> list[Outcome]:
        """Every candidate of the run that has an evaluation (cache hits included), by id."""
        rows = self._rows(
            "SELECT c.id, c.island, c.generation, e.status, coalesce(c.fitness, 0) FROM candidates c"
            " JOIN evaluations e ON e.id = c.evaluation_id WHERE c.run = ? ORDER BY c.id",
            [run],
        )
        return [
            Outcome(
                candidate_id=r[0], island=r[1] or 0, generation=r[2] or 0, status=r[3], fitness=r[4]
            )
            for r in rows
        ]

    def count_scored(self, run: int) -> int:
        """Candidates of the run that have an evaluation (cache hits from other runs included)."""
        return self._rows(
            "SELECT count(*) FROM candidates WHERE run = ? AND evaluation_id IS NOT NULL", [run]
        )[0][0]

    def lineage_edges(self, run: int) -> list[LineageEdge]:
        """Every edge into the run's candidates, with the parent's fitness (0 if unscored)."""
        rows = self._rows(
            "SELECT l.child, l.parent, l.kind, coalesce(p.fitness, 0) FROM lineage l"
            " JOIN candidates c ON c.id = l.child LEFT JOIN candidates p ON p.id = l.parent"
            " WHERE c.run = ? ORDER BY l.child, l.parent, l.kind",
            [run],
        )
        return [LineageEdge(child=r[0], parent=r[1], kind=r[2], parent_fitness=r[3]) for r in rows]

    def evaluated_records(self, run: int) -> Iterator[EvaluatedRecord]:
        """The run's evaluated candidates with their sources and scoring evaluation, in the order
        the evaluations were recorded; streamed, so a large run is never held in memory."""
        cursor = self.db.execute(
            "SELECT c.id, c.run, c.source_hash, c.format, c.name, c.hip_source, c.python_source,"
            " c.agent, c.model, c.prompt_hash, c.island, c.generation, c.created, c.fitness,"
            " e.id, e.candidate, e.evaluation, e.created, a.idea, a.diagnosis, a.reply"
            " FROM candidates c JOIN evaluations e ON e.id = c.evaluation_id"
            " LEFT JOIN attempts a ON a.candidate = c.id"
            " WHERE c.run = ? ORDER BY e.id, c.id",
            [run],
        )
        for r in cursor:
            record = CandidateRecord(
                id=r[0],
                run=r[1],
                source_hash=r[2],
                agent=r[7] or "",
                model=r[8] or "",
                prompt_hash=r[9] or "",
                island=r[10] or 0,
                generation=r[11] or 0,
                created=r[12],
                fitness=r[13],
                candidate=Candidate(
                    format=r[3], name=r[4] or f"c{r[0]}", hip_source=r[5], python_source=r[6]
                ),
                attempt=Attempt(idea=r[18] or "", diagnosis=r[19] or "", reply=r[20] or ""),
            )
            yield EvaluatedRecord(
                candidate=record,
                evaluation_id=r[14],
                evaluated_for=r[15],
                evaluation=Evaluation.model_validate_json(r[16]),
                evaluated=r[17],
            )

    def tried_near(self, run: int, parent: int | None, island: int, limit: int = 6) -> list[Tried]:
        """The latest evaluated attempts from `parent` and on `island` (the parent's children
        first), newest first, with the idea behind each and its outcome."""
        rows = self._rows(
            "SELECT c.id, c.generation, c.island, c.agent, coalesce(a.idea, ''), e.status,"
            " coalesce(c.fitness, 0), e.evaluation,"
            " EXISTS(SELECT 1 FROM lineage l WHERE l.child = c.id AND l.parent = ?"
            "        AND l.kind IN ('mutation', 'crossover')) AS from_parent"
            " FROM candidates c JOIN evaluations e ON e.id = c.evaluation_id"
            " LEFT JOIN attempts a ON a.candidate = c.id"
            " WHERE c.run = ? AND (c.island = ? OR from_parent) AND c.generation > 0"
            " ORDER BY from_parent DESC, c.id DESC LIMIT ?",
            [parent if parent is not None else -1, run, island, limit],
        )
        tried = []
        for r in rows:
            message = ""
            if r[5] != "ok":
                lines = Evaluation.model_validate_json(r[7]).message.strip().splitlines()
                message = lines[0][:200] if lines else ""
            tried.append(
                Tried(
                    candidate_id=r[0],
                    generation=r[1] or 0,
                    island=r[2] or 0,
                    agent=r[3] or "",
                    from_parent=bool(r[8]),
                    idea=r[4],
                    status=r[5],
                    fitness=r[6],
                    message=message,
                )
            )
        return tried

    def llm_usage_by_role(self, run: int) -> list[RoleUsage]:
        """The run's LLM calls summed per role and model, in role then model order."""
        rows = self._rows(
            "SELECT role, model, count(*), coalesce(sum(tokens_in), 0),"
            " coalesce(sum(tokens_out), 0), coalesce(sum(cost_usd), 0.0),"
            " coalesce(avg(latency_s), 0.0)"
            " FROM llm_calls WHERE run = ? GROUP BY role, model ORDER BY role, model",
            [run],
        )
        return [
            RoleUsage(
                role=r[0],
                model=r[1] or "",
                calls=r[2],
                tokens_in=r[3],
                tokens_out=r[4],
                cost_usd=r[5],
                mean_latency_s=r[6],
            )
            for r in rows
        ]

    def llm_usage_by_model(self, run: int) -> list[ModelUsage]:
        """The run's LLM calls summed per model, with the evaluated children each model wrote
        and how many of them beat the code their gain counts from (attempted); by model name."""
        calls = {
            r[0]: r[1:]
            for r in self._rows(
                "SELECT model, count(*), coalesce(sum(tokens_in), 0), coalesce(sum(tokens_out), 0),"
                " coalesce(sum(cost_usd), 0.0) FROM llm_calls WHERE run = ? AND coalesce(model, '')"
                " != '' GROUP BY model",
                [run],
            )
        }
        children: dict[str, tuple[int, int]] = {}  # model -> (evaluated children, improved)
        for child, base in self._gains(run):
            if child.model:
                written, improved = children.get(child.model, (0, 0))
                better = base is not None and child.fitness > base.fitness
                children[child.model] = (written + 1, improved + better)
        out = []
        for model in sorted(set(calls) | set(children)):
            n, t_in, t_out, cost = calls.get(model, (0, 0, 0, 0.0))
            written, improved = children.get(model, (0, 0))
            out.append(
                ModelUsage(
                    model=model,
                    calls=n,
                    tokens_in=t_in,
                    tokens_out=t_out,
                    cost_usd=cost,
                    children=written,
                    improved=improved,
                )
            )
        return out

    def attempted(self, run: int) -> list[Attempted]:
        """Every evaluated candidate of the run, by id, with its idea and the code its gain
        counts from: its fittest evaluated code parent, or where that failed (a repair of a
        failed child) that parent's nearest correct ancestor; one lean pass (no sources), so a
        long run's notes stay cheap."""
        rows = self._rows(
            "SELECT c.id, c.generation, c.agent, c.model, coalesce(c.fitness, 0), e.status,"
            " coalesce(a.idea, ''),"
            " (SELECT p.id FROM lineage l JOIN candidates p ON p.id = l.parent"
            "  WHERE l.child = c.id AND l.kind IN ('mutation', 'crossover')"
            "  AND p.evaluation_id IS NOT NULL ORDER BY coalesce(p.fitness, 0) DESC, p.id LIMIT 1)"
            " FROM candidates c JOIN evaluations e ON e.id = c.evaluation_id"
            " LEFT JOIN attempts a ON a.candidate = c.id WHERE c.run = ? ORDER BY c.id",
            [run],
        )
        status = {r[0]: r[5] for r in rows}
        parent = {r[0]: r[7] for r in rows}

        def correct(cid: int | None) -> int | None:
            """cid, or its nearest ancestor with status ok (a repair's fittest parent failed:
            its gain counts from the code that last passed, never from 0)."""
            seen: set[int] = set()
            while cid is not None and status.get(cid) != "ok" and cid not in seen:
                seen.add(cid)
                cid = parent.get(cid)
            return cid if cid is not None and status.get(cid) == "ok" else None

        return [
            Attempted(
                candidate_id=r[0],
                generation=r[1] or 0,
                agent=r[2] or "",
                model=r[3] or "",
                fitness=r[4],
                status=r[5],
                idea=r[6],
                parent_id=correct(r[7]),
            )
            for r in rows
        ]

    def credits(self, run: int) -> list[Credit]:
        """Per role and model: the fitness its evaluated children gained over the code their
        gain counts from (attempted: the fittest parent, or a failed one's nearest correct
        ancestor; 0 for one without), summed; what a resumed bandit starts from."""
        reward: dict[tuple[str, str], float] = defaultdict(float)
        for child, base in self._gains(run):
            if child.model:
                gain = child.fitness - (base.fitness if base is not None else 0.0)
                reward[(child.agent, child.model)] += max(0.0, gain)
        return [
            Credit(role=role, model=model, reward=r) for (role, model), r in sorted(reward.items())
        ]

    def _gains(self, run: int) -> list[tuple[Attempted, Attempted | None]]:
        """Each evaluated candidate of the run with the one its gain counts from (or None)."""
        rows = {a.candidate_id: a for a in self.attempted(run)}
        return [
            (a, rows.get(a.parent_id) if a.parent_id is not None else None) for a in rows.values()
        ]

    def stored_task(self, name: str) -> TaskSpec | None:
        """The task spec a run stored when it started, or None."""
        rows = self._rows("SELECT spec FROM tasks WHERE name = ?", [name])
        if not rows or not rows[0][0]:
            return None
        return TaskSpec.model_validate_json(rows[0][0])
