"""repairer: fixes a compile error, a wrong result, a rejected shortcut or a malformed reply,
a bounded number of turns (AgentLimits.repair_turns).

A repair is a follow-up turn in the conversation that wrote the failed reply: the model sees its
own prompt and reply, then what went wrong, the idea it was implementing and the diff its reply
made (prompts/repairer_turn.md), and its edits apply to the files as that reply left them (or,
when the reply could not be read, to the parent it was to edit). A candidate that no model turn
wrote (an offline child) is shown whole instead (prompts/repairer.md).

A repaired child records the repair as its idea (`fix`: which candidate it repaired, what failed
and the line the reply says it fixed), not the idea of the child that failed: that idea is the
failed child's, and the notes, prompts, report and datasets would show it twice as two
attempts. A repair of a reply that could not be read repaired no candidate: its child is still
the first one of the proposal's idea, and keeps it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from pydantic import BaseModel

from hipevolve.agents.briefing import edit_rule, error_lines, numbered
from hipevolve.agents.context import AgentContext
from hipevolve.agents.reply_record import call_failed, candidate_from, exchange
from hipevolve.agents.state import Failure, ProposalState
from hipevolve.core.candidate import KERNEL_FILE, MODEL_FILE, Candidate
from hipevolve.core.evaluation import Evaluation
from hipevolve.prompts.render import block, render, schema_text

ROLE = "repairer"
REPAIRABLE = frozenset(
    {
        "parse_error",
        "rejected",
        "duplicate",
        "compile_error",
        "incorrect",
        "runtime_error",
        "timeout",
    }
)


class RepairReply(BaseModel):
    """The repaired candidate, as the rule below says (kernel.hip or model.py named before each
    edit). Change only what the failure needs, and say in one line before your edits what you
    fixed."""


def reply_text(base: Candidate | None) -> str:
    """The reply section of a repair turn: the schema's words and the edit rule for `base`."""
    return schema_text(RepairReply, json_reply=False) + "\n" + edit_rule(base) + "\n"


def failure_of(evaluation: Evaluation) -> Failure:
    """What the verifier said, as the repairer is shown it: the one-line message and the
    trimmed compiler log (in the candidate's own line numbers) or the mismatch summary."""
    detail = evaluation.compile_log or evaluation.mismatch
    if not detail and evaluation.flags:
        detail = "\n".join(evaluation.flags)
    # the harness failed, not the kernel (JUDGE_ERROR): not in REPAIRABLE, nothing to repair
    kind = "judge_error" if evaluation.judge_failed else evaluation.status.value
    return Failure(kind=kind, message=evaluation.message, detail=detail)


def problem_text(failure: Failure, shown: Candidate | None = None) -> str:
    """The failure, its trimmed log, and for a compile error the kernel's lines the compiler
    names, numbered as it counts them (the file itself may be 1,000 lines)."""
    text = f"{failure.kind}: {failure.message}".rstrip()
    if failure.detail:
        text += f"\n```\n{block(failure.detail)}```"
    lines = error_lines(failure.detail) if failure.kind == "compile_error" else []
    if lines and shown is not None and shown.hip_source:
        text += (
            f"\nkernel.hip around those lines:\n```\n{block(numbered(shown.hip_source, lines))}```"
        )
    return text


def prompt(ctx: AgentContext, state: ProposalState) -> str:
    failure = state["failure"]
    assert failure is not None
    shown = state.get("candidate") or state.get("base")
    return render(
        "repairer",
        task_name=ctx.task.name,
        task_description=ctx.task.description,
        failure=failure.kind,
        turn=str(state.get("repair_turns", 0) + 1),
        max_turns=str(ctx.limits.repair_turns),
        problem=problem_text(failure, shown),
        kernel=block(shown.hip_source if shown else ""),
        model=block(shown.python_source if shown else ""),
        schema=reply_text(shown),
    )


# What happened to the reply, by failure kind, as the repair turn's first line says it. Only
# REPAIRABLE kinds reach a repair turn: `hacked` (a hack caught, in the build or on the GPU) is
# never repaired, so it has no line here (docs/STATUSES.md).
OUTCOME = {
    "parse_error": "could not be read as a candidate",
    # a rule's refusal, never a crash: the screen (before any compile), the AMD target's limits
    # (after the static compile, before any run) or the KernelBench recorder (its one forward on
    # stand-in inputs); in each, before the candidate was checked against the reference or timed
    "rejected": "was refused by one of the verifier's rules before it was checked or timed",
    "duplicate": "changed nothing but comments or layout: it was not compiled",
    "compile_error": "did not compile",
    "incorrect": "gave wrong results",
    "runtime_error": "failed when it ran",
    "timeout": "ran past the time limit",
}


def diff_text(base: Candidate, candidate: Candidate) -> str:
    """The candidate's change to its base as a unified diff of both files (fenced)."""
    parts = []
    for name, before, after in (
        (KERNEL_FILE, base.hip_source or "", candidate.hip_source or ""),
        (MODEL_FILE, base.python_source, candidate.python_source),
    ):
        parts += difflib.unified_diff(
            before.splitlines(True), after.splitlines(True), f"a/{name}", f"b/{name}", n=2
        )
    if not parts:
        return "Nothing: the files are the parent's, unchanged."
    return f"```diff\n{block(''.join(parts))}```"


