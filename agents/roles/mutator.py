"""mutator: implements the optimizer's idea as an edit of the parent (or a crossover)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from hipevolve.agents import briefing
from hipevolve.agents.case_inputs import case_inputs
from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.messages import Prompt
from hipevolve.agents.proposal import parent_text, proposal_prompt
from hipevolve.agents.reply_record import call_failed, candidate_from, exchange
from hipevolve.agents.state import Failure, ProposalState
from hipevolve.archive.records import Attempt
from hipevolve.core.candidate import Candidate
from hipevolve.evolution.child import Child
from hipevolve.evolution.offline.mutate import transformed
from hipevolve.evolution.offline.policy import propose
from hipevolve.evolution.offline.transforms import CATALOGUE
from hipevolve.prompts.render import render, schema_text

ROLE = "mutator"


class CandidateReply(BaseModel):
    """The new candidate, as the rule below says (kernel.hip or model.py named before each
    edit). Write nothing else that looks like code."""


def cases_text(ctx: AgentContext) -> str:
    return "\n".join(
        f"- {c.name}: {case_inputs(ctx.task, c)}" + ("" if c.timed else " (checked, not timed)")
        for c in ctx.task.cases
    )


def prompt(ctx: AgentContext, state: ProposalState, inspirations: str | None = None) -> Prompt:
    parent = state.get("parent")
    own = render(
        "mutator",
        idea=state.get("idea") or "(none)",
        diagnosis=state.get("diagnosis") or "(none)",
        schema=reply_text(parent),
    )
    return proposal_prompt(ctx, state, own, inspirations)


def reply_text(base: Candidate | None) -> str:
    """The reply section of a code-writing turn: the schema's words and the edit rule."""
    return schema_text(CandidateReply, json_reply=False) + "\n" + briefing.edit_rule(base) + "\n"


def offline(ctx: AgentContext, state: ProposalState) -> Child | None:
    """The optimizer's transform when it applies and is unseen, else offline.propose's child
    (which may cross the parent with an inspiration, or restart from one: its own lineage)."""
    parent, name, proposal = state.get("parent"), state.get("transform"), state["proposal"]
    seen = ctx.workshop.seen()
    if parent is not None and proposal.parent is not None and name:
        chosen = next((t for t in CATALOGUE if t.name == name), None)
        child = transformed(parent, chosen) if chosen else None
        if child is not None and child.source_hash not in seen:
            pid = proposal.parent.candidate_id
            tried = f"offline mutator on candidate {pid}: transform {name} (the optimizer's pick)"
            return Child(
                candidate=child,
                island=proposal.island,
                parents=(pid,),
                attempt=Attempt(idea=tried),
            )
    with ctx.rng_lock:
        return propose(proposal, ctx.workshop.sources, ctx.rng, seen)


def node(ctx: AgentContext) -> Callable[[ProposalState], dict]:
    def mutator(state: ProposalState) -> dict:
        """A child of the parent: from the model's reply, or the offline mutator."""
        parent = state.get("parent")
        proposal = state["proposal"]
        lineage = {
            "parents": (proposal.parent.candidate_id,) if proposal.parent else (),
            "base": parent,
            "author": ROLE,
            "exchange": (),
        }
        if not ctx.uses_model(ROLE) or state.get("stopped"):
            child = offline(ctx, state)
            if child is None:
                return {
                    **lineage,
                    "candidate": None,
                    "model": "",
                    "prompt_hash": "",
                    "failure": Failure(kind="nothing", message="no child"),
                }
            return {
                **lineage,
                "parents": child.parents,
                "kind": child.kind,
                "idea": child.attempt.idea if child.attempt else "",
                "candidate": child.candidate,
                "model": "",
                "prompt_hash": "",
                "failure": None,
            }
        shared = {"shared": parent_text(ctx, state)}
        lineage |= shared
        text = prompt(ctx, {**state, **shared})
        call = ctx.ask(ROLE, text)
        if not call.ok:
            return {**lineage, **call_failed(ctx, call)}
        got = candidate_from(ctx, ROLE, call, parent)
        lineage["exchange"] = exchange(text, call)
        if isinstance(got, Candidate):  # marker lines a whole file carried: the folded text back
            got = briefing.restored(got, briefing.parent_fields(parent, ctx.target)[0])
        if isinstance(got, Failure):
            return {
                **lineage,
                "candidate": None,
                "failure": got,
                "model": call.model,
                "prompt_hash": call.prompt_hash,
            }
        return {
            **lineage,
            "candidate": got,
            "failure": None,
            "model": call.model,
            "prompt_hash": call.prompt_hash,
            "reply": call.text,
        }

    return mutator
