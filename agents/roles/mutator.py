"""mutator: implements the optimizer's idea as an edit of the parent (or a crossover)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from hipevolve.agents import briefing, scratchpad
from hipevolve.agents.context import AgentContext
from hipevolve.agents.reply_record import candidate_from, exchange
from hipevolve.agents.roles.optimizer import inspirations_of, inspirations_text
from hipevolve.agents.state import Failure, ProposalState
from hipevolve.core.candidate import Candidate
from hipevolve.evolution.offline.mutate import transformed
from hipevolve.evolution.offline.policy import propose
from hipevolve.evolution.offline.transforms import CATALOGUE
from hipevolve.prompts.render import block, render, schema_text

ROLE = "mutator"


class CandidateReply(BaseModel):
    """The new candidate: SEARCH/REPLACE edits against the files shown (the line before each
    `<<<<<<< SEARCH` names the file: kernel.hip or model.py), or whole files as one ```hip block
    (kernel.hip) and one ```python block (model.py); a file you leave out is kept as it is.
    Write nothing else that looks like code."""


def cases_text(ctx: AgentContext) -> str:
    return "\n".join(
        f"- {c.name}: {', '.join(f'{k}={v}' for k, v in c.inputs.items())}"
        + ("" if c.timed else " (checked, not timed)")
        for c in ctx.task.cases
    )


def prompt(ctx: AgentContext, state: ProposalState, inspirations: str) -> str:
    parent = state.get("parent")
    _, shown = briefing.parent_fields(parent, ctx.target)
    return render(
        "mutator",
        briefing=briefing.briefing(ctx.task, ctx.target),
        model=block(parent.python_source if parent else ""),
        mfma=briefing.mfma_text(ctx.target),
        case_table=briefing.case_table(ctx.task, state.get("parent_evaluation"), ctx.target),
        idea=state.get("idea") or "(none)",
        diagnosis=state.get("diagnosis") or "(none)",
        tried=briefing.tried_text(ctx.workshop, state["proposal"]),
        notes=scratchpad.notes(ctx),
        inspirations=inspirations,
        schema=schema_text(CandidateReply, json_reply=False),
        **shown,
    )


def offline(ctx: AgentContext, state: ProposalState) -> Candidate | None:
    """The optimizer's transform when it applies and is unseen, else offline.propose's child."""
    parent, name = state.get("parent"), state.get("transform")
    seen = ctx.workshop.seen()
    if parent is not None and name:
        chosen = next((t for t in CATALOGUE if t.name == name), None)
        child = transformed(parent, chosen) if chosen else None
        if child is not None and child.source_hash not in seen:
            return child
    with ctx.rng_lock:
        child = propose(state["proposal"], ctx.workshop.sources, ctx.rng, seen)
    return child.candidate if child else None


def node(ctx: AgentContext) -> Callable[[ProposalState], dict]:
    def mutator(state: ProposalState) -> dict:
        """A child of the parent: from the model's reply, or the offline mutator."""
        parent = state.get("parent")
        proposal = state["proposal"]
        lineage = {"parents": (proposal.parent.candidate_id,) if proposal.parent else (),
                   "base": parent, "author": ROLE, "exchange": ()}  # fmt: skip
        if not ctx.uses_model(ROLE) or state.get("stopped"):
            child = offline(ctx, state)
            return {**lineage, "candidate": child, "model": "", "prompt_hash": "",
                    "failure": None if child else Failure(kind="nothing", message="no child")}  # fmt: skip
        text = prompt(ctx, state, inspirations_text(parent, inspirations_of(ctx, state)))
        call = ctx.ask(ROLE, text)
        if not call.ok:
            stopped = ctx.ensemble.stop_reason() if ctx.ensemble else None
            return {**lineage, "candidate": None, "stopped": stopped,
                    "failure": Failure(kind="llm_error", message=call.error or "")}  # fmt: skip
        got = candidate_from(ctx, ROLE, call, parent)
        lineage["exchange"] = exchange(text, call)
        if isinstance(got, Candidate):  # marker lines a whole file carried: the folded text back
            got = briefing.restored(got, briefing.parent_fields(parent, ctx.target)[0])
        if isinstance(got, Failure):
            return {**lineage, "candidate": None, "failure": got, "model": call.model,
                    "prompt_hash": call.prompt_hash}  # fmt: skip
        return {**lineage, "candidate": got, "failure": None, "model": call.model,
                "prompt_hash": call.prompt_hash, "reply": call.text}  # fmt: skip

    return mutator
