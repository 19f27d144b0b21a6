"""optimizer: the next optimisation idea for a parent (the idea, before any code)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import Field

from hipevolve.agents import proposal
from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.messages import Prompt
from hipevolve.agents.llm.structured import JsonReply
from hipevolve.agents.state import ProposalState
from hipevolve.agents.structured_call import ask_json
from hipevolve.evolution.offline.transforms import CATALOGUE
from hipevolve.prompts.render import render, schema_text

ROLE = "optimizer"
# Catalogue transforms worth trying first for each bottleneck the profiler_reader names.
PREFERRED = {
    "memory": ("widen_vector", "restrict_pointers"),
    "latency": ("unroll_constant_loops", "restrict_pointers"),
    "registers": ("restrict_pointers",),
    "compute": ("unroll_constant_loops",),
}


class Idea(JsonReply):
    """One optimisation idea for the parent, concrete enough to implement as an edit."""

    idea: str = Field(description="what to change and why it should be faster, in two sentences")
    transform: str | None = Field(
        default=None, description="name of a known source transform that implements it, or null"
    )

    key_synonyms = {
        "optimization": "idea",
        "optimisation": "idea",
        "description": "idea",
        "suggestion": "idea",
        "proposal": "idea",
        "change": "idea",
        "plan": "idea",
        "next idea": "idea",
        "optimization idea": "idea",
        "optimisation idea": "idea",
        "transformation": "transform",
        "transform name": "transform",
        "source transform": "transform",
        "known transform": "transform",
    }


def offline(diagnosis: str) -> Idea:
    """The catalogue transform the diagnosis points to (the mutator applies it if it can)."""
    bottleneck = diagnosis.split(":", 1)[0].strip()
    names = {t.name: t for t in CATALOGUE}
    for name in PREFERRED.get(bottleneck, ()):
        if name in names:
            return Idea(idea=names[name].rationale, transform=name)
    return Idea(idea="mutate the declared tunable parameters", transform=None)


def prompt(ctx: AgentContext, state: ProposalState, inspirations: str | None = None) -> Prompt:
    own = render(
        "optimizer",
        diagnosis=state.get("diagnosis") or "(none)",
        schema=schema_text(Idea, json_reply=True),
    )
    return proposal.proposal_prompt(ctx, state, own, inspirations)


def node(ctx: AgentContext) -> Callable[[ProposalState], dict]:
    def optimizer(state: ProposalState) -> dict:
        """The idea the mutator implements: the model's, or the diagnosis's catalogue pick."""
        fallback = offline(state.get("diagnosis") or "")
        if not ctx.uses_model(ROLE) or state.get("stopped"):
            return {"idea": fallback.idea, "transform": fallback.transform}
        shared = {"shared": proposal.parent_text(ctx, state)}
        answer = ask_json(ctx, ROLE, prompt(ctx, {**state, **shared}), Idea)
        if answer.value is None:
            stop = {"stopped": answer.stopped} if answer.call_failed else {}
            return {"idea": fallback.idea, "transform": fallback.transform, **shared, **stop}
        return {"idea": answer.value.idea, "transform": answer.value.transform, **shared}

    return optimizer
