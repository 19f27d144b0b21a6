"""What the archive returns: frozen records, and the canonical forms it keys and stores by.

Kept apart from store.py so the table access (tables.py) and the store share them without a
cycle; store.py re-exports every name here, so `from hipevolve.archive.store import ...` works.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation

RunStatus = Literal["running", "finished", "interrupted"]
QueueState = Literal["queued", "in_flight", "done"]
EdgeKind = Literal["mutation", "crossover", "inspiration", "migration"]


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


class Attempt(Record):
    """What an agent meant by a candidate it wrote: the idea, the diagnosis it acted on, and
    the model's reply (trimmed)."""

    idea: str = ""
    diagnosis: str = ""
    reply: str = ""


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
    attempt: Attempt = Field(default_factory=Attempt, description="an agent's idea and reply")


class Tried(Record):
    """An earlier attempt near a parent, with its outcome: what a prompt's memory shows."""

    candidate_id: int
    generation: int
    island: int
    agent: str
    from_parent: bool = Field(description="a child of the parent asked about")
    idea: str
    status: str
    fitness: float
    message: str = Field(description="the first line of why it failed; empty when ok")


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


class Stored(Record):
    """A candidate of a run as its budget counts it (evolution/budget.py): its code, the
    generation that first stored it and the agent that wrote it."""

    candidate_id: int
    source_hash: str
    generation: int
    agent: str = ""


class EvaluationCounts(Record):
    evaluated: int  # candidates of the run with an evaluation (cache hits included)
    ok: int  # of those, the ones whose evaluation has status ok


class LlmUsage(Record):
    calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float


class Outcome(Record):
    """One evaluated candidate of a run, without its sources."""

    candidate_id: int
    island: int
    generation: int
    status: str
    fitness: float


class LineageEdge(Record):
    child: int
    parent: int
    kind: EdgeKind
    parent_fitness: float = Field(description="the parent's fitness; 0 if it has none")


class EvaluatedRecord(Record):
    """A candidate with the evaluation that scores it."""

    candidate: CandidateRecord
    evaluation_id: int
    evaluated_for: int = Field(
        description="the candidate the evaluation was made for: another one's id when this "
        "candidate's result came from the cache (same source, settings and toolchain)"
    )
    evaluation: Evaluation
    evaluated: str = Field(description="when the evaluation was recorded (ISO time)")


class RoleUsage(Record):
    """LLM calls of one role and model in a run."""

    role: str
    model: str
    calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    mean_latency_s: float


class ModelUsage(Record):
    """One model's share of a run: its calls and spending, and the children it wrote."""

    model: str
    calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float
    children: int = Field(description="evaluated candidates the model wrote")
    improved: int = Field(description="of those, the ones fitter than their fittest parent")


class Attempted(Record):
    """One evaluated candidate of a run, with the idea behind it and its fittest code parent:
    what the run's notes are built from (no sources, no evaluation JSON)."""

    candidate_id: int
    generation: int
    agent: str
    model: str
    fitness: float
    status: str
    idea: str
    parent_id: int | None = Field(
        description="its fittest evaluated mutation or crossover parent, or where that one "
        "failed, the nearest correct ancestor of it: what its gain counts from"
    )


class Credit(Record):
    """The fitness one role's model gained over the parents of the children it wrote."""

    role: str
    model: str
    reward: float = Field(
        description="sum over its evaluated children of max(0, fitness - "
        "the fittest parent's fitness)"
    )


class Note(Record):
    """A run's scratchpad note: what was tried and learned up to a generation."""

    run: int
    generation: int
    text: str
    author: str = Field(description="the model that wrote it; empty: built from the archive")
    created: str


class Event(Record):
    id: int
    run: int
    kind: str
    data: dict[str, Any]
    created: str


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def evaluation_key(source_hash: str, settings_key: str, toolchain: str) -> str:
    """The idempotency key of an evaluation: same source, settings and toolchain, same result.

    `settings_key` is the evaluation settings as canonical JSON; it must name the task and
    its cases (so one kernel on two tasks never shares a key). `toolchain` is the compiler and
    runtime versions and the device.
    """
    return hashlib.sha256("\0".join((source_hash, settings_key, toolchain)).encode()).hexdigest()
