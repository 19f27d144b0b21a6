"""Which model answers the next call: UCB over fitness gain per dollar, as pure functions.

Each model of a role's ensemble is an arm with its pulls (calls), the reward credited to it
(fitness gained over the parent by the candidates it wrote) and the dollars it cost. The value
of an arm is reward per dollar; the exploration bonus is scaled by the best value seen, so the
choice does not depend on the units of reward or cost. An arm never pulled is tried first.
Models litellm cannot price cost $0: a floor per call keeps their value finite, so a free local
model is preferred while it earns anything at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

COST_FLOOR_USD = 1e-4  # per call: what a call of an unpriced model counts as


class Arm(BaseModel):
    """One model's record in a role's ensemble."""

    model_config = ConfigDict(frozen=True)

    model: str
    pulls: int = Field(default=0, ge=0)
    reward: float = Field(default=0.0, ge=0, description="fitness gain credited, summed")
    cost_usd: float = Field(default=0.0, ge=0, description="dollars spent, summed")


def value(arm: Arm) -> float:
    """Reward per dollar; 0 for an arm never pulled."""
    if arm.pulls == 0:
        return 0.0
    return arm.reward / max(arm.cost_usd, COST_FLOOR_USD * arm.pulls)


def scores(arms: Sequence[Arm], exploration: float = 1.0) -> list[float]:
    """UCB1 scores in arm order (inf for arms never pulled)."""
    total = sum(a.pulls for a in arms)
    top = max((value(a) for a in arms), default=0.0) or 1.0
    out = []
    for arm in arms:
        if arm.pulls == 0:
            out.append(math.inf)
        else:
            bonus = exploration * top * math.sqrt(2 * math.log(max(total, 1)) / arm.pulls)
            out.append(value(arm) + bonus)
    return out


def choose(arms: Sequence[Arm], exploration: float = 1.0) -> str:
    """The model to call: the highest score, the first in order on ties."""
    if not arms:
        raise ValueError("an ensemble needs at least one model")
    s = scores(arms, exploration)
    return arms[max(range(len(arms)), key=lambda i: (s[i], -i))].model


def update(arms: Sequence[Arm], model: str, reward: float, cost_usd: float) -> tuple[Arm, ...]:
    """The arms after one call of `model` that cost `cost_usd` and earned `reward`."""
    if model not in {a.model for a in arms}:
        raise ValueError(f"{model} is not in the ensemble")
    return tuple(
        a.model_copy(
            update={
                "pulls": a.pulls + 1,
                "reward": a.reward + max(reward, 0.0),
                "cost_usd": a.cost_usd + max(cost_usd, 0.0),
            }
        )
        if a.model == model
        else a
        for a in arms
    )
