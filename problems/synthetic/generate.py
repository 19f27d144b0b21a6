"""Synthetic task generation: new verified tasks by mutation, composition and constraints.

    generate_tasks(n=50, seed=0, modes=["mutate", "compose", "constrain"], sources=[...], out_dir)

`n` candidates are proposed (modes in turn, each from its own seeded generator), written as task
folders (reference.py from templates, task.toml), and kept only if the reference verifies on its
small CPU case and its graph is new. What it guards against: references that crash, are
nondeterministic, produce NaN/Inf, are constant, ignore one of their inputs, or are slow on a CPU;
near-copies (same torch.fx graph up to names and constants, same shapes). What it does not: it runs
the generated references in this process (they are our own templates, under a time guard), and it
does not judge whether a task is interesting beyond those checks.

Modes: compose.py, mutate.py, constrain.py; text: render.py; checks: measure.py,
verify.py, dedupe.py; operators: ops.py. This module admits candidates and drives the modes.
"""

from __future__ import annotations

import random
import shutil
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import TaskSpec
from hipevolve.problems import discover, load_task_folder
from hipevolve.problems.synthetic.compose import compose_candidate
from hipevolve.problems.synthetic.constrain import constrain_candidate, describe_constraint, meets
from hipevolve.problems.synthetic.dedupe import graph_hash
from hipevolve.problems.synthetic.measure import measure_case, module_from_source
from hipevolve.problems.synthetic.mutate import mutate_candidate
from hipevolve.problems.synthetic.render import Candidate, Mode, task_toml
from hipevolve.problems.synthetic.verify import verify_task

MODES: tuple[Mode, ...] = ("mutate", "compose", "constrain")
MAX_TIMED_BYTES = 8 * 2**30  # a timed case must fit any MI300X/H200 with room to spare
STAGING = ".staging"


class KeptTask(BaseModel):
    name: str
    mode: Mode
    folder: str
    description: str
    graph_hash: str


class Rejection(BaseModel):
    name: str
    mode: Mode
    reason: str


class ModeCounts(BaseModel):
    proposed: int = 0
    kept: int = 0
    rejected: int = 0


class GenerationReport(BaseModel):
    seed: int
    out_dir: str
    kept: list[KeptTask] = Field(default_factory=list)
    rejected: list[Rejection] = Field(default_factory=list)
    per_mode: dict[str, ModeCounts] = Field(default_factory=dict)

    def count(self, mode: str, outcome: KeptTask | Rejection) -> None:
        """Tallies one proposal of `mode` as kept or rejected."""
        counts = self.per_mode[mode]
        counts.proposed += 1
        if isinstance(outcome, KeptTask):
            counts.kept += 1
            self.kept.append(outcome)
        else:
            counts.rejected += 1
            self.rejected.append(outcome)

    def summary(self) -> str:
        modes = ", ".join(f"{m} {c.kept}/{c.proposed}" for m, c in self.per_mode.items())
        return f"kept {len(self.kept)}, rejected {len(self.rejected)} ({modes})"


def admit(candidate: Candidate, out_dir: Path, seen: dict[str, str]) -> KeptTask | Rejection:
    """Writes the candidate to a staging folder, measures its rooflines, verifies and dedupes it;
    a kept task is moved to out_dir/<name> and its graph hash added to `seen`."""

    def reject(reason: str) -> Rejection:
        shutil.rmtree(staging, ignore_errors=True)
        return Rejection(name=candidate.name, mode=candidate.mode, reason=reason)

    final = out_dir / candidate.name
    staging = out_dir / STAGING / candidate.name
    if final.exists():
        return Rejection(name=candidate.name, mode=candidate.mode, reason=f"{final} already exists")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "reference.py").write_text(candidate.source)
    cases = []
    case = {"name": "(module)"}  # named in the message if the module itself does not build
    try:
        module = module_from_source(candidate.source, candidate.name)
        for case in candidate.cases:
            nbytes, flops, _ = measure_case(module, case["init"], case["inputs"])
            if case["timed"] and nbytes > MAX_TIMED_BYTES:
                return reject(f"too large: case {case['name']} moves {nbytes / 2**30:.1f} GiB")
            cases.append(case | {"roofline": {"bytes": nbytes, "flops": flops}})
    except Exception as e:
        line = (str(e).strip().splitlines() or [""])[0][:200]
        return reject(f"case {case['name']} does not build: {type(e).__name__}: {line}")
    if candidate.constraint is not None:
        timed = next(c for c in cases if c["timed"])["roofline"]
        if not meets(candidate.constraint, timed["bytes"], timed["flops"]):
            return reject(f"constraint not met: {describe_constraint(candidate.constraint)}")
    (staging / "task.toml").write_text(task_toml(candidate, cases))
    try:
        task = load_task_folder(staging, "user")
        reason = verify_task(task)
        key = None if reason else graph_hash(task)
    except Exception as e:
        reason = f"does not load: {type(e).__name__}: {e}"
    if reason:
        return reject(reason)
    if key in seen:
        return reject(f"duplicate of {seen[key]} (same fx graph WL hash and shapes)")
    staging.rename(final)
    seen[str(key)] = candidate.name
    return KeptTask(
        name=candidate.name,
        mode=candidate.mode,
        folder=str(final),
        description=candidate.description,
        graph_hash=str(key),
    )


