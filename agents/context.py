"""What every node may use besides the state: the task, the run, the models and the limits.

A writing role's call (every role but the auditor: their replies become children) is
cancelled once the run's budget is spent, since no child it leads to could be evaluated: one
that would start then is not sent, and one in flight is waited for no longer (its request
finishes on a daemon thread and is dropped). So the run ends when its last evaluation does, not
a model's reply later. The archive keeps the cancelled call, its prompt's tokens estimated.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as Pending
from dataclasses import dataclass, field

from pydantic import BaseModel

from hipevolve.agents.briefing import Target
from hipevolve.agents.llm.client import LLMCall, Message, priced, prompt_hash, record_call
from hipevolve.agents.llm.ensemble import Ensemble
from hipevolve.agents.llm.messages import (
    Prompt,
    as_prompt,
    marked,
    system_message,
    text_of,
    within_marker_limit,
)
from hipevolve.agents.llm.tokens import count_tokens
from hipevolve.agents.state import AgentLimits
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.workshop import Workshop
from hipevolve.prompts.render import system_prompt

# Roles whose replies only ever become new children (the auditor's judge evaluated ones).
WRITING_ROLES = frozenset({"profiler_reader", "optimizer", "mutator", "repairer", "translator"})
POLL_S = 0.1  # how often a writing call in flight looks at the budget


@dataclass
class AgentContext:
    task: TaskSpec
    workshop: Workshop
    limits: AgentLimits
    ensemble: Ensemble | None  # None: every role runs its offline policy
    rng: random.Random
    rng_lock: threading.Lock = field(default_factory=threading.Lock)
    # The backend and device whose numbers the run optimises (what the prompts describe).
    target: Target = field(default_factory=lambda: Target("static"))

    def uses_model(self, role: str) -> bool:
        return self.ensemble is not None and self.ensemble.has(role)

    def ask(
        self,
        role: str,
        prompt: str | Prompt,
        history: Sequence[Message] = (),
        schema: type[BaseModel] | None = None,
    ) -> LLMCall:
        """One model call for `role` (its system prompt, the earlier turns of this conversation,
        this prompt), recorded in the archive; `schema`: the JSON object the reply must be.
        Cache markers end the system prompt, each stable part of a prompt and the conversation
        so far (agents/llm/messages.py)."""
        assert self.ensemble is not None
        earlier = [*history[:-1], marked(history[-1])] if history else []
        messages = within_marker_limit(
            [
                system_message(system_prompt(role)),
                *earlier,
                as_prompt(prompt).message(),
            ]
        )
        call = self._complete(role, messages, schema)
        if call.error_class != "cancelled":
            self.workshop.pace.called(call.latency_s)  # what the run's pace rests on
        record_call(self.workshop.archive, self.workshop.run, call)
        return call

    def _model(self, role: str) -> str:
        """The role's first model: what a cancelled call is booked to."""
        assert self.ensemble is not None
        return next(iter(self.ensemble.settings.role_models().get(role, ())), "")

    def _complete(
        self, role: str, messages: list[Message], schema: type[BaseModel] | None
    ) -> LLMCall:
        """The ensemble's call; for a writing role, cancelled once the budget is spent."""
        assert self.ensemble is not None
        if role not in WRITING_ROLES:
            return self.ensemble.complete(role, messages, schema)
        start = time.monotonic()
        if self.workshop.room() == 0:
            return cancelled(role, self._model(role), messages, 0.0)
        reply: Future[LLMCall] = Future()

        def call() -> None:
            try:
                reply.set_result(self.ensemble.complete(role, messages, schema))  # type: ignore[union-attr]
            except BaseException as e:  # noqa: BLE001 (re-raised below by reply.result())
                reply.set_exception(e)

        threading.Thread(target=call, name=f"model-{role}", daemon=True).start()
        while True:
            try:
                return reply.result(timeout=POLL_S)
            except Pending:
                if self.workshop.room() == 0:
                    return cancelled(role, self._model(role), messages, time.monotonic() - start)

    def log(self, kind: str, data: dict) -> None:
        self.workshop.archive.log_event(self.workshop.run, kind, data)

    def reference_source(self) -> str:
        return self.task.reference.read_text() if self.task.reference.exists() else ""


def cancelled(role: str, model: str, messages: list[Message], latency_s: float) -> LLMCall:
    """A writing call the spent budget cancelled: its prompt's tokens estimated, no reply. One
    that was sent (latency above 0) is billed for them at the model's input price, as a
    provider bills a request whose answer nobody waited for; one never sent costs nothing."""
    tokens_in = sum(count_tokens(text_of(m)) for m in messages)
    cost, known = priced(model, tokens_in, 0) if latency_s > 0.0 else (0.0, True)
    return LLMCall(
        role=role,
        model=model,
        prompt_hash=prompt_hash(messages),
        text="",
        tokens_in=tokens_in,
        tokens_out=0,
        cost_usd=cost,
        cost_known=known,
        latency_s=latency_s,
        attempts=0 if latency_s == 0.0 else 1,
        status="error",
        error_class="cancelled",
        error="the run's budget was spent while this reply was being written: no child it "
        "leads to could be evaluated",
        tokens_estimated=True,
    )
