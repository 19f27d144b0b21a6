"""The shared head of a proposal's three prompts (profiler_reader, optimizer, mutator).

The three calls of one proposal send the same bytes first, in this order: the system prompt, the
run's briefing (task, target, tolerance, reference; the same all run), the parent (kernel.hip as
the target compiles it, model.py, its results per case, its static facts, and the worked MFMA
example where it uses no matrix cores yet; the same for every proposal from that parent) and the run's memory (the latest attempts near the parent, the run's
notes, the inspirations). Each role's own instructions come last. Each of the three shared parts
ends in a cache marker (agents/llm/messages.py), so the parent is sent once a proposal: the first
call writes it to the provider's cache and the next two read it, as do later proposals from the
same parent.

The parent and memory parts are built once, by the proposal's first role, and kept in the state
(`shared`): the attempts and notes they quote change while other proposals land, and a prefix
that changed between two calls would be a cache miss.
"""

from __future__ import annotations

from hipevolve.agents import briefing, scratchpad
from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.messages import Part, Prompt
from hipevolve.agents.llm.tokens import count_tokens
from hipevolve.agents.state import ProposalState
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation
from hipevolve.prompts.render import block, render

Inspiration = tuple[int, Candidate, "Evaluation | None"]
INSPIRATION_TOKENS = 600  # all inspirations' diffs together, at most


def inspirations_of(ctx: AgentContext, state: ProposalState) -> list[Inspiration]:
    proposal = state["proposal"]
    return [
        (
            e.candidate_id,
            ctx.workshop.source(e.candidate_id),
            ctx.workshop.evaluation_of(e.candidate_id),
        )
        for e in proposal.inspirations
    ]


def inspirations_text(parent: Candidate | None, items: list[Inspiration]) -> str:
    """Each inspiration as a diff against the parent with its outcome, as many as fit in
    INSPIRATION_TOKENS (a diff cut where it would pass them)."""
    text = briefing.inspiration_text(parent, items)
    if count_tokens(text) <= INSPIRATION_TOKENS:
        return text
    kept: list[str] = []
    for line in text.splitlines():
        if count_tokens("\n".join([*kept, line])) > INSPIRATION_TOKENS:
            kept.append("... (the diffs go on; cut to keep the prompt short)\n```")
            break
        kept.append(line)
    return "\n".join(kept)


def parent_text(
    ctx: AgentContext, state: ProposalState, inspirations: str | None = None
) -> tuple[str, str]:
    """(the parent, the run's memory) as the proposal's three calls share them."""
    if state.get("shared"):
        return state["shared"]
    parent, evaluation = state.get("parent"), state.get("parent_evaluation")
    if inspirations is None:
        inspirations = inspirations_text(parent, inspirations_of(ctx, state))
    _, shown = briefing.parent_fields(parent, ctx.target)
    head = (
        render(
            "parent",
            kernel=shown["kernel"],
            kernel_lines=shown["kernel_lines"],
            kernel_folded=shown["kernel_folded"],
            model=block(parent.python_source if parent else ""),
            case_table=briefing.case_table(ctx.task, evaluation, ctx.target),
            static_facts=briefing.facts_text(evaluation.static if evaluation else ()),
            mfma=("\n" + mfma)
            if (mfma := briefing.mfma_text(ctx.target, parent, evaluation))
            else "",
        ).rstrip("\n")
        + "\n\n"
    )
    memory = render(
        "memory",
        tried=briefing.tried_text(ctx.workshop, state["proposal"]),
        notes=scratchpad.notes(ctx),
        inspirations=inspirations,
    )
    return head, memory.rstrip("\n") + "\n\n"


def proposal_prompt(
    ctx: AgentContext, state: ProposalState, own: str, inspirations: str | None = None
) -> Prompt:
    """The role's prompt: the briefing, the parent and the memory (each cached), then its own
    text."""
    head = briefing.briefing(ctx.task, ctx.target) + "\n\n"
    parent, memory = parent_text(ctx, state, inspirations)
    return Prompt(
        (Part(head, cached=True), Part(parent, cached=True), Part(memory, cached=True), Part(own))
    )
