"""auditor: screens every candidate for shortcuts before GPU time, refuses a model's child that
repeats its parent or an evaluated candidate (comments and layout aside: verifier/screen/
same_code.py), and sends surprising winners (above the task's suspect speedup, or a new island
best) back for one evaluation on a fresh hidden seed. Reasons go to the archive's events:
audit_reject, audit_duplicate, audit_warning, audit_review."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.structured import parse_json_reply
from hipevolve.agents.roles.profiler_reader import measurements_text
from hipevolve.agents.state import Failure, ProposalState
from hipevolve.prompts.render import block, render, schema_text
from hipevolve.verifier.screen.apart import screen_apart
from hipevolve.verifier.screen.same_code import same_code

ROLE = "auditor"


class Verdict(BaseModel):
    """Your reading of a surprisingly fast candidate."""

    shortcut: bool = Field(description="true if the kernel skips, caches or fakes work")
    reasons: str = Field(description="what you saw, quoting the lines")


def prompt(ctx: AgentContext, state: ProposalState) -> str:
    candidate, evaluation = state["candidate"], state["evaluation"]
    assert candidate is not None and evaluation is not None
    return render(
        "auditor",
        task_name=ctx.task.name,
        task_description=ctx.task.description,
        fitness=f"{evaluation.fitness:.2f}",
        measurements=measurements_text(evaluation),
        kernel=block(candidate.hip_source),
        model=block(candidate.python_source),
        schema=schema_text(Verdict, json_reply=True),
    )


def surprising(ctx: AgentContext, state: ProposalState) -> bool:
    """Worth a hidden-seed re-check (it spends budget): an ok child above the task's suspect
    speedup (AgentLimits.surprising_speedup where the task sets none) or a new best of its
    island."""
    evaluation = state.get("evaluation")
    if (
        evaluation is None
        or not evaluation.ok
        or state.get("rechecks", 0) >= ctx.limits.audit_rechecks
    ):
        return False
    threshold = ctx.task.suspect_speedup or ctx.limits.surprising_speedup
    island_best = state["proposal"].island_best
    return evaluation.fitness > threshold or (island_best > 0 and evaluation.fitness > island_best)


def repeated(ctx: AgentContext, state: ProposalState) -> int | None:
    """The candidate the one in hand repeats (comments and layout aside): the proposal's
    parent, else an evaluated candidate of the run; None when it is new code."""
    candidate, proposal = state["candidate"], state["proposal"]
    assert candidate is not None
    parent = proposal.parent.candidate_id if proposal.parent else None
    if parent is not None and state.get("parent") and same_code(candidate, state["parent"]):
        return parent
    for cid, other in list(ctx.workshop.sources.items()):
        if same_code(candidate, other) and ctx.workshop.evaluation_of(cid) is not None:
            return cid
    return None


def node(ctx: AgentContext) -> Callable[[ProposalState], dict]:
    def auditor(state: ProposalState) -> dict:
        """phase screen: the static checker, before any compile; phase winner: the model's
        review (when the role has a model) and a hidden-seed re-check."""
        candidate = state.get("candidate")
        if state.get("phase") == "winner":
            if ctx.uses_model(ROLE) and not state.get("stopped"):
                call = ctx.ask(ROLE, prompt(ctx, state))
                verdict = parse_json_reply(call.text, Verdict) if call.ok else call.error
                ctx.log(
                    "audit_review",
                    {
                        "candidate": state.get("candidate_id"),
                        "verdict": verdict.model_dump() if isinstance(verdict, Verdict) else None,
                        "error": verdict if isinstance(verdict, str) else None,
                    },
                )
            return {"phase": "recheck"}
        assert candidate is not None
        twin = repeated(ctx, state) if state.get("model") else None
        if twin is not None:  # the model's reply changed nothing the compiler reads
            message = f"identical to candidate {twin} after removing comments/whitespace"
            ctx.log(
                "audit_duplicate",
                {"candidate": candidate.source_hash, "twin": twin, "author": state.get("author")},
            )
            return {"phase": "screen", "failure": Failure(kind="duplicate", message=message)}
        screening = screen_apart(candidate)  # off the interpreter lock of the graph runs
        if screening.warnings:
            ctx.log(
                "audit_warning",
                {"candidate": candidate.source_hash, "flags": list(screening.flags)},
            )
        if not screening.passed:
            ctx.log(
                "audit_reject",
                {
                    "candidate": candidate.source_hash,
                    "author": state.get("author"),
                    "flags": list(screening.flags),
                },
            )
            failure = Failure(
                kind="rejected", message=screening.message, detail="\n".join(screening.flags)
            )
            return {"phase": "screen", "failure": failure}
        return {"phase": "screen", "failure": None}

    return auditor
