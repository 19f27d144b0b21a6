"""The graph's typed state and its hard limits.

One graph run writes the children of one proposal: parent -> diagnosis -> idea -> candidate ->
audit -> evaluation, with bounded repair and re-check loops. `children` accumulates every
candidate the run had evaluated (the loop records nothing twice).
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation
from hipevolve.evolution.child import Child, Proposal


class AgentLimits(BaseModel):
    """Hard limits on every loop of the graph."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repair_turns: int = Field(default=2, ge=0, le=6, description="repairer turns per proposal")
    audit_rechecks: int = Field(default=1, ge=0, le=1, description="hidden-seed re-checks")
    surprising_speedup: float = Field(default=3.0, gt=1, description="fitness sent back")
    proposals_per_generation: int = Field(default=8, ge=1, description="graph runs per generation")
    concurrency: int = Field(default=2, ge=1, le=32, description="graph runs at once")
    raw_reply_chars: int = Field(default=16384, ge=0, description="kept of a malformed reply")

    def recursion_limit(self) -> int:
        """langgraph steps one run may take: the longest path with every loop at its limit."""
        return 8 + 3 * (self.repair_turns + 1) + 2 * self.audit_rechecks


class Failure(BaseModel):
    """What the repairer is shown: why the current candidate (or reply) failed."""

    model_config = ConfigDict(frozen=True)

    kind: str  # parse_error, rejected, compile_error, incorrect, runtime_error, timeout, ...
    message: str
    detail: str = ""  # the trimmed compiler log or mismatch summary, in the candidate's lines


Phase = Literal["screen", "winner", "recheck", "done"]


class ProposalState(TypedDict, total=False):
    mode: Literal["evolve", "task"]
    proposal: Proposal
    parent: Candidate | None
    parent_evaluation: Evaluation | None
    diagnosis: str
    idea: str
    transform: str | None
    # the candidate in hand, who wrote it and from what
    candidate: Candidate | None
    base: Candidate | None  # what a reply's edits apply to (the parent, or the failed child)
    parents: tuple[int, ...]
    author: str  # role that wrote the candidate
    model: str
    prompt_hash: str
    # the verifier's answer and the loops
    candidate_id: int | None
    evaluation: Evaluation | None
    failure: Failure | None
    repair_turns: int
    rechecks: int
    phase: Phase
    stopped: str | None
    children: Annotated[list[Child], operator.add]
    task_idea: dict | None
