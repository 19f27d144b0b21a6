"""task_generator: new verified tasks near an existing one.

Offline it runs the synthetic generator (problems/synthetic.py: mutation, composition,
constraints, each task verified on its small CPU case and deduplicated by graph hash). With a
model it asks for a TaskIdea; ideas are recorded in the archive's events for a person (or the
generator's templates) to turn into verified tasks: a model's reference is not run here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from hipevolve.agents.context import AgentContext
from hipevolve.agents.state import ProposalState
from hipevolve.agents.structured import parse_json_reply
from hipevolve.prompts.render import block, render, schema_text

ROLE = "task_generator"


class TaskIdea(BaseModel):
    """A new task near the existing one."""

    name: str = Field(description="snake_case task name")
    description: str = Field(description="one line: what it computes and why it matters")
    reference: str = Field(description="Python source: class Model, get_inputs, get_init_inputs")


def offline(ctx: AgentContext, out_dir: Path, seed: int) -> dict:
    from hipevolve.problems.synthetic import generate_tasks

    report = generate_tasks(n=1, seed=seed, modes=("mutate",), sources=[ctx.task], out_dir=out_dir)
    return report.model_dump(mode="json")


def node(ctx: AgentContext, out_dir: Path | None = None) -> Callable[[ProposalState], dict]:
    def task_generator(state: ProposalState) -> dict:
        """One task idea (model) or one verified synthetic task (offline, into out_dir)."""
        if not ctx.uses_model(ROLE):
            if out_dir is None:
                return {"task_idea": None}
            return {"task_idea": offline(ctx, out_dir, ctx.rng.randrange(1 << 30))}
        call = ctx.ask(ROLE, render(
            "task_generator", task_name=ctx.task.name, task_description=ctx.task.description,
            reference=block(ctx.reference_source()), schema=schema_text(TaskIdea, json_reply=True),
        ))  # fmt: skip
        idea = parse_json_reply(call.text, TaskIdea) if call.ok else (call.error or "")
        if isinstance(idea, str):
            ctx.log("reply_error", {"role": ROLE, "error": idea, "reply": call.text[:2000]})
            return {"task_idea": None}
        ctx.log("task_idea", idea.model_dump())
        return {"task_idea": idea.model_dump()}

    return task_generator
