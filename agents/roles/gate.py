"""verifier: the deterministic gate (never a model). Evaluates the candidate in hand through the
run's evaluator (Workshop.evaluate: budget, archive, the GPU slots), or re-checks a surprising
winner on a fresh hidden seed (Workshop.recheck, one unit of the budget)."""

from __future__ import annotations

from collections.abc import Callable

from hipevolve.agents.context import AgentContext
from hipevolve.agents.roles.repairer import failure_of
from hipevolve.agents.state import ProposalState
from hipevolve.archive.records import Attempt
from hipevolve.evolution.budget import RECHECK
from hipevolve.evolution.child import Child


def node(ctx: AgentContext) -> Callable[[ProposalState], dict]:
    def verifier(state: ProposalState) -> dict:
        if state.get("phase") == "recheck":
            return recheck(ctx, state)
        candidate = state["candidate"]
        assert candidate is not None
        proposal = state["proposal"]
        parents = state.get("parents", ())
        child = Child(
            candidate=candidate,
            island=proposal.island,
            parents=parents,
            kind=state.get("kind", "mutation"),
            inspirations=tuple(
                e.candidate_id for e in proposal.inspirations if e.candidate_id not in parents
            ),
            agent=state.get("author", "mutator"),
            model=state.get("model", ""),
            prompt_hash=state.get("prompt_hash", ""),
            attempt=attempt_of(ctx, state),
        )
        done = ctx.workshop.evaluate(child)
        if done is None:
            return {"stopped": "evaluation budget spent", "evaluation": None, "phase": "done"}
        cid, evaluation = done
        if ctx.ensemble is not None and child.model:
            before = state.get("parent_evaluation")
            gain = evaluation.fitness - (before.fitness if before else 0.0)
            ctx.ensemble.credit(child.agent, child.model, gain)
        return {
            "candidate_id": cid,
            "evaluation": evaluation,
            "failure": None if evaluation.ok else failure_of(evaluation),
            "children": [child],
            "phase": "winner" if evaluation.ok else "done",
        }

    return verifier


def attempt_of(ctx: AgentContext, state: ProposalState) -> Attempt | None:
    """The idea, diagnosis and reply behind a candidate. A repair of a failed child records the
    repair as its idea (what failed, what it fixed: agents/roles/repairer.py), never the failed
    child's idea or diagnosis. A child no model wrote (the offline mutator's) records the move
    it made (agents/roles/mutator.py), or nothing when there is none to say."""
    if not state.get("model"):
        return (
            Attempt(idea=state["idea"])
            if state.get("author") == "mutator" and state.get("idea")
            else None
        )
    reply = (state.get("reply") or "")[: ctx.limits.raw_reply_chars]
    if state.get("author") == "repairer" and state.get("fix"):
        return Attempt(idea=state["fix"], diagnosis="", reply=reply)
    return Attempt(
        idea=state.get("idea") or "", diagnosis=state.get("diagnosis") or "", reply=reply
    )


def recheck(ctx: AgentContext, state: ProposalState) -> dict:
    cid, before = state["candidate_id"], state["evaluation"]
    assert cid is not None and before is not None
    again = ctx.workshop.recheck(cid)
    # None: the budget or its re-check share is spent; the winner stands unconfirmed, and says so
    if again is None:
        ctx.log(
            RECHECK,
            {
                "candidate": cid,
                "fitness_before": before.fitness,
                "status": "skipped",
                "message": "no unit for it: the evaluation "
                "budget, or its re-check share (agents.recheck_share), is spent",
            },
        )
        return {"rechecks": state.get("rechecks", 0) + 1, "phase": "done"}
    ctx.log(
        RECHECK,
        {
            "candidate": cid,
            "fitness_before": before.fitness,
            "status": again.status.value,
            "fitness_after": again.fitness,
            "message": again.message,
        },
    )
    return {"rechecks": state.get("rechecks", 0) + 1, "phase": "done"}
