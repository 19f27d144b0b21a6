"""A JSON role's call: the provider's structured output where the model has it, the tolerant
reader (llm/structured.py) on every reply, one repair turn carrying what could not be read, and a
counted fallback.

Events in the archive, per role: `reply_error` for a reply that could not be read (with its
turn), `reply_repaired` when the repair turn's reply was read, `reply_slips` when a reply was
read only by repairing it (which slips), and `reply_fallback` when neither turn gave an answer
and the role falls back to its offline policy: what a report counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.client import LLMCall
from hipevolve.agents.llm.replies import TRUNCATED_FINISH
from hipevolve.agents.llm.structured import Reading, read_json_reply
from hipevolve.agents.reply_record import exchange
from hipevolve.prompts.render import render, schema_text

T = TypeVar("T", bound=BaseModel)


@dataclass(frozen=True)
class JsonAnswer(Generic[T]):
    """The role's answer (None: fall back to the offline policy); `call_failed` when the model
    could not be asked (a provider error, the budget), with the ensemble's stop reason."""

    value: T | None
    call_failed: bool = False
    stopped: str | None = None


def ask_json(ctx: AgentContext, role: str, prompt: str, schema: type[T]) -> JsonAnswer[T]:
    """The model's answer to `prompt` as `schema`, in at most two turns."""
    call = ctx.ask(role, prompt, schema=schema)
    if not call.ok:
        return _failed(ctx)
    reading = _read(ctx, role, call, schema, turn=1)
    if reading.answer is not None:
        return JsonAnswer(reading.answer)
    again = repair_prompt(role, reading.error, schema)
    retry = ctx.ask(role, again, history=exchange(prompt, call), schema=schema)
    if not retry.ok:
        ctx.log(
            "reply_fallback",
            {"role": role, "error": reading.error, "repair_call": retry.error_class},
        )
        return _failed(ctx)
    repaired = _read(ctx, role, retry, schema, turn=2)
    if repaired.answer is not None:
        ctx.log("reply_repaired", {"role": role, "error": reading.error})
        return JsonAnswer(repaired.answer)
    ctx.log("reply_fallback", {"role": role, "error": repaired.error, "first_error": reading.error})
    return JsonAnswer(None)


def repair_prompt(role: str, error: str, schema: type[BaseModel]) -> str:
    """The repair turn: what could not be read, and the object asked for once more."""
    return render(
        "json_repair", role=role, error=error, schema=schema_text(schema, json_reply=True)
    )


def _read(ctx: AgentContext, role: str, call: LLMCall, schema: type[T], turn: int) -> Reading[T]:
    reading = read_json_reply(call.text, schema)
    if reading.answer is None:
        error = reading.error
        if (call.finish_reason or "").lower() in TRUNCATED_FINISH:
            error = f"the reply was cut off at the token limit ({error}); answer shorter"
        ctx.log(
            "reply_error", {"role": role, "turn": turn, "error": error, "reply": call.text[:2000]}
        )
        return Reading(None, error)
    if reading.repairs:
        ctx.log("reply_slips", {"role": role, "turn": turn, "repairs": list(reading.repairs)})
    return reading


def _failed(ctx: AgentContext) -> JsonAnswer:
    return JsonAnswer(None, True, ctx.ensemble.stop_reason() if ctx.ensemble else None)
