"""The agents as the run loop's proposal policy (evolution/generations.py ProposalPolicy).

Each proposal of a generation runs the graph once; up to AgentLimits.concurrency runs go at
once, so agents waiting on a model overlap with the evaluation in progress (the Workshop
evaluates one candidate at a time). With concurrency 1 the run is deterministic for a seed and a
transcript of replies.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from hipevolve.agents.briefing import Target
from hipevolve.agents.context import AgentContext
from hipevolve.agents.graph import build_graph
from hipevolve.agents.llm.ensemble import Ensemble
from hipevolve.agents.state import AgentLimits, ProposalState
from hipevolve.evolution.child import Child, Proposal
from hipevolve.evolution.workshop import Workshop


class AgentPolicy:
    def __init__(
        self, ensemble: Ensemble | None, limits: AgentLimits | None = None,
        target: Target | None = None,
    ) -> None:
        self.ensemble = ensemble
        self.limits = limits or AgentLimits()
        self.target = target or Target("static")

    def stop_reason(self) -> str | None:
        return self.ensemble.stop_reason() if self.ensemble else None

    def translates(self) -> bool:
        """A model is behind the translator: a task without seeds starts from its candidate."""
        return self.ensemble is not None and self.ensemble.has("translator")

    def children(
        self, proposals: Sequence[Proposal], workshop: Workshop, rng: random.Random
    ) -> list[Child]:
        ctx = AgentContext(task=workshop.task, workshop=workshop, limits=self.limits,
                           ensemble=self.ensemble, rng=rng, target=self.target)  # fmt: skip
        graph = build_graph(ctx)
        config = {"recursion_limit": self.limits.recursion_limit()}
        chosen = list(proposals)[: self.limits.proposals_per_generation]

        def run(proposal: Proposal) -> list[Child]:
            if self.stop_reason() is not None or workshop.room() == 0:
                return []
            parent = workshop.source(proposal.parent.candidate_id) if proposal.parent else None
            parent_eval = (
                workshop.evaluation_of(proposal.parent.candidate_id) if proposal.parent else None
            )
            state: ProposalState = {
                "proposal": proposal, "parent": parent,
                "parent_evaluation": parent_eval, "repair_turns": 0, "rechecks": 0,
                "phase": "screen", "children": [], "stopped": None,
            }  # fmt: skip
            final = graph.invoke(state, config=config)
            return list(final.get("children", []))

        if self.limits.concurrency == 1:
            batches = [run(p) for p in chosen]
        else:
            with ThreadPoolExecutor(max_workers=self.limits.concurrency) as pool:
                batches = list(pool.map(run, chosen))
        return [child for batch in batches for child in batch]
