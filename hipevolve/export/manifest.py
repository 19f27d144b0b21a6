"""manifest.json of an exported package: what was exported, from where, and what it measured."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hipevolve.archive.store import Archive
from hipevolve.core.baseline import Speedup
from hipevolve.core.evaluation import Evaluation
from hipevolve.export.signature import Frozen


class CaseEntry(Frozen):
    name: str
    init: dict[str, Any]
    inputs: dict[str, Any]
    timed: bool
    small: bool
    dtypes: tuple[str, ...]


class Measured(Frozen):
    """One case as hipevolve's verifier measured it (the archive's figures)."""

    time_us: float | None
    ref_time_us: float | None
    speedup: float | None
    cv: float | None
    roofline_fraction: float | None


class LineageStep(Frozen):
    candidate: int
    agent: str
    generation: int
    island: int
    fitness: float | None


class ExportManifest(Frozen):
    """manifest.json: what was exported, from where, and what it measured."""

    task: str
    package: str
    op: str | None = Field(description="torch.ops.hipevolve.<op>; None when not registered")
    op_note: str = Field(default="", description="why no op was registered, when none was")
    archive: str
    run: int
    candidate: int
    fitness: float = Field(description="geometric-mean speedup over the timed cases")
    backend: str = Field(description="where the verifier measured it: cuda, rocm")
    environment: dict[str, Any] = Field(
        default_factory=dict, description="the run's `environment` event (device, toolchain)"
    )
    exported: str
    tolerance: dict[str, Any]
    cases: tuple[CaseEntry, ...]
    measured: dict[str, Measured]
    lineage: tuple[LineageStep, ...] = Field(description="root first, the exported kernel last")
    baselines: tuple[Speedup, ...] = Field(
        default=(),
        description="the kernel over the run's baselines (the reference and each "
        "strong baseline timed once at the run's start), with their uncertainty",
    )
    baselines_unavailable: dict[str, str] = Field(
        default_factory=dict, description="strong baselines the run could not time, and why"
    )


def measurements(evaluation: Evaluation) -> dict[str, Measured]:
    return {
        c.case: Measured(
            time_us=c.time_us,
            ref_time_us=c.ref_time_us,
            speedup=c.speedup,
            cv=c.cv,
            roofline_fraction=c.roofline_fraction,
        )
        for c in evaluation.cases
        if c.time_us is not None
    }


def lineage_steps(archive: Archive, run: int) -> list[LineageStep]:
    from hipevolve.archive.lineage import ancestors_of_best

    steps = []
    for cid in ancestors_of_best(archive, run):
        record = archive.candidate(cid)
        steps.append(
            LineageStep(
                candidate=cid,
                agent=record.agent,
                generation=record.generation,
                island=record.island,
                fitness=record.fitness,
            )
        )
    return steps
