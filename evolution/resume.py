"""The rules of a resume, in one place: a run continues with the task, the seed and the
evolution settings it recorded, or not at all.

The command line checks them before the search starts (with what its flags asked for: a flag
not given asks for nothing), and the run loop checks them again for library callers (with the
seed and settings they pass); a run's recorded settings are canonical JSON (archive
runs.settings), compared as such.
"""

from __future__ import annotations

import json

from hipevolve.archive.records import RunInfo
from hipevolve.core.base import canonical_json
from hipevolve.core.config import EvolutionSettings
from hipevolve.core.errors import UserError


def check_resume(
    info: RunInfo, task: str, seed: int | None = None, settings: EvolutionSettings | None = None
) -> EvolutionSettings:
    """The recorded run's evolution settings, once resuming it as `task` with `seed` and
    `settings` (None: whatever the run recorded) is known to change nothing it recorded."""
    if info.task != task:
        raise UserError(
            f"run {info.id} searched task {info.task}, not {task}",
            f"pass --task {info.task} to resume it",
        )
    if seed is not None and seed != info.seed:
        raise UserError(
            f"run {info.id} was started with another seed: --seed {info.seed}, not {seed}",
            "leave --seed out when resuming",
        )
    if settings is not None:
        wanted = json.loads(canonical_json(settings))
        if wanted != info.settings:
            changed = ", ".join(
                f"{k} {info.settings.get(k)}, not {wanted.get(k)}"
                for k in sorted(set(wanted) | set(info.settings))
                if wanted.get(k) != info.settings.get(k)
            )
            raise UserError(
                f"run {info.id} was started with other settings: {changed}",
                "resume it with the settings it recorded: leave --islands out",
            )
    return EvolutionSettings.model_validate(info.settings)
