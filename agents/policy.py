"""The agents as the run loop's proposal policy (evolution/generations.py ProposalPolicy).

Each proposal of a generation runs the graph once. Graph runs of every generation in flight
take turns at the run's gate (evolution/pace.py), oldest generation first: up to
AgentLimits.concurrency at once, or, unset, as many as Little's law asks of the evaluator's
slots and the latencies measured so far, so agents waiting on a model overlap with the
evaluations in progress on every GPU slot. With concurrency 1 the run is deterministic for a
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
from hipevolve.agents.llm.client import load_litellm
from hipevolve.agents.llm.ensemble import Ensemble
from hipevolve.agents.llm.run_models import record_models
from hipevolve.agents.llm.tokens import count_tokens
from hipevolve.agents.state import AgentLimits, ProposalState
from hipevolve.evolution.budget import Shares
from hipevolve.evolution.child import Child, Proposal
from hipevolve.evolution.workshop import Workshop


class AgentPolicy:
    def __init__(
        self,
        ensemble: Ensemble | None,
        limits: AgentLimits | None = None,
        target: Target | None = None,
    ) -> None:
        self.ensemble = ensemble
        self.limits = limits or AgentLimits()
        self.target = target or Target("static")
        self._stalled = 0  # generations in a row that evaluated nothing new
        # generation -> its replies all repeated evaluated code (repeated())
        self._repeated: dict[int, bool] = {}
        self._lock = threading.Lock()
        self._recorded = False  # the run's models are in its log

    def stop_reason(self) -> str | None:
        stalled = self.limits.stall_generations
        if stalled and self._stalled >= stalled:
            return (
                f"no new evaluation in {self._stalled} generations: every candidate the "
                "models wrote repeats code already evaluated"
            )
        return self.ensemble.stop_reason() if self.ensemble else None

    def concurrency(self, workshop: Workshop) -> int:
        """Graph runs at once: the user's, or the run's pace (evolution/pace.py)."""
        return self.limits.concurrency or workshop.pace.concurrency()

    def sweep_configurations(self) -> int:
        """Offline tuner configurations of each new model-written island best and each seed."""
        return self.limits.sweep_configurations

    def shares(self) -> Shares:
        """The most of the run's budget the tuner, head-to-heads and re-checks may spend."""
        limits = self.limits
        return Shares(
            tuner=limits.tuner_share, duels=limits.duel_share, rechecks=limits.recheck_share
        )

    def warm(self) -> None:
        """Imports the model client and loads the tokenizer on a daemon thread (seconds of
        CPU) while the run's first evaluations hold the GPU, not after them."""
        if self.ensemble is None:
            return

        def load() -> None:
            load_litellm()
            count_tokens("")

        threading.Thread(target=load, name="warm-model-client", daemon=True).start()

    def translates(self) -> bool:
        """A model is behind the translator: a task without seeds starts from its candidate."""
        return self.ensemble is not None and self.ensemble.has("translator")

    def children(
        self, proposals: Sequence[Proposal], workshop: Workshop, rng: random.Random
    ) -> list[Child]:
        if self.ensemble is not None and not self._recorded:
            record_models(workshop.archive, workshop.run, self.ensemble.settings)
            self._recorded = True
        ctx = AgentContext(
            task=workshop.task,
            workshop=workshop,
            limits=self.limits,
            ensemble=self.ensemble,
            rng=rng,
            target=self.target,
        )
        scratchpad.write_note(ctx)  # every agents.scratchpad_every generations
        graph = build_graph(ctx)
        config = {"recursion_limit": self.limits.recursion_limit()}
        chosen = list(proposals)[: self.limits.proposals_per_generation]
        attempted: list[int] = []  # graph runs that started writing
        repeats: list[int] = []  # graph runs whose last reply repeated evaluated code

        def run(index: int) -> list[Child]:
            if self.stop_reason() is not None or workshop.room() == 0:
                return []
            proposal = chosen[index]
            with workshop.pace.gate.turn((workshop.generation, index)):  # oldest first
                # The budget went while it waited, or the graph runs already writing can spend
                # what is left: no tokens on a child that could not be evaluated.
                if self.stop_reason() is not None or workshop.room() < workshop.pace.gate.inside:
                    return []
                with self._lock:
                    attempted.append(index)
                with workshop.pace.writing():  # its model time and wall time, measured
                    return write(proposal)

        def write(proposal: Proposal) -> list[Child]:
            parent = workshop.source(proposal.parent.candidate_id) if proposal.parent else None
            parent_eval = (
                workshop.evaluation_of(proposal.parent.candidate_id) if proposal.parent else None
            )
            state: ProposalState = {
                "proposal": proposal,
                "parent": parent,
                "parent_evaluation": parent_eval,
                "repair_turns": 0,
                "rechecks": 0,
                "phase": "screen",
                "children": [],
                "stopped": None,
            }
            final = graph.invoke(state, config=config)
            failure = final.get("failure")
            if failure is not None and failure.kind == "duplicate":
                with self._lock:
                    repeats.append(1)
            return list(final.get("children", []))

        if self.limits.concurrency is not None:
            workshop.pace.fixed = self.limits.concurrency  # the gate's bound is the user's
        if self.limits.concurrency == 1:
            batches = [run(i) for i in range(len(chosen))]
        else:  # every proposal waits its turn at the gate, which bounds the runs at once
            with ThreadPoolExecutor(max_workers=max(1, len(chosen))) as pool:
                batches = list(pool.map(run, range(len(chosen))))
        with self._lock:
            if workshop.evaluations:
                self._stalled = 0
            elif attempted and workshop.room() > 0:  # a generation whose every turn found the
                self._stalled += 1  # budget taken, or had its calls cancelled, is no stall
            # proposals none of whose graph runs started (what budget is left, the runs in
            # flight may spend): as a repeat, nothing for the offline mutator to replace
            self._repeated[workshop.generation] = (
                len(repeats) == len(attempted) if attempted else bool(chosen)
            )
        return [child for batch in batches for child in batch]

    def repeated(self, generation: int) -> bool:
        """That generation's models wrote only code the run had evaluated (refused before any
        compile), or none of its graph runs started (the budget left is for the runs in
        flight): nothing to replace with the offline mutator's children. Per generation:
        several are written at once."""
        with self._lock:
            return self._repeated.get(generation, False)
