"""Near-copy detection: a Weisfeiler-Lehman hash of a task's torch.fx graph (op names as labels,
names and constants ignored) joined with the shape signature of its cases."""

from __future__ import annotations

import ast
import hashlib
import warnings

import networkx as nx
import torch

from hipevolve.core.reference import build_model
from hipevolve.core.taskspec import TaskSpec
from hipevolve.problems.synthetic.measure import measure_case, module_from_source


def _label(node: torch.fx.Node, modules: dict[str, torch.nn.Module]) -> str:
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    if node.op == "call_method":
        return str(node.target)
    if node.op == "call_module":
        return type(modules[str(node.target)]).__name__
    return node.op  # placeholder, get_attr, output: names and constants do not count


def graph_hash(task: TaskSpec) -> str:
    """WL hash of the traced forward's data flow with op names as labels, joined with the shape
    signature of every case: renamed variables or changed constants are still duplicates."""
    module = module_from_source(task.reference.read_text(), task.name)
    small = task.small_cases[0] if task.small_cases else task.cases[0]
    model = build_model(module, dict(small.init), "cpu")
    try:
        traced = torch.fx.symbolic_trace(model)
        modules = dict(traced.named_modules())
        graph = nx.DiGraph()
        for node in traced.graph.nodes:
            graph.add_node(node.name, label=_label(node, modules))
            for arg in node.all_input_nodes:
                graph.add_edge(arg.name, node.name)
        with warnings.catch_warnings():  # networkx 3.5 notes its directed hashes changed
            warnings.simplefilter("ignore", UserWarning)
            structure = nx.weisfeiler_lehman_graph_hash(graph, node_attr="label", iterations=4)
    except Exception:  # data-dependent control flow: fall back to the normalised source
        tree = ast.parse(task.reference.read_text())
        structure = "ast-" + _digest(ast.dump(tree))
    shapes = [measure_case(module, dict(c.init), dict(c.inputs))[2] for c in task.cases]
    return f"{structure}:{_digest('|'.join(shapes))}"


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:12]
