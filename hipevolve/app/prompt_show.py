"""`evolve prompts show ROLE --task T`: the exact messages a role would send, with their tokens.

Without a run, the parent is the task's first seed (a KernelBench task has none: the reference
lowered to HIP by the offline translator, where it lowers) with no evaluation yet, the
rule-based diagnosis and the catalogue idea that the profiler_reader and the optimizer fall back
to. With `--archive/--run`, the parent is that run's best with its stored evaluation (its times
per case and static facts), and the prompt shows the run's attempts near it and its latest
notes, as the run would send it now; the repairer is shown the run's latest failed child and
the auditor its best, as a surprising winner. The target is the backend a run here would use.
Tokens are counted with cl100k_base, the tokenizer litellm falls back to, from the copy litellm
ships (offline): the whole request, and the part after its last cache marker (what the call
sends that no earlier call of the proposal sent).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from hipevolve.agents.briefing import Target
from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.messages import Prompt, as_prompt, system_message
from hipevolve.agents.llm.tokens import count_tokens
from hipevolve.agents.roles import (
    auditor,
    mutator,
    optimizer,
    profiler_reader,
    repairer,
    translator,
)
from hipevolve.agents.state import AgentLimits, ProposalState
from hipevolve.archive.records import Tried
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import Evaluation
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.child import Proposal
from hipevolve.evolution.islands import Elite, EvolutionSettings
from hipevolve.prompts.render import system_prompt

__all__ = ["ROLES", "RunView", "ShownPrompt", "count_tokens", "seed_prompt"]

ROLES = ("profiler_reader", "optimizer", "mutator", "translator", "repairer", "auditor")
NOT_A_PROMPT = {
    "task_generator": "it writes new tasks (evolve tasks generate)",
    "verifier": "it is the deterministic verifier, not a model",
}
# Roles whose prompt quotes what only a run has.
FROM_A_RUN = {
    "repairer": "it quotes a failed candidate and its error: pass --archive and --run",
    "auditor": "it quotes a surprisingly fast candidate's measurements: pass --archive and --run",
}


@dataclass(frozen=True)
class ShownPrompt:
    role: str
    task: str
    target: Target
    system: str
    prompt: Prompt

    @property
    def user(self) -> str:
        return self.prompt.text()

    def tokens(self) -> dict[str, int]:
        """The request's tokens; `own`: those after its last cache marker."""
        system, user = count_tokens(self.system), count_tokens(self.user)
        return {
            "system": system,
            "user": user,
            "total": system + user,
            "own": count_tokens(self.prompt.tail()),
        }

    def messages(self) -> list[dict]:
        """The messages as sent: text blocks, the cache markers on the stable ones."""
        return [system_message(self.system), self.prompt.message()]


@dataclass(frozen=True)
class RunView:
    """What a prompt reads of a run besides its parent, the latest attempts and the run's notes,
    for a run that is not going on (the reading half of a Workshop)."""

    archive: Archive
    run: int

    def tried_near(self, parent: int | None, island: int, limit: int = 6) -> list[Tried]:
        return self.archive.tried_near(self.run, parent, island, limit)

    def source(self, candidate_id: int) -> Candidate:
        return self.archive.candidate(candidate_id).candidate

    def evaluation_of(self, candidate_id: int) -> Evaluation | None:
        return self.archive.evaluation_of(candidate_id)

    def parent(self) -> tuple[Proposal, Candidate, Evaluation] | None:
        """The run's best as a proposal's parent, with its stored evaluation and the next
        fittest elites as its inspirations (as many as a run shows); None before any."""
        best = self.archive.best(self.run)
        if best is None:
            return None
        others = sorted(
            {
                e.candidate_id: e
                for e in self.archive.elites(self.run)
                if e.candidate_id != best.candidate_id
            }.values(),
            key=lambda e: (-e.fitness, e.candidate_id),
        )
        shown = [self._elite(e.candidate_id, e.fitness) for e in others]
        proposal = Proposal(
            island=best.island,
            parent=self._elite(best.candidate_id, best.fitness),
            inspirations=tuple(shown[: EvolutionSettings().inspirations]),
        )
        return proposal, self.source(best.candidate_id), best.evaluation

    def _elite(self, candidate_id: int, fitness: float) -> Elite:
        record = self.archive.candidate(candidate_id)
        return Elite(
            candidate_id=candidate_id,
            fitness=fitness,
            source_hash=record.source_hash,
            cell=("shown",),
        )

    def failed(self) -> tuple[Candidate, Evaluation] | None:
        """The run's latest evaluated child that failed, with its evaluation."""
        row = self.archive.db.execute(
            "SELECT c.id FROM candidates c JOIN evaluations e ON e.id = c.evaluation_id"
            " WHERE c.run = ? AND e.status != 'ok' ORDER BY c.id DESC LIMIT 1",
            [self.run],
        ).fetchone()
        if row is None:
            return None
        evaluation = self.archive.evaluation_of(row[0])
        return (self.archive.candidate(row[0]).candidate, evaluation) if evaluation else None


