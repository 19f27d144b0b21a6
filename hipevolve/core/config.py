"""Settings: one frozen pydantic tree. Defaults < ./hipevolve.toml < command-line flags.

No environment variable overrides a setting silently. The ones hipevolve reads are documented
where they are read: HIPEVOLVE_TASKS (extra task folders, hipevolve.problems) and, for the agents,
HIPEVOLVE_MODEL plus the provider keys litellm reads.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from hipevolve.core.base import Frozen
from hipevolve.core.errors import UserError

CONFIG_FILE = "hipevolve.toml"


class Section(Frozen):
    """A section of the settings tree."""


class TaskSettings(Section):
    dirs: tuple[Path, ...] = Field(
        default=(), description="extra task folders, searched after the built-in problems/")


class VerifierSettings(Section):
    backend: Literal["auto", "cuda", "rocm", "static"] = Field(
        default="auto", description="where candidates run: auto picks rocm or cuda by the GPU")
    amd_targets: tuple[str, ...] = Field(
        default=("gfx942",), description="gfx targets of the static AMD analysis")
    cache_dir: Path = Field(
        default=Path.home() / ".cache" / "hipevolve", description="compile cache (content-addressed)")
    compile_timeout_s: float = Field(default=120.0, gt=0, description="per compile, seconds")
    compile_jobs: int = Field(default=0, ge=0, description="parallel compiles; 0 = all CPU cores")
    max_object_bytes: int = Field(default=64 << 20, gt=0, description="largest compiled library")
    load_timeout_s: float = Field(default=120.0, gt=0, description="import and build ModelNew")
    check_timeout_s: float = Field(default=120.0, gt=0, description="all correctness runs")
    timing_timeout_s: float = Field(default=300.0, gt=0, description="all timing runs")
    check_seeds: int = Field(default=0, ge=0, description="0 = the task's own number of seeds")
    trials: int = Field(default=30, ge=5, description="timed trials per case (median reported)")
    warmup: int = Field(default=5, ge=1, description="untimed calls before the trials")
    suspect_speedup: float = Field(default=10.0, gt=1, description="speedups above this: suspect")
    ray: str | None = Field(
        default=None,
        description="run on a Ray cluster: its address, or auto; unset: this machine's GPUs")


class Settings(Section):
    tasks: TaskSettings = TaskSettings()
    verifier: VerifierSettings = VerifierSettings()


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        elif value is not None:
            merged[key] = value
    return merged


def load_settings(flags: dict[str, Any] | None = None, cwd: Path | None = None) -> Settings:
    """Defaults, then ./hipevolve.toml if present, then the flags given (None means not given)."""
    path = (cwd or Path.cwd()) / CONFIG_FILE
    data: dict[str, Any] = {}
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise UserError(f"{path}: not valid TOML: {e}", "fix or remove the file") from None
    data = _merge(data, flags or {})
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        source = f"{path} or the flags" if path.is_file() else "the flags"
        raise UserError(f"setting {where}: {first['msg']} (from {source})",
                        "see the settings in hipevolve/core/config.py") from None
