"""The graph's typed state and its hard limits.

One graph run writes the children of one proposal: parent -> diagnosis -> idea -> candidate ->
audit -> evaluation, with bounded repair and re-check loops. `children` accumulates every
candidate the run had evaluated (the loop records nothing twice). The hard limits, AgentLimits,
are the [agents] section of the settings tree (hipevolve/core/config.py), re-exported here.
"""

from __future__ import annotations

import operator
from typing import Annotated, Literal, TypedDict

from pydantic import BaseModel, ConfigDict

from hipevolve.core.candidate import Candidate
from hipevolve.core.config import AgentLimits
from hipevolve.core.evaluation import Evaluation
from hipevolve.evolution.child import Child, Proposal

__all__ = ["AgentLimits", "Failure", "Phase", "ProposalState"]


class Failure(BaseModel):
    """What the repairer is shown: why the current candidate (or reply) failed."""

    model_config = ConfigDict(frozen=True)

    kind: str  # parse_error, rejected, compile_error, incorrect, runtime_error, judge_error, ...
    message: str
    detail: str = ""  # the trimmed compiler log or mismatch summary, in the candidate's lines


Phase = Literal["screen", "winner", "recheck", "done"]


class ProposalState(TypedDict, total=False):
    proposal: Proposal
    parent: Candidate | None
    parent_evaluation: Evaluation | None
    diagnosis: str
    idea: str
    transform: str | None
    shared: tuple[str, str]  # the parent and the run's memory, as the proposal's calls share them
    # the candidate in hand, who wrote it and from what
    candidate: Candidate | None
    base: Candidate | None  # what a reply's edits apply to (the parent, or the failed child)
    parents: tuple[int, ...]
    kind: str  # its lineage edge: "mutation" (the default) or "crossover"
    author: str  # role that wrote the candidate
    model: str
    prompt_hash: str
    exchange: tuple[dict, ...]  # the model turns (user, assistant, ...) that wrote it; () if none
    reply: str  # the model's reply that wrote the candidate in hand
    repairing: str  # the failed candidate the repairer's turns repair, how it failed ("": none)
    fix: str  # what the repair in hand fixed, as its child's idea ("": no candidate repaired)
    # the verifier's answer and the loops
    candidate_id: int | None
    evaluation: Evaluation | None
    failure: Failure | None
    repair_turns: int
    rechecks: int
    phase: Phase
    stopped: str | None
    children: Annotated[list[Child], operator.add]
