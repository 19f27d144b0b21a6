"""A candidate after the verifier's CPU stages (verifier/pipeline.py prepare): what the run loop
holds between an evaluator's `prepare` and its `run`. Light to import (pydantic and core only):
the run loop reads it without importing the pipeline, its compilers or torch."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation, StaticFacts


class Prepared(BaseModel):
    """A candidate after the CPU stages: finished there (`done`), or ready for a GPU worker."""

    model_config = ConfigDict(frozen=True)

    candidate: Candidate
    done: Evaluation | None = None
    library: Path | None = Field(default=None, description="the compiled .so (native, GPU)")
    extensions: Path | None = Field(
        default=None,
        description="the folder of a KernelBench file's prebuilt load_inline "
        "extensions, <name>.so each (verifier/build/kernelbench.py)",
    )
    static: tuple[StaticFacts, ...] = ()
    flags: tuple[str, ...] = ()
    digest: str | None = Field(
        default=None,
        description="what it runs, as built for the target (machine_digest): equal for two "
        "candidates that run the same machine code the same way; None where there is none",
    )
