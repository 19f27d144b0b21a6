"""The agents of a search as one langgraph StateGraph; one run writes the children of one proposal.

    START --> translator ------------------------------+               (no parent: empty island)
    START --> profiler_reader --> optimizer --> mutator --> auditor --> verifier --> END
                                                   ^          |   ^        |
                                                   |          v   |        v
                                                   +------ repairer     auditor (winner)
                                                                          |
                                                                          v
                                                                  verifier (re-check) --> END

Every loop is bounded: the repairer by AgentLimits.repair_turns, the winner's re-check by
AgentLimits.audit_rechecks, the whole run by AgentLimits.recursion_limit(); a spent token,
dollar or evaluation budget ends the run at the next edge.

The eighth agent, task_generator (agents/roles/task_generator.py), writes tasks rather than
children: `evolve tasks generate` calls it directly, outside any search, so it is no node here.
"""

from __future__ import annotations

from typing import Literal

from langgraph.graph import END, START, StateGraph

from hipevolve.agents.context import AgentContext
from hipevolve.agents.roles import (
    auditor,
    mutator,
    optimizer,
    profiler_reader,
    repairer,
    translator,
)
from hipevolve.agents.roles import gate as verifier
from hipevolve.agents.state import ProposalState


def start(state: ProposalState) -> Literal["translator", "profiler_reader"]:
    # An empty island needs a first candidate; a parent is improved.
    return "translator" if state.get("parent") is None else "profiler_reader"


def build_graph(ctx: AgentContext):
    """The compiled graph over `ctx`; invoke with a ProposalState and
    config={"recursion_limit": ctx.limits.recursion_limit()}."""

    def after_writing(state: ProposalState) -> Literal["auditor", "repairer", "__end__"]:
        # A candidate in hand is screened; a malformed reply goes to the repairer while turns
        # remain; nothing at all (no model budget, nothing unseen) ends the run.
        if state.get("candidate") is not None:
            return "auditor"
        return "repairer" if repairer.can_repair(ctx, state) else END

    def after_audit(state: ProposalState) -> Literal["verifier", "repairer", "__end__"]:
        # Screened clean (or a winner sent back): to the verifier. A rejected candidate never
        # reaches a compiler: the repairer may rewrite it, else the run ends.
        if state.get("failure") is None or state.get("phase") == "recheck":
            return "verifier"
        return "repairer" if repairer.can_repair(ctx, state) else END

    def after_verify(state: ProposalState) -> Literal["auditor", "repairer", "__end__"]:
        # Failed: repair while turns remain. Surprisingly fast: back to the auditor once.
        if state.get("stopped") or state.get("phase") == "done" and state.get("failure") is None:
            return END
        if state.get("failure") is not None:
            return "repairer" if repairer.can_repair(ctx, state) else END
        return "auditor" if auditor.surprising(ctx, state) else END

    graph = StateGraph(ProposalState)
    # Nodes, one per role; the verifier is deterministic code, never a model.
    graph.add_node("translator", translator.node(ctx))
    graph.add_node("profiler_reader", profiler_reader.node(ctx))
    graph.add_node("optimizer", optimizer.node(ctx))
    graph.add_node("mutator", mutator.node(ctx))
    graph.add_node("repairer", repairer.node(ctx))
    graph.add_node("auditor", auditor.node(ctx))
    graph.add_node("verifier", verifier.node(ctx))
    # Edges. Entry by parent:
    graph.add_conditional_edges(START, start)
    # idea before code: the diagnosis feeds the idea, the idea the edit
    graph.add_edge("profiler_reader", "optimizer")
    graph.add_edge("optimizer", "mutator")
    # whatever wrote a candidate hands it to the auditor (or the repairer after a bad reply)
    graph.add_conditional_edges("translator", after_writing)
    graph.add_conditional_edges("mutator", after_writing)
    graph.add_conditional_edges("repairer", after_writing)
    # the static screen gates the GPU
    graph.add_conditional_edges("auditor", after_audit)
    # the verifier's answer decides: done, repair, or a winner's re-check
    graph.add_conditional_edges("verifier", after_verify)
    return graph.compile()
