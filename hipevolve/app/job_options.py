"""The main job's parsed command line, in a module of its own: light to import, so the CLI can
check the cheap things (a model's key, a resume's archive) before it imports the search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class JobOptions(BaseModel):
    """The parsed command line of the main job; None means not given.

    task, budget and resume are what this invocation asks for; every other flag is a setting and
    only maps onto the settings tree (`flags`), where it is checked.
    """

    model_config = ConfigDict(frozen=True)

    task: str = Field(description="the task to search")
    budget: int | None = Field(default=None, description="verifier evaluations to spend")
    resume: int | None = Field(default=None, description="id of the run to continue")
    islands: int | None = Field(default=None, description="evolution.islands")
    seed: int | None = Field(default=None, description="run.seed")
    archive: Path | None = Field(default=None, description="run.archive")
    backend: str | None = Field(default=None, description="verifier.backend")
    tasks_dirs: tuple[Path, ...] = Field(default=(), description="tasks.dirs")
    ray: str | None = Field(default=None, description="verifier.ray")
    model: tuple[str, ...] = Field(default=(), description="models.model (--model, repeatable)")
    api_base: str | None = Field(default=None, description="models.api_base")
    token_budget: int | None = Field(default=None, description="models.token_budget")
    cost_budget_usd: float | None = Field(default=None, description="models.cost_budget_usd")

    def flags(self) -> dict[str, Any]:
        """The flags given, as the part of the settings tree they set (None: not given)."""
        return {
            "tasks": {"dirs": self.tasks_dirs or None},
            "verifier": {"backend": self.backend, "ray": self.ray},
            "evolution": {"islands": self.islands},
            "models": {
                "model": self.model or None,
                "api_base": self.api_base,
                "token_budget": self.token_budget,
                "cost_budget_usd": self.cost_budget_usd,
            },
            "run": {"archive": self.archive, "seed": self.seed},
        }
