"""A model's reply turned into a candidate, and a malformed one recorded (FAULTS 27).

Shared by the roles that write code (translator, mutator, repairer): keep the exchange (prompt and
reply) a repair turn follows up on; parse the reply against the candidate it edits (with the
provider's finish_reason, so a cut-off reply is refused); on failure store a `parse_error` event holding the error class, the
message and the raw reply (the first `raw_reply_chars` of it, with its full size), and hand the
repairer a Failure it can quote.
"""

from __future__ import annotations

from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.client import LLMCall
from hipevolve.agents.llm.messages import Prompt, as_prompt
from hipevolve.agents.llm.replies import parse_reply
from hipevolve.agents.state import Failure
from hipevolve.core.candidate import Candidate


def exchange(
    prompt: str | Prompt, call: LLMCall, history: tuple[dict, ...] = ()
) -> tuple[dict, ...]:
    """The conversation so far: the earlier turns, this prompt as it was sent (its cache
    markers kept, so a repair turn reads the same prefix from the provider's cache) and the
    model's reply to it (what a repair turn follows up on)."""
    return (*history, as_prompt(prompt).message(), {"role": "assistant", "content": call.text})


def call_failed(ctx: AgentContext, call: LLMCall) -> dict:
    """The state update of a role whose model call failed: no candidate, an `llm_error`
    failure, and the ensemble's reason to stop the run, if it has one (a spent budget)."""
    return {
        "candidate": None,
        "stopped": ctx.ensemble.stop_reason() if ctx.ensemble else None,
        "failure": Failure(kind="llm_error", message=call.error or ""),
    }


def candidate_from(
    ctx: AgentContext, role: str, call: LLMCall, base: Candidate | None
) -> Candidate | Failure:
    parsed = parse_reply(call.text, base, call.finish_reason)
    if parsed.ok and parsed.candidate is not None:
        return parsed.candidate
    ctx.log(
        "parse_error",
        {
            "role": role,
            "model": call.model,
            "prompt_hash": call.prompt_hash,
            "error_class": parsed.error_class,
            "finish_reason": call.finish_reason,
            "message": parsed.message,
            "reply_chars": len(call.text),
            "reply": call.text[: ctx.limits.raw_reply_chars],
        },
    )
    return Failure(kind="parse_error", message=f"{parsed.error_class}: {parsed.message}")
