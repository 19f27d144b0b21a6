"""The ensemble that picks a model for each call, by the per-role model settings (ModelSettings,
the [models] section of the settings tree in hipevolve/core/config.py, re-exported here).

A role with no model runs its offline policy. A role with several models asks the bandit
(agents/llm/bandit.py) before each call; the reward it learns from is the fitness a model's
candidates gained over their parents (credited by the verifier node). Token and dollar budgets
hold for the whole run, across every model; once one refuses a call, `stop_reason` says why and
the policy writes no more.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel

from hipevolve.agents.llm import bandit
from hipevolve.agents.llm.client import LLMCall, LLMClient, Message, Usage
from hipevolve.core.config import ModelSettings

__all__ = ["Ensemble", "ModelSettings"]


class Ensemble:
    """Thread-safe: calls the role's chosen model, keeps the arms and the run's budgets."""

    def __init__(
        self,
        settings: ModelSettings,
        spent: Usage | None = None,
        client: Callable[[str], LLMClient] | None = None,
        arms: Mapping[str, Sequence[bandit.Arm]] | None = None,
    ) -> None:
        """`spent` and `arms`: what a resumed run had spent, and its bandit's record per role
        (a model missing there starts as never pulled)."""
        self.settings = settings
        self._spent = spent or Usage(calls=0, tokens_in=0, tokens_out=0, cost_usd=0.0)
        make = client or self._client
        self._clients = {m: make(m) for m in settings.models()}
        known = {(r, a.model): a for r, found in (arms or {}).items() for a in found}
        self._arms = {
            r: tuple(known.get((r, m), bandit.Arm(model=m)) for m in ms)
            for r, ms in settings.role_models().items()
        }
        self._lock = threading.Lock()
        self._stopped: str | None = None

    def _client(self, model: str) -> LLMClient:
        s = self.settings
        return LLMClient(
            model,
            s.api_base,
            timeout_s=s.timeout_s,
            max_retries=s.max_retries,
            backoff_s=s.backoff_s,
            stream=s.stream,
            max_concurrent=s.max_concurrent,
        )

    def has(self, role: str) -> bool:
        return bool(self.settings.role_models().get(role))

    def usage(self) -> Usage:
        totals = [c.usage for c in self._clients.values()]
        return Usage(
            calls=self._spent.calls + sum(u.calls for u in totals),
            tokens_in=self._spent.tokens_in + sum(u.tokens_in for u in totals),
            tokens_out=self._spent.tokens_out + sum(u.tokens_out for u in totals),
            cost_usd=self._spent.cost_usd + sum(u.cost_usd for u in totals),
        )

    def budget_left(self) -> str | None:
        """Why no further call may start (run-wide, all models), or None."""
        u, s = self.usage(), self.settings
        used = u.tokens_in + u.tokens_out
        if s.token_budget is not None and used >= s.token_budget:
            return f"token budget exhausted: {used} of {s.token_budget} tokens used"
        if s.cost_budget_usd is not None and u.cost_usd >= s.cost_budget_usd:
            return f"cost budget exhausted: ${u.cost_usd:.4f} of ${s.cost_budget_usd:.4f} spent"
        return None

    def stop_reason(self) -> str | None:
        with self._lock:
            return self._stopped

    def choose(self, role: str) -> str:
        with self._lock:
            return bandit.choose(self._arms[role], self.settings.exploration)

    def complete(
        self, role: str, messages: Sequence[Message], schema: type[BaseModel] | None = None
    ) -> LLMCall:
        """One call of the model the bandit picks for `role` (`schema`: the JSON object the reply
        must be, LLMClient.complete); a budget refusal stops the run."""
        model = self.choose(role)
        client = self._clients[model]
        refusal = self.budget_left()
        if refusal is not None:
            with self._lock:
                self._stopped = self._stopped or refusal
            return LLMCall.failed(role, model, "", "budget_exhausted", refusal)
        call = client.complete(
            role,
            messages,
            max_tokens=self.settings.max_reply_tokens,
            temperature=self.settings.temperature,
            schema=schema,
        )
        with self._lock:
            self._arms[role] = bandit.update(self._arms[role], model, 0.0, call.cost_usd)
        return call

    def credit(self, role: str, model: str, reward: float) -> None:
        """Adds fitness gain to the arm that wrote a candidate (its pull was counted already)."""
        with self._lock:
            arms = self._arms.get(role, ())
            self._arms[role] = tuple(
                a.model_copy(update={"reward": a.reward + max(reward, 0.0)})
                if a.model == model
                else a
                for a in arms
            )

    def arms(self, role: str) -> tuple[bandit.Arm, ...]:
        with self._lock:
            return self._arms.get(role, ())
