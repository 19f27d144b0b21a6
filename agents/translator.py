"""translator: a first native candidate for a task, from its PyTorch reference (a model), from
the task's shipped seed kernels (offline), or from CUDA source (agents/cuda_translation.py)."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from hipevolve.agents.context import AgentContext
from hipevolve.agents.mutator import cases_text
from hipevolve.agents.replies_record import candidate_from
from hipevolve.agents.state import Failure, ProposalState
from hipevolve.prompts.render import block, render, schema_text
from hipevolve.taskspec import TaskSpec
from hipevolve.verifier.candidate import Candidate, load_candidate

ROLE = "translator"


class TranslationReply(BaseModel):
    """The first candidate, as two fenced blocks: one ```hip block (kernel.hip) and one
    ```python block (model.py) following the native contract."""


def offline(task: TaskSpec, seen: frozenset[str]) -> Candidate | None:
    """The first of the task's shipped seed kernels not yet seen."""
    for folder in task.seeds:
        candidate = load_candidate(folder)
        if candidate.source_hash not in seen:
            return candidate
    return None


def prompt(ctx: AgentContext) -> str:
    return render(
        "translator",
        task_name=ctx.task.name,
        task_description=ctx.task.description,
        reference=block(ctx.reference_source()),
        cases=cases_text(ctx),
        schema=schema_text(TranslationReply, json_reply=False),
    )


def node(ctx: AgentContext) -> Callable[[ProposalState], dict]:
    def translator(state: ProposalState) -> dict:
        """A candidate for an empty island: the model's translation, or a shipped seed."""
        base = {"parents": (), "author": ROLE, "base": None}
        if not ctx.uses_model(ROLE) or state.get("stopped"):
            found = offline(ctx.task, ctx.workshop.seen())
            return {**base, "candidate": found, "model": "", "prompt_hash": "",
                    "failure": None if found else Failure(kind="nothing", message="no seed")}  # fmt: skip
        call = ctx.ask(ROLE, prompt(ctx))
        if not call.ok:
            stopped = ctx.ensemble.stop_reason() if ctx.ensemble else None
            return {**base, "candidate": None, "stopped": stopped,
                    "failure": Failure(kind="llm_error", message=call.error or "")}  # fmt: skip
        got = candidate_from(ctx, ROLE, call, None)
        update = {**base, "model": call.model, "prompt_hash": call.prompt_hash}
        if isinstance(got, Failure):
            return {**update, "candidate": None, "failure": got}
        return {**update, "candidate": got, "failure": None}

    return translator
