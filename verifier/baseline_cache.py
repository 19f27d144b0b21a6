"""A run's baseline kept per card, task, reference and toolchain, so a run starts in seconds.

Timing the GDN reference (8 cases of 10-140 ms, 100 trials each) and compiling and timing FLA's
and FlashQLA's Triton kernels held a new run's first evaluation back by about 6.5 minutes on an
H200. The numbers depend only on what is timed and where: the GPU's name, the task's reference,
cases, tolerance, timing mode and strong-baseline modules (their files' bytes), the toolchain
(compiler, runtime, PyTorch) and how a trial is timed (warm-up, flush). So a run's baseline is
stored under a digest of exactly those, in the verifier's cache folder, and a later run with
the same digest starts from it. Each run still records the baseline it used (a `baseline`
event) and watches the machine's drift against it (the reference timed inside every
FitnessSettings.check_every-th evaluation, flagged past check_drift).

What it does not protect against: a machine whose clocks or neighbours changed since the
baseline was stored, beyond what the drift check flags; delete the cache folder's `baselines/`
to time afresh.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from hipevolve.core.base import canonical_json
from hipevolve.core.baseline import RunBaseline
from hipevolve.core.config import VerifierSettings
from hipevolve.core.taskspec import TaskSpec

FORMAT = 1  # bump when what a stored baseline means changes


def _file_digest(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def cache_key(task: TaskSpec, settings: VerifierSettings, device: str, toolchain: str) -> str:
    """The digest of what a baseline's numbers depend on (the module docstring)."""
    what = {
        "format": FORMAT,
        "device": device,
        "toolchain": toolchain,
        "task": task.name,
        "reference": _file_digest(task.reference),
        "cases": [
            [c.name, dict(c.init), dict(c.inputs), c.timed] for c in task.cases if not c.globals
        ],
        "tolerance": task.tolerance.model_dump(mode="json"),
        "timing": task.timing,
        "baselines": [[b.name, b.kind, _file_digest(b.module)] for b in task.baselines],
        "warmup": settings.warmup,
    }
    return hashlib.sha256(canonical_json(what).encode()).hexdigest()[:32]


def _path(settings: VerifierSettings, key: str) -> Path:
    return settings.cache_dir / "baselines" / f"{key}.json"


def load(settings: VerifierSettings, key: str) -> RunBaseline | None:
    """The stored baseline under `key`, or None (none stored, or unreadable: timed afresh)."""
    try:
        return RunBaseline.model_validate_json(_path(settings, key).read_text())
    except (OSError, ValidationError, ValueError):
        return None


def store(settings: VerifierSettings, key: str, baseline: RunBaseline) -> None:
    """Stores `baseline` under `key`, atomically (a concurrent reader sees the old or the new)."""
    path = _path(settings, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(baseline.model_dump(mode="json")))
    os.replace(tmp, path)
