"""What a run with models will cost, said before it starts.

A proposal sends the profiler_reader's, the optimizer's and the mutator's prompts (each with the
system prompt) and reads three replies; a repair turn or a winner's review adds more, so the
figure is a floor. Prompt sizes are the seed's real prompts (hipevolve/app/prompt_show.py);
prices are litellm's table for the model (local servers and unknown models: no price, no cost).
"""

from __future__ import annotations

from dataclasses import dataclass

from hipevolve.agents.briefing import Target
from hipevolve.app.prompt_show import seed_prompt
from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import TaskSpec

PROPOSAL_ROLES = ("profiler_reader", "optimizer", "mutator")
# Reply tokens a role writes: a short JSON diagnosis or idea, an edit of a few hunks.
REPLY_TOKENS = {"profiler_reader": 150, "optimizer": 150, "mutator": 1500}


@dataclass(frozen=True)
class CostEstimate:
    model: str
    proposals: int
    tokens_in: int  # per proposal
    tokens_out: int  # per proposal
    usd_per_proposal: float | None  # None: no price known (a local server, an unknown model)

    @property
    def usd(self) -> float | None:
        return None if self.usd_per_proposal is None else self.usd_per_proposal * self.proposals

    def line(self, cap_usd: float | None) -> str:
        tokens = f"{self.tokens_in + self.tokens_out:,} tokens a proposal"
        if self.usd is None:
            return (
                f"LLM use: about {tokens} x {self.proposals} proposals with {self.model} "
                "(no price known: no dollar figure)"
            )
        cap = f"; the run stops at ${cap_usd:g} (raise it with --cost-budget)" if cap_usd else ""
        return (
            f"LLM cost: at least ${self.usd:.2f} for {self.proposals} proposals with "
            f"{self.model} (about {tokens}, ${self.usd_per_proposal:.3f} each){cap}"
        )


def estimate(
    model: str, task: TaskSpec, target: Target, proposals: int, api_base: str | None = None
) -> CostEstimate:
    """The floor of a run's LLM use: `proposals` proposals of the seed's prompts."""
    tokens_in = tokens_out = 0
    for role in PROPOSAL_ROLES:
        try:
            tokens_in += seed_prompt(role, task, target).tokens()["total"]
        except UserError:  # a task without seeds: the translator writes the first candidate
            tokens_in += seed_prompt("translator", task, target).tokens()["total"]
        tokens_out += REPLY_TOKENS[role]
    price = None if api_base else _price(model)
    per = None if price is None else tokens_in * price[0] + tokens_out * price[1]
    return CostEstimate(model, proposals, tokens_in, tokens_out, per)


def _price(model: str) -> tuple[float, float] | None:
    """(dollars per input token, per output token) from litellm's table; None if unknown."""
    from hipevolve.agents.llm.client import load_litellm

    litellm = load_litellm()
    for name in (model, model.split("/", 1)[-1]):
        info = litellm.model_cost.get(name)
        if info and info.get("input_cost_per_token") is not None:
            return float(info["input_cost_per_token"]), float(
                info.get("output_cost_per_token") or 0
            )
    return None