def seed_prompt(
    role: str, task: TaskSpec, target: Target, run: RunView | None = None
) -> ShownPrompt:
    """The messages `role` would send for `task`: for its first seed, or with `run` for that
    run's best and its evaluation, attempts and notes; UserError for a role with no prompt to
    show (one line: why)."""
    if role in NOT_A_PROMPT:
        raise UserError(
            f"the {role} has no prompt to show: {NOT_A_PROMPT[role]}",
            f"show one of {', '.join(ROLES)}",
        )
    if role not in ROLES:
        raise UserError(f"no role {role!r}", f"choose one of {', '.join(ROLES)}")
    if role in FROM_A_RUN and run is None:
        raise UserError(
            f"the {role} has no prompt for a seed: {FROM_A_RUN[role]}",
            "show one of profiler_reader, optimizer, mutator or translator",
        )
    ctx = AgentContext(
        task=task,
        workshop=run,
        limits=AgentLimits(),
        ensemble=None,  # type: ignore[arg-type]
        rng=random.Random(0),
        target=target,
    )
    if role == "translator":
        return ShownPrompt(
            role, task.name, target, system_prompt(role), as_prompt(translator.prompt(ctx))
        )
    state = _state(task, run)
    if role == "repairer":
        assert run is not None
        failed = run.failed()
        if failed is None:
            raise UserError(f"run {run.run} has no failed child to repair", "show another role")
        candidate, evaluation = failed
        state |= {"candidate": candidate, "failure": repairer.failure_of(evaluation)}
        user: str | Prompt = repairer.prompt(ctx, state)
    elif role == "auditor":
        state |= {"candidate": state["parent"], "evaluation": state["parent_evaluation"]}
        if state["evaluation"] is None:
            raise UserError(
                f"run {run.run if run else ''} has no correct candidate yet", "show another role"
            )
        user = auditor.prompt(ctx, state)
    else:
        user = {"profiler_reader": profiler_reader, "optimizer": optimizer, "mutator": mutator}[
            role
        ].prompt(ctx, state)
    return ShownPrompt(role, task.name, target, system_prompt(role), as_prompt(user))


def _state(task: TaskSpec, run: RunView | None) -> ProposalState:
    """A proposal's state: the run's best and its evaluation, else the task's first seed (or
    its reference lowered) with none."""
    found = run.parent() if run is not None else None
    if found is not None:
        proposal, parent, evaluation = found
    else:
        proposal, parent, evaluation = Proposal(island=0, parent=None), _first(task), None
    diagnosis = profiler_reader.offline(evaluation).text()
    return {
        "proposal": proposal,
        "parent": parent,
        "parent_evaluation": evaluation,
        "diagnosis": diagnosis,
        "idea": optimizer.offline(diagnosis).idea,
    }


def _first(task: TaskSpec) -> Candidate:
    if task.seeds:
        return load_candidate(Path(task.seeds[0]))
    found = translator.lowered(task)
    if isinstance(found, Candidate):
        return found
    raise UserError(
        f"task {task.name!r} has no seed kernel, and its reference does not lower ({found.reason})",
        "pass --archive and --run to show a run's best, or show the translator's prompt",
    )
