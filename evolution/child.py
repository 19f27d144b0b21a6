"""The two values every writer of a generation passes around: the Proposal selection makes (where
a child goes, whom it mutates, whom it may quote) and the Child written for it (a candidate with
the lineage the archive records). The offline mutator, the agents, the Workshop and the run loop
all speak them, so they live apart from any one of those."""

from __future__ import annotations

from pydantic import Field

from hipevolve.archive.records import Attempt
from hipevolve.core.base import Frozen
from hipevolve.core.candidate import Candidate
from hipevolve.evolution.islands import Elite

OFFLINE_MUTATOR = "offline-mutator"  # the agent label of a child no model wrote
SEED = "seed"  # the agent label of a task's shipped seed kernels (app/run_job.first_candidates)


class Proposal(Frozen):
    """What one agent call gets: where the child goes, whom it mutates, whom it may quote."""

    island: int = Field(description="island id the child is inserted into")
    parent: Elite | None = Field(
        description="None: the island is empty; start from the translator or a seed kernel"
    )
    inspirations: tuple[Elite, ...] = ()
    island_best: float = Field(default=0.0, description="the island's best fitness when planned")


class Child(Frozen):
    """A proposed candidate with the lineage the archive records for it."""

    candidate: Candidate
    island: int = Field(description="island the child is inserted into if it verifies")
    parents: tuple[int, ...] = Field(default=(), description="candidate ids it descends from")
    kind: str = Field(default="mutation", description="lineage edge kind: mutation or crossover")
    inspirations: tuple[int, ...] = Field(default=(), description="elites shown, not ancestors")
    agent: str = OFFLINE_MUTATOR
    model: str = Field(default="", description="the model that wrote it; empty: no model")
    prompt_hash: str = Field(default="", description="hash of the prompt that asked for it")
    attempt: Attempt | None = Field(default=None, description="an agent's idea, diagnosis, reply")
