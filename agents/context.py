"""What every node may use besides the state: the task, the run, the models and the limits."""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from hipevolve.agents.briefing import Target
from hipevolve.agents.llm.client import LLMCall, Message, record_call
from hipevolve.agents.llm.ensemble import Ensemble
from hipevolve.agents.state import AgentLimits
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.workshop import Workshop
from hipevolve.prompts.render import system_prompt


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

    def ask(self, role: str, prompt: str, history: Sequence[Message] = ()) -> LLMCall:
        """One model call for `role` (system prompt, the earlier turns of this conversation,
        this prompt), recorded in the archive."""
        assert self.ensemble is not None
        messages = [
            {"role": "system", "content": system_prompt()},
            *history,
            {"role": "user", "content": prompt},
        ]
        call = self.ensemble.complete(role, messages)
        self.workshop.pace.called(call.latency_s)  # what the run's pace rests on
        record_call(self.workshop.archive, self.workshop.run, call)
        return call

    def log(self, kind: str, data: dict) -> None:
        self.workshop.archive.log_event(self.workshop.run, kind, data)

    def reference_source(self) -> str:
        return self.task.reference.read_text() if self.task.reference.exists() else ""