def changes_text(state: ProposalState) -> tuple[str, str]:
    """(what the conversation's replies changed, what the next edits apply to). The diff is
    always against the proposal's parent, so "the parent with the diff" is the files now."""
    candidate = state.get("candidate")
    current = candidate or state.get("base")  # what the repair's edits apply to
    parent = state.get("parent")
    unread = "Your last reply could not be applied. " if candidate is None else ""
    if current is None:
        return f"{unread}There is no candidate yet.", "Reply with whole files."
    if parent is None:  # a translation: no parent to diff against
        return f"{unread}The files are those your reply wrote.", (
            "Your edits apply to the files your reply wrote."
        )
    if current.source_hash == parent.source_hash:
        return f"{unread}Nothing: the files are the parent's.", (
            "Your edits apply to the parent's files, as the first message showed them."
        )
    return f"{unread}Against the parent:\n{diff_text(parent, current)}", (
        "Your edits apply to the files as they stand now: the parent with the diff above."
    )


def follow_up(ctx: AgentContext, state: ProposalState) -> str:
    """The repair turn that follows the model's own reply in its conversation."""
    failure = state["failure"]
    assert failure is not None
    changes, applies_to = changes_text(state)
    return render(
        "repairer_turn",
        outcome=OUTCOME.get(failure.kind, "failed"),
        failure=failure.kind,
        turn=str(state.get("repair_turns", 0) + 1),
        max_turns=str(ctx.limits.repair_turns),
        idea=state.get("idea") or "(none given)",
        problem=problem_text(failure, state.get("candidate") or state.get("base")),
        changes=changes,
        applies_to=applies_to,
        schema=reply_text(state.get("candidate") or state.get("base")),
    )


FIX_CHARS = 240  # of the line a repair reply says it fixed, in the child's idea


def stated_fix(reply: str) -> str:
    """What a repair reply says it fixed: its words before the first edit or fenced block (the
    reply format asks for one line there), whitespace collapsed; "" when it says nothing."""
    words = []
    for line in reply.splitlines():
        bare = line.strip()
        if bare.startswith(("```", "<<<<<<<", "=======", ">>>>>>>")) or bare in (
            KERNEL_FILE,
            MODEL_FILE,
            f"`{KERNEL_FILE}`",
            f"`{MODEL_FILE}`",
        ):
            break
        words.append(bare)
    text = " ".join(" ".join(words).split())
    return text if len(text) <= FIX_CHARS else text[: FIX_CHARS - 3] + "..."


def failed_text(failed: int, failure: Failure) -> str:
    """The failed candidate a repair repairs, and how it failed, in one line."""
    what = failure.message.strip().splitlines()[0][:160] if failure.message.strip() else ""
    return f"candidate {failed} ({failure.kind}{': ' + what if what else ''})"


def fix_text(repairing: str, reply: str) -> str:
    """A repaired child's idea: the candidate it repaired, what failed, what the reply fixed."""
    said = stated_fix(reply) or "(the reply did not say what it fixed)"
    return f"repair of {repairing}: {said}"


def can_repair(ctx: AgentContext, state: ProposalState) -> bool:
    failure = state.get("failure")
    return (
        ctx.uses_model(ROLE)
        and not state.get("stopped")
        and failure is not None
        and failure.kind in REPAIRABLE
        and state.get("repair_turns", 0) < ctx.limits.repair_turns
    )


def node(ctx: AgentContext) -> Callable[[ProposalState], dict]:
    def repairer(state: ProposalState) -> dict:
        """One repair turn. Edits apply to the failed candidate (or, after a malformed reply,
        to what that reply was to edit); a repaired child descends from the failed one."""
        turns = state.get("repair_turns", 0) + 1
        shown = state.get("candidate") or state.get("base")
        failed_id = state.get("candidate_id") if state.get("candidate") else None
        parents = (failed_id,) if failed_id is not None else state.get("parents", ())
        # the failed candidate this turn repairs: this one, or the one an unread reply was to
        repairing = (
            failed_text(failed_id, state["failure"])
            if failed_id is not None
            else state.get("repairing", "")
        )
        history = state.get("exchange") or ()
        text = follow_up(ctx, state) if history else prompt(ctx, state)
        call = ctx.ask(ROLE, text, history)
        update: dict = {
            "repair_turns": turns,
            "parents": parents,
            "kind": "mutation" if failed_id is not None else state.get("kind", "mutation"),
            "author": ROLE,
            "candidate_id": None,
            "evaluation": None,
            "repairing": repairing,
            "exchange": exchange(text, call, history),
        }
        if not call.ok:
            return {**update, **call_failed(ctx, call)}
        got = candidate_from(ctx, ROLE, call, shown)
        update |= {
            "model": call.model,
            "prompt_hash": call.prompt_hash,
            "base": shown,
            "reply": call.text,
            "fix": fix_text(repairing, call.text) if repairing else "",
        }
        if isinstance(got, Failure):
            return {**update, "candidate": None, "failure": got}
        return {**update, "candidate": got, "failure": None}

    return repairer
