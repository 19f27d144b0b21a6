"""The models a run was started with: recorded in its log, and held to when it resumes (with
the bandit's record of each, rebuilt from the archive).

A run with models logs one `models` event (every model, and the models behind each role) the
first time its agents write. A resume that names no model goes on with the recorded ones; one
that names others is refused in one line, since the bandit's arms, the spending and the lineage
of the run belong to those models. A run that recorded none (offline, or stopped before its
agents wrote) resumes with whatever is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hipevolve.agents.llm.bandit import Arm
from hipevolve.archive.store import Archive
from hipevolve.core.config import ModelSettings
from hipevolve.core.errors import UserError

EVENT = "models"


def recorded(settings: ModelSettings) -> dict[str, Any]:
    """What the event holds: every model, and role -> its models."""
    return {
        "models": list(settings.models()),
        "roles": {r: list(ms) for r, ms in sorted(settings.role_models().items())},
    }


def record_models(archive: Archive, run: int, settings: ModelSettings) -> None:
    """Logs the run's models once (a resume that kept them logs nothing new)."""
    if not archive.events(run, EVENT):
        archive.log_event(run, EVENT, recorded(settings))


def recorded_models(archive: Archive, run: int) -> dict[str, Any] | None:
    """The models the run recorded, or None."""
    found = archive.events(run, EVENT)
    return found[0].data if found else None


def resumed_models(
    settings: ModelSettings, found: Mapping[str, Any] | None, run: int
) -> ModelSettings:
    """The models a resumed run goes on with: `settings`' where they match the recorded ones or
    none were recorded, the recorded ones where none are given; one-line UserError otherwise."""
    if found is None:
        return settings
    roles = {r: tuple(ms) for r, ms in found.get("roles", {}).items()}
    if not settings.models():
        return settings.model_copy(update={"model": (), "roles": roles})
    if settings.role_models() != roles:
        was, now = ", ".join(found.get("models", ())), ", ".join(settings.models())
        raise UserError(
            f"run {run} was started with the models {was}; this resume names {now}",
            "resume with the same --model flags (or none: the run keeps its own), or start a new "
            "run for other models",
        )
    return settings


def arms_in(archive: Archive, run: int) -> dict[str, tuple[Arm, ...]]:
    """The run's bandit record per role, rebuilt from the archive for a resume: each model's
    calls and dollars (llm_calls), and the fitness its children gained (credits)."""
    reward = {(c.role, c.model): c.reward for c in archive.credits(run)}
    arms: dict[str, list[Arm]] = {}
    for u in archive.llm_usage_by_role(run):
        arms.setdefault(u.role, []).append(
            Arm(
                model=u.model,
                pulls=u.calls,
                cost_usd=u.cost_usd,
                reward=reward.get((u.role, u.model), 0.0),
            )
        )
    return {role: tuple(found) for role, found in arms.items()}
