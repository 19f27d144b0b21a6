"""`evolve prompts show ROLE --task T`: the exact messages a role would send for the task's seed.

The state is what an offline run hands the role for the seed kernel: the seed as the parent with
no evaluation yet, the rule-based diagnosis and the catalogue idea that the profiler_reader and
the optimizer fall back to. The target is the backend a run here would use. Tokens are counted
with cl100k_base, the tokenizer litellm falls back to, from the copy litellm ships (offline).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from hipevolve.agents.briefing import Target
from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.tokens import count_tokens
from hipevolve.agents.roles import mutator, optimizer, profiler_reader, translator
from hipevolve.agents.state import AgentLimits, ProposalState
from hipevolve.archive.records import Tried
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import load_candidate
from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.child import Proposal
from hipevolve.prompts.render import system_prompt

__all__ = ["ROLES", "RunView", "ShownPrompt", "count_tokens", "seed_prompt"]

ROLES = ("optimizer", "mutator", "profiler_reader", "translator")
# Roles whose prompt quotes something a seed does not have.
NOT_FOR_A_SEED = {
    "repairer": "it quotes a failed candidate and its error",
    "auditor": "it quotes a surprisingly fast candidate's measurements",
    "task_generator": "it writes new tasks (evolve tasks generate)",
    "verifier": "it is the deterministic verifier, not a model",
}


@dataclass(frozen=True)
class ShownPrompt:
    role: str
    task: str
    target: Target
    system: str
    user: str

    def tokens(self) -> dict[str, int]:
        system, user = count_tokens(self.system), count_tokens(self.user)
        return {"system": system, "user": user, "total": system + user}

    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]


@dataclass(frozen=True)
class RunView:
    """What a prompt reads of a run besides its parent, the latest attempts and the run's notes,
    for a run that is not going on (the reading half of a Workshop)."""

    archive: Archive
    run: int

    def tried_near(self, parent: int | None, island: int, limit: int = 6) -> list[Tried]:
        return self.archive.tried_near(self.run, parent, island, limit)


def seed_prompt(role: str, task: TaskSpec, target: Target, run: RunView | None = None) -> ShownPrompt:
    """The messages `role` would send for the first seed of `task` (with `run`: showing that
    run's attempts on island 0 and its latest notes); UserError for a role that has no prompt
    for a seed, or a task without seeds (translator excepted)."""
    if role in NOT_FOR_A_SEED:
        raise UserError(f"the {role} has no prompt for a seed: {NOT_FOR_A_SEED[role]}",
                        f"show one of {', '.join(ROLES)}")  # fmt: skip
    if role not in ROLES:
        raise UserError(f"no role {role!r}", f"choose one of {', '.join(ROLES)}")
    ctx = AgentContext(task=task, workshop=run, limits=AgentLimits(), ensemble=None,  # type: ignore[arg-type]
                       rng=random.Random(0), target=target)  # fmt: skip
    if role == "translator":
        return ShownPrompt(role, task.name, target, system_prompt(), translator.prompt(ctx))
    if not task.seeds:
        raise UserError(f"task {task.name!r} has no seed kernel to show the {role}'s prompt for",
                        "show the translator's prompt, which starts from the reference")  # fmt: skip
    parent = load_candidate(Path(task.seeds[0]))
    diagnosis = profiler_reader.offline(None).text()
    state: ProposalState = {
        "proposal": Proposal(island=0, parent=None), "parent": parent, "parent_evaluation": None,
        "diagnosis": diagnosis, "idea": optimizer.offline(diagnosis).idea,
    }  # fmt: skip
    if role == "profiler_reader":
        user = profiler_reader.prompt(ctx, state)
    elif role == "optimizer":
        user = optimizer.prompt(ctx, state, optimizer.inspirations_text(parent, []))
    else:
        user = mutator.prompt(ctx, state, optimizer.inspirations_text(parent, []))
    return ShownPrompt(role, task.name, target, system_prompt(), user)
