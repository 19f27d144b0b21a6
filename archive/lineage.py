"""A run's lineage as a networkx graph, the path that led to its best kernel, and its diffs.

Nodes are candidate ids with their fitness, status, island, generation and agent; edges go
parent -> child with their kind (mutation, crossover, inspiration, migration). Everything is
read from the archive, so the graph rebuilt after a resume is the graph before it (FAULTS 34).
"""

from __future__ import annotations

import difflib

import networkx as nx

from hipevolve.archive.store import Archive

# Edges that pass code on; an inspiration is only shown to the model, it is not an ancestor.
_DESCENT = ("mutation", "crossover", "migration")


def lineage_graph(archive: Archive, run: int) -> nx.DiGraph:
    """The run's candidates and lineage edges; unevaluated nodes have status 'pending'."""
    graph = nx.DiGraph()
    nodes = archive.db.execute(
        "SELECT c.id, c.island, c.generation, c.agent, c.fitness, e.status"
        " FROM candidates c LEFT JOIN evaluations e ON e.id = c.evaluation_id"
        " WHERE c.run = ? ORDER BY c.id",
        [run],
    ).fetchall()
    for cid, island, generation, agent, fitness, status in nodes:
        graph.add_node(
            cid,
            island=island or 0,
            generation=generation or 0,
            agent=agent or "",
            fitness=fitness or 0.0,
            status=status or "pending",
        )
    edges = archive.db.execute(
        "SELECT l.parent, l.child, l.kind FROM lineage l JOIN candidates c ON c.id = l.child"
        " WHERE c.run = ? ORDER BY l.child, l.parent, l.kind",
        [run],
    ).fetchall()
    for parent, child, kind in edges:
        # A parent from another run (a seed carried over) joins as a node of its own.
        if parent not in graph:
            graph.add_node(parent, island=0, generation=0, agent="", fitness=0.0, status="other")
        if graph.has_edge(parent, child):
            # One edge per pair in a DiGraph: descent outranks inspiration.
            if kind in _DESCENT:
                graph.edges[parent, child]["kind"] = kind
        else:
            graph.add_edge(parent, child, kind=kind)
    return graph


def ancestors_of_best(archive: Archive, run: int) -> list[int]:
    """Candidate ids from a root to the run's best, through code-carrying edges; [] if none.

    Where a candidate has several parents (a crossover), the path follows the fittest (the
    older on ties).
    """
    best = archive.best(run)
    if best is None:
        return []
    graph = lineage_graph(archive, run)
    path, node, seen = [best.candidate_id], best.candidate_id, {best.candidate_id}
    while True:
        parents = [
            p
            for p in graph.predecessors(node)
            if graph.edges[p, node]["kind"] in _DESCENT and p not in seen
        ]
        if not parents:
            break
        node = max(parents, key=lambda p: (graph.nodes[p]["fitness"], -p))
        path.append(node)
        seen.add(node)
    return path[::-1]


def diffs_along(archive: Archive, path: list[int]) -> list[str]:
    """Unified diffs of the kernel source between consecutive candidates of `path`.

    A kernelbench candidate keeps its C++ in the Python file, so that is what is diffed.
    """
    sources = []
    for cid in path:
        c = archive.candidate(cid).candidate
        sources.append((cid, c.hip_source if c.hip_source is not None else c.python_source))
    diffs = []
    for (a, old), (b, new) in zip(sources, sources[1:], strict=False):
        diffs.append(
            "".join(
                difflib.unified_diff(
                    old.splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    fromfile=f"candidate {a}",
                    tofile=f"candidate {b}",
                )
            )
        )
    return diffs