def remove_empty_staging(out_dir: Path) -> None:
    """Removes the staging folder `admit` writes candidates to, once a generation left it
    empty (every candidate moved into its task folder or discarded)."""
    staging = out_dir / STAGING
    if staging.is_dir() and not any(staging.iterdir()):
        staging.rmdir()


def existing_hashes(out_dir: Path) -> dict[str, str]:
    """Graph hash -> name of the tasks already in out_dir, so a second run adds no duplicates."""
    seen: dict[str, str] = {}
    if not out_dir.is_dir():
        return seen
    for folder in sorted(out_dir.iterdir()):
        if folder.name != STAGING and (folder / "task.toml").is_file():
            try:
                seen[graph_hash(load_task_folder(folder, "user"))] = folder.name
            except Exception:  # a broken neighbour is not ours to judge here
                continue
    return seen


def _propose(
    mode: Mode, rng: random.Random, name: str, seed: int, sources: Sequence[TaskSpec]
) -> Candidate:
    if mode == "mutate":
        return mutate_candidate(rng, rng.choice(sources), name, seed)
    if mode == "constrain":
        return constrain_candidate(rng, name, seed)
    return compose_candidate(rng, name, seed)


def generate_tasks(
    n: int,
    seed: int,
    modes: Sequence[Mode] = MODES,
    sources: Sequence[TaskSpec] = (),
    out_dir: Path = Path("synthetic_tasks"),
    progress: Callable[[KeptTask | Rejection], None] | None = None,
) -> GenerationReport:
    """Proposes `n` candidates (the modes in turn), writes each verified, new one to
    out_dir/<name>/ and returns what was kept and what was rejected, with reasons. The same
    seed, modes and sources give the same tasks. Mutation draws from `sources` (tasks with a
    small case; all discovered tasks when empty)."""
    modes = list(dict.fromkeys(modes))
    if not modes or any(m not in MODES for m in modes):
        raise UserError(f"modes must be among {', '.join(MODES)}, got {modes}", "check --mode")
    usable = sorted(
        (s for s in (sources or discover().values()) if s.small_cases), key=lambda s: s.name
    )
    if "mutate" in modes and not usable:
        raise UserError("no source task with a small case to mutate", "pass --from TASK")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = GenerationReport(
        seed=seed, out_dir=str(out_dir), per_mode={m: ModeCounts() for m in modes}
    )
    seen = existing_hashes(out_dir)
    for k in range(n):
        mode = modes[k % len(modes)]
        rng = random.Random(f"{seed}:{k}:{mode}")
        prefix = f"syn{seed}_{k:03d}_{mode[:3]}"
        try:
            candidate = _propose(mode, rng, prefix, seed, usable)
            outcome = admit(candidate, out_dir, seen)
        except Exception as e:  # a generator bug is reported against its candidate, not fatal
            outcome = Rejection(
                name=prefix,
                mode=mode,
                reason="generator error: " + traceback.format_exception_only(e)[-1].strip(),
            )
        report.count(mode, outcome)
        if progress:
            progress(outcome)
    remove_empty_staging(out_dir)
    return report
