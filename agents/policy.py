"""The agents as the run loop's proposal policy (evolution/generations.py ProposalPolicy).

Each proposal of a generation runs the graph once; up to AgentLimits.concurrency runs go at
once (unset: CONCURRENCY_PER_SLOT per evaluator slot), so agents waiting on a model overlap with
the evaluations in progress on every GPU slot. With concurrency 1 the run is deterministic for a
seed and a transcript of replies. A model that writes nothing new for
AgentLimits.stall_generations generations in a row (every reply repeats evaluated code) stops
the run, said so, instead of spending tokens with no evaluation.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from hipevolve.agents import scratchpad
from hipevolve.agents.briefing import Target
from hipevolve.agents.context import AgentContext
from hipevolve.agents.graph import build_graph
from hipevolve.agents.llm.ensemble import Ensemble
from hipevolve.agents.llm.run_models import record_models
from hipevolve.agents.state import AgentLimits, ProposalState
from hipevolve.evolution.child import Child, Proposal
from hipevolve.evolution.workshop import Workshop

# Graph runs per evaluator slot when AgentLimits.concurrency is unset: a proposal spends most of
# its time waiting on three or four model calls, an evaluation holds a slot a few seconds.
CONCURRENCY_PER_SLOT = 4


class AgentPolicy:
    def __init__(
        self, ensemble: Ensemble | None, limits: AgentLimits | None = None,
        target: Target | None = None,
    ) -> None:
        self.ensemble = ensemble
        self.limits = limits or AgentLimits()
        self.target = target or Target("static")
        self._stalled = 0  # generations in a row that evaluated nothing new
        self._lock = threading.Lock()
        self._recorded = False  # the run's models are in its log

    def stop_reason(self) -> str | None:
        stalled = self.limits.stall_generations
        if stalled and self._stalled >= stalled:
            return (f"no new evaluation in {self._stalled} generations: every candidate the "
                    "models wrote repeats code already evaluated")  # fmt: skip
        return self.ensemble.stop_reason() if self.ensemble else None

    def concurrency(self, workshop: Workshop) -> int:
        return self.limits.concurrency or CONCURRENCY_PER_SLOT * workshop.slots

    def translates(self) -> bool:
        """A model is behind the translator: a task without seeds starts from its candidate."""
        return self.ensemble is not None and self.ensemble.has("translator")

    def children(
        self, proposals: Sequence[Proposal], workshop: Workshop, rng: random.Random
    ) -> list[Child]:
        if self.ensemble is not None and not self._recorded:
            record_models(workshop.archive, workshop.run, self.ensemble.settings)
            self._recorded = True
        ctx = AgentContext(task=workshop.task, workshop=workshop, limits=self.limits,
                           ensemble=self.ensemble, rng=rng, target=self.target)  # fmt: skip
        scratchpad.write_note(ctx)  # every agents.scratchpad_every generations
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

        workers = self.concurrency(workshop)
        if workers == 1:
            batches = [run(p) for p in chosen]
        else:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                batches = list(pool.map(run, chosen))
        with self._lock:
            self._stalled = 0 if workshop.evaluations else self._stalled + 1
        return [child for batch in batches for child in batch]
