"""translator: a first native candidate for a task, from its PyTorch reference (a model), from
the task's shipped seed kernels (offline), or from CUDA source (agents/lowering/hipify.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel

from hipevolve.agents.briefing import tolerance_text
from hipevolve.agents.context import AgentContext
from hipevolve.agents.reply_record import call_failed, candidate_from, exchange
from hipevolve.agents.roles.mutator import cases_text
from hipevolve.agents.state import Failure, ProposalState
from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.core.taskspec import TaskSpec
from hipevolve.prompts.render import block, render, schema_text

if TYPE_CHECKING:
    from hipevolve.agents.lowering.lower import Unlowered

ROLE = "translator"


class TranslationReply(BaseModel):
    """The first candidate, as two fenced blocks: one ```hip block (kernel.hip) and one
    ```python block (model.py) following the native contract."""


def offline(task: TaskSpec, seen: frozenset[str]) -> Candidate | None:
    """The first of the task's shipped seed kernels not yet seen; after them (or for a task
    without any), the reference lowered to HIP (agents/lowering/lower.py), where it lowers."""
    for folder in task.seeds:
        candidate = load_candidate(folder)
        if candidate.source_hash not in seen:
            return candidate
    found = lowered(task)
    if isinstance(found, Candidate) and found.source_hash not in seen:
        return found
    return None


def lowered(task: TaskSpec) -> Candidate | Unlowered:
    """The task's reference lowered to a native candidate, or Unlowered (one line: why not);
    computed once per task, reference file and modification time (tracing takes a second)."""
    from hipevolve.agents.lowering.lower import lower  # torch.fx: imported only when lowering

    key = (task.name, task.reference, task.reference.stat().st_mtime)
    if key not in _LOWERED:
        _LOWERED[key] = lower(task)
    return _LOWERED[key]


_LOWERED: dict[tuple, Candidate | Unlowered] = {}


def prompt(ctx: AgentContext) -> str:
    return render(
        "translator",
        task_name=ctx.task.name,
        task_description=ctx.task.description,
        target=ctx.target.sentence(),
        peaks=ctx.target.peaks(),
        tolerance=tolerance_text(ctx.task),
        reference=block(ctx.reference_source()),
        cases=cases_text(ctx),
        schema=schema_text(TranslationReply, json_reply=False),
    )


def node(ctx: AgentContext) -> Callable[[ProposalState], dict]:
    def translator(state: ProposalState) -> dict:
        """A candidate for an empty island: the model's translation, or a shipped seed."""
        base = {"parents": (), "author": ROLE, "base": None, "exchange": ()}
        if not ctx.uses_model(ROLE) or state.get("stopped"):
            found = offline(ctx.task, ctx.workshop.seen())
            return {
                **base,
                "candidate": found,
                "model": "",
                "prompt_hash": "",
                "failure": None if found else Failure(kind="nothing", message="no seed"),
            }
        text = prompt(ctx)
        call = ctx.ask(ROLE, text)
        if not call.ok:
            return {**base, **call_failed(ctx, call)}
        got = candidate_from(ctx, ROLE, call, None)
        update = {
            **base,
            "model": call.model,
            "prompt_hash": call.prompt_hash,
            "exchange": exchange(text, call),
        }
        if isinstance(got, Failure):
            return {**update, "candidate": None, "failure": got}
        return {**update, "candidate": got, "failure": None}

    return translator
