"""`evolve report RUN`: one self-contained HTML page about a run.

Sections: headline facts; best-so-far against evaluations with every correct candidate plotted;
per-island best-so-far; statuses and valid rate per generation; the lineage tree of the best;
the MAP-Elites grids of every island; per-case speedups of the best candidates; the best
kernel's source and its diff from its parent; LLM calls and cost; what the agents' replies came
to (parse errors, JSON fallbacks, duplicate refusals, re-checks); what was tried (each child's
idea and outcome); the run's notes. Charts are SVG drawn here,
the little script is inline: the page loads nothing from the network.
"""

from __future__ import annotations

import difflib
import html
import math
import os
import tempfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

import networkx as nx
from pydantic import BaseModel, ConfigDict

from hipevolve.archive.lineage import ancestors_of_best, lineage_graph
from hipevolve.archive.store import Archive, Outcome, RunInfo
from hipevolve.evolution.budget import DUEL, RECHECK, RunBudget
from hipevolve.evolution.descriptors import AXES, BINS, cell_from_key
from hipevolve.evolution.generations import CHECKPOINT, islands_line
from hipevolve.evolution.islands import Island
from hipevolve.export.folders import check_writable, render
from hipevolve.export.runs import find_run, open_archive, run_environment

STATUS_COLORS = {
    "ok": "#2e8b57",
    "incorrect": "#e08a1e",
    "compile_error": "#c0392b",
    "runtime_error": "#8e44ad",
    "timeout": "#8d6e63",
    "hacked": "#222222",
    "suspect": "#d63384",
    "rejected": "#95a5a6",
    "parse_error": "#7f8c8d",
    "compiled": "#2c7fb8",
    "pending": "#cfd6de",
    "other": "#cfd6de",
}
ISLAND_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b")
DESCENT = ("mutation", "crossover", "migration")
MAX_TREE_NODES = 160  # a lineage tree past this is cut to the nodes nearest the best


class ReportResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    out: Path
    run: int
    evaluations: int
    best_fitness: float


def e(value: object) -> str:
    return html.escape(str(value), quote=True)


# ---------------------------------------------------------------------------- SVG charts


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if raw <= m * step)
    first = math.floor(low / step) * step
    return [
        first + i * step
        for i in range(int((high - first) / step) + 2)
        if first + i * step <= high + 1e-9
    ]


class Plot:
    """A frame with x and y axes mapping data to pixels; elements are added as SVG strings."""

    def __init__(
        self,
        width: int,
        height: int,
        x: tuple[float, float],
        y: tuple[float, float],
        x_label: str,
        y_label: str,
    ) -> None:
        self.w, self.h, self.left, self.right, self.top, self.bottom = width, height, 56, 16, 12, 40
        self.x0, self.x1 = x if x[1] > x[0] else (x[0], x[0] + 1)
        self.y0, self.y1 = y if y[1] > y[0] else (y[0], y[0] + 1)
        self.parts: list[str] = []
        for t in _ticks(self.y0, self.y1):
            py = self.py(t)
            self.parts.append(
                f'<line class="gridline" x1="{self.left}" x2="{width - self.right}" '
                f'y1="{py:.1f}" y2="{py:.1f}"/>'
                f'<text x="{self.left - 6}" y="{py + 4:.1f}" text-anchor="end">{t:g}</text>'
            )
        for t in _ticks(self.x0, self.x1, 8):
            px = self.px(t)
            self.parts.append(
                f'<text x="{px:.1f}" y="{height - self.bottom + 16}" '
                f'text-anchor="middle">{t:g}</text>'
            )
        base, top = height - self.bottom, self.top
        self.parts.append(
            f'<line class="axis" x1="{self.left}" x2="{width - self.right}" y1="{base}" y2="{base}"/>'
            f'<line class="axis" x1="{self.left}" x2="{self.left}" y1="{top}" y2="{base}"/>'
            f'<text x="{(self.left + width - self.right) / 2:.0f}" y="{height - 6}" '
            f'text-anchor="middle">{e(x_label)}</text>'
            f'<text transform="translate(14 {(top + base) / 2:.0f}) rotate(-90)" '
            f'text-anchor="middle">{e(y_label)}</text>'
        )

    def px(self, x: float) -> float:
        return self.left + (x - self.x0) / (self.x1 - self.x0) * (self.w - self.left - self.right)

    def py(self, y: float) -> float:
        return (
            self.h
            - self.bottom
            - (y - self.y0) / (self.y1 - self.y0) * (self.h - self.top - self.bottom)
        )

    def steps(self, points: Sequence[tuple[float, float]], color: str, label: str) -> None:
        """A step line (best so far holds until the next improvement)."""
        if not points:
            return
        path, prev_y = [], None
        for x, y in points:
            path.append(
                f"{'M' if prev_y is None else 'L'}{self.px(x):.1f},{self.py(prev_y if prev_y is not None else y):.1f}"
            )
            path.append(f"L{self.px(x):.1f},{self.py(y):.1f}")
            prev_y = y
        self.parts.append(
            f'<path d="{" ".join(path)}" fill="none" stroke="{color}" '
            f'stroke-width="2"><title>{e(label)}</title></path>'
        )

    def dot(self, x: float, y: float, color: str, title: str, r: float = 3) -> None:
        self.parts.append(
            f'<circle cx="{self.px(x):.1f}" cy="{self.py(y):.1f}" r="{r}" '
            f'fill="{color}" fill-opacity="0.55"><title>{e(title)}</title></circle>'
        )

    def bar(self, x: float, width: float, y0: float, y1: float, color: str, title: str) -> None:
        left, right = self.px(x - width / 2), self.px(x + width / 2)
        top, bottom = self.py(y1), self.py(y0)
        self.parts.append(
            f'<rect x="{left:.1f}" y="{top:.1f}" width="{max(right - left, 1):.1f}" '
            f'height="{max(bottom - top, 0):.1f}" fill="{color}"><title>{e(title)}</title></rect>'
        )

    def label(self, x: float, y: float, text: str) -> None:
        self.parts.append(
            f'<text x="{self.px(x):.1f}" y="{self.py(y) - 4:.1f}" '
            f'text-anchor="middle">{e(text)}</text>'
        )

    def svg(self, label: str) -> str:
        return (
            f'<svg role="img" aria-label="{e(label)}" width="{self.w}" height="{self.h}" '
            f'viewBox="0 0 {self.w} {self.h}">{"".join(self.parts)}</svg>'
        )


def _best_so_far(points: Sequence[tuple[int, float]]) -> list[tuple[float, float]]:
    out, best = [], 0.0
    for x, y in points:
        if y > best or not out:
            best = max(best, y)
            out.append((float(x), best))
    return out


def progress_chart(scored: Sequence[Outcome]) -> str:
    top = max((s.fitness for s in scored), default=1.0) or 1.0
    plot = Plot(
        1100,
        300,
        (1, max(len(scored), 2)),
        (0, top * 1.1),
        "evaluations",
        "fitness (geo-mean speedup)",
    )
    for i, s in enumerate(scored, 1):
        if s.status == "ok":
            plot.dot(
                i,
                s.fitness,
                ISLAND_COLORS[s.island % len(ISLAND_COLORS)],
                f"candidate {s.candidate_id}: {s.fitness:.3f}x, island {s.island}",
            )
    best = _best_so_far([(i, s.fitness) for i, s in enumerate(scored, 1)])
    if best:
        best.append((float(len(scored)), best[-1][1]))
    plot.steps(best, "#b4232a", "best so far")
    return plot.svg("best fitness so far against evaluations")


def island_chart(scored: Sequence[Outcome]) -> str:
    top = max((s.fitness for s in scored), default=1.0) or 1.0
    plot = Plot(
        1100, 260, (1, max(len(scored), 2)), (0, top * 1.1), "evaluations", "island best so far"
    )
    for island in sorted({s.island for s in scored}):
        points = [(i, s.fitness) for i, s in enumerate(scored, 1) if s.island == island]
        line = _best_so_far(points)
        if line:
            line.append((float(len(scored)), line[-1][1]))
        plot.steps(line, ISLAND_COLORS[island % len(ISLAND_COLORS)], f"island {island}")
    return plot.svg("best fitness so far per island")


def status_chart(scored: Sequence[Outcome]) -> str:
    by_gen: dict[int, Counter[str]] = defaultdict(Counter)
    for s in scored:
        by_gen[s.generation][s.status] += 1
    gens = sorted(by_gen)
    most = max((sum(c.values()) for c in by_gen.values()), default=1)
    plot = Plot(
        1100,
        240,
        (min(gens, default=0) - 0.5, max(gens, default=0) + 0.5),
        (0, most * 1.15),
        "generation",
        "evaluations",
    )
    for g in gens:
        base = 0
        for status, n in sorted(by_gen[g].items(), key=lambda sn: sn[0] != "ok"):
            plot.bar(
                g,
                0.8,
                base,
                base + n,
                STATUS_COLORS.get(status, "#999"),
                f"generation {g}: {n} {status}",
            )
            base += n
        plot.label(g, base, f"{by_gen[g]['ok'] / base:.0%}")  # the generation's valid rate
    return plot.svg("evaluation statuses per generation")


def lineage_tree(graph: nx.DiGraph, best: int, path: Sequence[int]) -> str:
    """The best candidate's ancestry through code-carrying edges, one column per generation."""
    descent = nx.DiGraph([(a, b) for a, b, k in graph.edges(data="kind") if k in DESCENT])
    descent.add_node(best)
    nodes = sorted(nx.ancestors(descent, best) | {best})
    if len(nodes) > MAX_TREE_NODES:  # keep the path and the nearest others
        keep = set(path)
        for n in sorted(nodes, key=lambda n: -n):
            if len(keep) >= MAX_TREE_NODES:
                break
            keep.add(n)
        nodes = sorted(keep)
    columns: dict[int, list[int]] = defaultdict(list)
    for n in nodes:
        columns[graph.nodes[n].get("generation", 0)].append(n)
    gens = sorted(columns)
    rows = max(len(c) for c in columns.values())
    width, height = max(240, 90 * len(gens) + 80), max(120, 34 * rows + 50)
    where = {}
    for gi, g in enumerate(gens):
        for ri, n in enumerate(columns[g]):
            where[n] = (50 + gi * 90, 30 + ri * 34 + (rows - len(columns[g])) * 17)
    on_path = set(zip(path, path[1:], strict=False))
    parts = []
    for a, b in descent.subgraph(nodes).edges:
        (x1, y1), (x2, y2) = where[a], where[b]
        color = "#b4232a" if (a, b) in on_path else "#aab2bd"
        kind = graph.edges[a, b]["kind"]
        parts.append(
            f'<line data-from="{a}" data-to="{b}" x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" '
            f'stroke="{color}" stroke-width="{2 if (a, b) in on_path else 1}">'
            f"<title>{e(kind)}: {a} to {b}</title></line>"
        )
    for n in nodes:
        x, y = where[n]
        attrs = graph.nodes[n]
        color = STATUS_COLORS.get(attrs.get("status", "other"), "#999")
        ring = ' stroke="#b4232a" stroke-width="2.5"' if n in path else ""
        title = (
            f"candidate {n}: {attrs.get('status')}, fitness {attrs.get('fitness', 0):.3f}, "
            f"generation {attrs.get('generation')}, island {attrs.get('island')}, "
            f"{attrs.get('agent') or 'agent ?'}"
        )
        parts.append(
            f'<circle data-id="{n}" cx="{x}" cy="{y}" r="9" fill="{color}"{ring}>'
            f"<title>{e(title)}</title></circle>"
            f'<text x="{x}" y="{y + 21}" text-anchor="middle">{n}</text>'
        )
    for gi, g in enumerate(gens):
        parts.append(
            f'<text x="{50 + gi * 90}" y="14" text-anchor="middle" class="legend">gen {g}</text>'
        )
    return (
        f'<svg class="lineage" role="img" aria-label="lineage of the best" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}">{"".join(parts)}</svg>'
    )


# ---------------------------------------------------------------------------- tables


def _table(
    header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1, cls: str = ""
) -> str:
    head = "".join(f"<th{' class=l' if i < left else ''}>{e(h)}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=l' if i < left else ''}>{c}</td>" for i, c in enumerate(r))
        + "</tr>"
        for r in rows
    )
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _heat(fitness: float, top: float) -> str:
    """White to green by fitness relative to the run's best."""
    t = max(0.0, min(1.0, fitness / top)) if top > 0 else 0.0
    r, g, b = (int(255 + (c - 255) * t) for c in (46, 139, 87))
    return f"rgb({r},{g},{b})"


def elite_grids(archive: Archive, run: int) -> str:
    """One grid per island: columns are tile bins, rows the other axes' combinations in use."""
    elites = archive.elites(run)
    if not elites:
        return '<p class="note">No elites: no candidate of this run was correct.</p>'
    top = max(x.fitness for x in elites)
    tile_axis = AXES.index("tile")
    rows = sorted(
        {tuple(a for i, a in enumerate(cell_from_key(x.cell)) if i != tile_axis) for x in elites}
    )
    tiles = [f"tile:{b}" for b in BINS["tile"]]
    out = [
        f'<p class="legend">Rows: {e(", ".join(a for a in AXES if a != "tile"))}; '
        "columns: tile bins. Each cell shows its elite's fitness and candidate id.</p>"
    ]
    for island in sorted({x.island for x in elites}):
        grid = {}
        for x in elites:
            if x.island == island:
                cell = cell_from_key(x.cell)
                grid[(tuple(a for i, a in enumerate(cell) if i != tile_axis), cell[tile_axis])] = x
        body = []
        for row in rows:
            cells = []
            for tile in tiles:
                x = grid.get((row, tile))
                if x is None:
                    cells.append('<td class="empty">-</td>')
                else:
                    cells.append(
                        f'<td style="background:{_heat(x.fitness, top)}" '
                        f'title="candidate {x.candidate_id}">{x.fitness:.2f}'
                        f"<br><small>#{x.candidate_id}</small></td>"
                    )
            body.append(f'<tr><td class="l">{e(" ".join(row))}</td>{"".join(cells)}</tr>')
        head = '<th class="l">cell</th>' + "".join(f"<th>{e(t)}</th>" for t in tiles)
        out.append(
            f'<h3>island {island}</h3><table class="grid"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>"
        )
    return "".join(out)


def islands_note(archive: Archive, run: int) -> str:
    """How distinct the islands of the run's last generation are, and where the grid's axes
    came from (the line the run ends with)."""
    checkpoints = archive.events(run, CHECKPOINT)
    if not checkpoints:
        return ""
    islands = [Island.model_validate(i) for i in checkpoints[-1].data.get("islands", [])]
    line = islands_line(archive, islands)
    return (
        f'<p class="legend">After generation {checkpoints[-1].data.get("generation")}: '
        f"{e(line)}.</p>"
        if line
        else ""
    )


def speedup_tables(archive: Archive, run: int) -> str:
    top = archive.top(run, 8)
    if not top:
        return '<p class="note">No correct candidate.</p>'
    best = top[0].evaluation
    detail = _table(
        ("case", "reference (us)", "kernel (us)", "speedup", "CV", "roofline", "max abs err"),
        [
            (
                e(c.case),
                _f(c.ref_time_us, ".1f"),
                _f(c.time_us, ".1f"),
                _f(c.speedup, ".3f") + ("x" if c.speedup else ""),
                _f(c.cv, ".3f"),
                _f(c.roofline_fraction, ".2f"),
                _f(c.max_abs_err, ".2e"),
            )
            for c in best.cases
        ],
    )
    cases = [c.case for c in best.cases if c.speedup is not None]
    rows = []
    for s in top:
        by_case = {c.case: c.speedup for c in s.evaluation.cases}
        rows.append(
            (
                str(s.candidate_id),
                str(s.island),
                f"{s.fitness:.3f}x",
                *(_f(by_case.get(c), ".3f") for c in cases),
            )
        )
    ranking = _table(("candidate", "island", "fitness", *cases), rows, left=0)
    return (
        f"<h3>best candidate ({top[0].candidate_id}), every case</h3>{detail}"
        f"<h3>the {len(top)} fittest candidates: speedup per timed case</h3>{ranking}"
    )


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def source_section(archive: Archive, path: Sequence[int]) -> str:
    best = archive.candidate(path[-1]).candidate
    source = best.hip_source if best.hip_source is not None else best.python_source
    panels = [("source", f"kernel.hip of candidate {path[-1]}", e(source))]
    if len(path) > 1:
        parent = archive.candidate(path[-2]).candidate
        old = parent.hip_source if parent.hip_source is not None else parent.python_source
        diff = list(
            difflib.unified_diff(
                old.splitlines(),
                source.splitlines(),
                lineterm="",
                fromfile=f"candidate {path[-2]}",
                tofile=f"candidate {path[-1]}",
            )
        )
        lines = []
        for line in diff:  # one block per line: the marks span the panel's width
            kind = (
                "head"
                if line.startswith(("---", "+++"))
                else "hunk"
                if line.startswith("@@")
                else "add"
                if line.startswith("+")
                else "del"
                if line.startswith("-")
                else ""
            )
            lines.append(f'<span class="ln {kind}">{e(line) or " "}</span>')
        panels.append(("diff", f"diff from parent {path[-2]}", "".join(lines) or "(identical)"))
    model = e(best.python_source)
    panels.append(("model", "model.py" if best.format == "native" else "KernelBench file", model))
    buttons = "".join(
        f'<button type="button" data-panel="panel-{key}" aria-selected="{str(i == 0).lower()}">'
        f"{e(label)}</button>"
        for i, (key, label, _) in enumerate(panels)
    )
    bodies = "".join(
        f'<pre id="panel-{key}"{"" if i == 0 else " hidden"}>{text}</pre>'
        for i, (key, _, text) in enumerate(panels)
    )
    return f'<div class="tabs">{buttons}</div>{bodies}'


def llm_section(archive: Archive, run: int) -> str:
    usage = archive.llm_usage(run)
    if usage.calls == 0:
        return '<p class="note">No LLM calls: the offline policies wrote every candidate.</p>'
    body = [
        (
            e(r.role),
            e(r.model or "-"),
            str(r.calls),
            str(r.tokens_in),
            str(r.tokens_out),
            f"${r.cost_usd:.4f}",
            f"{r.mean_latency_s:.2f}",
        )
        for r in archive.llm_usage_by_role(run)
    ]
    body.append(
        (
            "<b>all</b>",
            "",
            str(usage.calls),
            str(usage.tokens_in),
            str(usage.tokens_out),
            f"<b>${usage.cost_usd:.4f}</b>",
            "",
        )
    )
    roles = _table(
        ("role", "model", "calls", "tokens in", "tokens out", "cost", "latency (s)"), body, left=2
    )
    per_model = [
        (
            e(m.model),
            str(m.calls),
            str(m.tokens_in),
            str(m.tokens_out),
            f"${m.cost_usd:.4f}",
            str(m.children),
            str(m.improved),
        )
        for m in archive.llm_usage_by_model(run)
    ]
    models = _table(
        ("model", "calls", "tokens in", "tokens out", "cost", "children", "beat their parent"),
        per_model,
        left=1,
    )
    return (
        f"{roles}<h3>Per model</h3>{models}"
        '<p class="legend">children: evaluated candidates the model wrote; beat their '
        "parent: of those, the ones fitter than their fittest parent (a repair of a failed "
        "child: than that child's nearest correct ancestor).</p>"
    )


# What each agent event says happened to a reply, in the order the section lists them.
REPLY_EVENTS = (
    (
        "parse_error",
        "code replies that could not be read as a candidate (the repairer may follow up)",
    ),
    ("reply_error", "JSON replies that could not be read (a repair turn follows)"),
    ("reply_repaired", "JSON replies read after the repair turn"),
    ("reply_fallback", "JSON replies unread after it: the role's offline rule stood in"),
    (
        "audit_duplicate",
        "children refused before a compile: they repeat evaluated code but for comments and layout",
    ),
    ("audit_reject", "children refused by the static screen"),
    ("offline_fallback", "generations the offline mutator wrote: every reply was unusable"),
)
TRIED_SHOWN = 40  # children in the "what was tried" table, newest first


def agents_section(archive: Archive, run: int) -> str:
    """What the agents' replies came to, counted by role from the run's events, and the
    hidden-seed re-checks and head-to-heads by outcome; "" for a run with no agent events."""
    rows = []
    for kind, meaning in REPLY_EVENTS:
        events = archive.events(run, kind)
        if events:
            roles = Counter(ev.data.get("role") or ev.data.get("author") or "-" for ev in events)
            by_role = ", ".join(f"{role} {n}" for role, n in sorted(roles.items()))
            rows.append((e(kind), str(len(events)), e(by_role), e(meaning)))
    rechecks = Counter(ev.data.get("status", "?") for ev in archive.events(run, RECHECK))
    if rechecks:
        outcomes = ", ".join(f"{status} {n}" for status, n in sorted(rechecks.items()))
        rows.append(
            (
                RECHECK,
                str(sum(rechecks.values())),
                e(outcomes),
                "hidden-seed re-checks of "
                "winners (skipped: the budget or its re-check share was spent)",
            )
        )
    duels = archive.events(run, DUEL)
    if duels:
        kept = Counter(ev.data["duel"]["winner"] for ev in duels)
        rows.append(
            (
                DUEL,
                str(len(duels)),
                e(", ".join(f"{w} kept {n}" for w, n in sorted(kept.items()))),
                f"head-to-heads of close calls, {sum(ev.data['evaluations'] for ev in duels)} "
                "evaluations",
            )
        )
    cancelled = [
        ev for ev in archive.events(run, "llm_error") if ev.data.get("error_class") == "cancelled"
    ]
    if cancelled:
        rows.append(
            (
                "cancelled",
                str(len(cancelled)),
                "",
                "model calls in flight when the budget "
                "was spent, billed for the prompt tokens they sent",
            )
        )
    if not rows:
        return ""
    return _table(("event", "count", "by role or outcome", "what it means"), rows, left=4)


def tried_section(archive: Archive, run: int) -> str:
    """The newest children with the idea behind each (an agent's, the tuner's configuration,
    a repair's fix) and its outcome against the code its gain counts from."""
    rows = {a.candidate_id: a for a in archive.attempted(run)}
    children = [a for a in rows.values() if a.generation > 0]
    if not children:
        return ""
    body = []
    for a in sorted(children, key=lambda a: -a.candidate_id)[:TRIED_SHOWN]:
        base = rows.get(a.parent_id) if a.parent_id is not None else None
        if a.status != "ok":
            outcome = a.status
        elif base is not None:
            outcome = f"{a.fitness:.3f} from {base.fitness:.3f} (candidate {base.candidate_id})"
        else:
            outcome = f"{a.fitness:.3f}"
        idea = " ".join(a.idea.split()) or "(no idea recorded)"
        body.append(
            (str(a.candidate_id), str(a.generation), e(a.agent or "-"), e(idea[:240]), e(outcome))
        )
    note = (
        f'<p class="legend">The newest {len(body)} of {len(children)} children. A gain counts '
        "from the fittest correct parent, or for a repair of a failed child from the "
        "nearest correct ancestor.</p>"
    )
    return _table(("candidate", "gen", "agent", "idea", "fitness"), body, left=4) + note


# ---------------------------------------------------------------------------- the page


def _spending(budget: RunBudget, scored: Sequence[Outcome]) -> str:
    """What the budget's units went on, as the run's final line counts them."""
    parts = [f"{len(scored)} candidates scored"]
    parts += [f"{budget.copies} of them machine-code copies, at no cost"] if budget.copies else []
    parts += (
        [f"{budget.screened_out} children screened out as machine-code copies, never stored"]
        if budget.screened_out
        else []
    )
    parts += [f"{budget.duels} evaluations in head-to-heads"] if budget.duels else []
    parts += [f"{budget.rechecks} hidden-seed re-checks"] if budget.rechecks else []
    parts += [f"{budget.tuned} on the offline tuner's configurations"] if budget.tuned else []
    return (
        f'<p class="legend">evaluations: {budget.spent} of the budget of {budget.limit} '
        f"({'; '.join(parts)})</p>"
    )


def _headline(info: RunInfo, scored: Sequence[Outcome], archive: Archive) -> str:
    ok = sum(s.status == "ok" for s in scored)
    best = max((s.fitness for s in scored), default=0.0)
    env = run_environment(archive, info.id)
    budget = RunBudget.from_archive(archive, info.id)  # the run's own count of its units
    facts = [
        (f"{best:.3f}x", "best fitness"),
        (str(budget.spent), "evaluations"),
        (f"{ok / len(scored):.0%}" if scored else "-", "valid rate"),
        (str(len({s.island for s in scored})), "islands"),
        (str(len({s.generation for s in scored})), "generations"),
        (f"${archive.llm_usage(info.id).cost_usd:.2f}", "LLM cost"),
    ]
    cards = "".join(f'<div class="fact"><b>{e(v)}</b><span>{e(k)}</span></div>' for v, k in facts)
    where = ", ".join(f"{k} {v}" for k, v in sorted(env.items())) or "device not recorded"
    legend = "".join(
        f'<span class="swatch" style="background:{c}"></span>{e(s)}'
        for s, c in STATUS_COLORS.items()
        if s not in ("pending", "other")
    )
    return (
        f"<h1>Run {info.id}: {e(info.task)}</h1>"
        f'<p class="sub">{e(info.status)}; seed {info.seed}; budget {info.budget}; started '
        f"{e(info.started)}{'; finished ' + e(info.finished) if info.finished else ''}; "
        f'{e(where)}</p><div class="facts">{cards}</div>{_spending(budget, scored)}'
        f'<p class="legend">statuses:{legend}</p>'
    )


def build_report(archive: Archive, run: int) -> str:
    info = find_run(archive, run)
    scored = archive.outcomes(run)
    sections = [_headline(info, scored, archive)]
    if not scored:
        sections.append('<p class="note">This run has recorded no evaluation yet.</p>')
    else:
        island_legend = "".join(
            f'<span class="swatch" style="background:{ISLAND_COLORS[i % len(ISLAND_COLORS)]}">'
            f"</span>island {i}"
            for i in sorted({s.island for s in scored})
        )
        sections += [
            "<h2>Best so far</h2>",
            progress_chart(scored),
            f'<p class="legend">red: best so far; dots: correct candidates by island:{island_legend}</p>',
            "<h2>Per-island progress</h2>",
            island_chart(scored),
            "<h2>Statuses and valid rate per generation</h2>",
            status_chart(scored),
            '<p class="legend">Bars: evaluations by status; above each bar its valid rate (ok over all).</p>',
        ]
    path = ancestors_of_best(archive, run)
    sections.append("<h2>Lineage of the best</h2>")
    if path:
        sections.append(lineage_tree(lineage_graph(archive, run), path[-1], path))
        sections.append(
            '<p class="legend">Columns are generations; red: the path to the best '
            "(its fittest parent at each step); hover a node for details.</p>"
        )
    else:
        sections.append('<p class="note">No correct candidate, so no best.</p>')
    sections += [
        "<h2>MAP-Elites grids</h2>",
        islands_note(archive, run),
        elite_grids(archive, run),
        "<h2>Speedups per case</h2>",
        speedup_tables(archive, run),
    ]
    if path:
        sections += ["<h2>The best kernel</h2>", source_section(archive, path)]
    sections += ["<h2>LLM calls and cost</h2>", llm_section(archive, run)]
    replies = agents_section(archive, run)
    if replies:
        sections += ["<h2>What the agents' replies came to</h2>", replies]
    tried = tried_section(archive, run)
    if tried:
        sections += ["<h2>What was tried</h2>", tried]
    note = archive.latest_note(run)
    if note is not None:
        sections += [
            f"<h2>Run notes (after generation {note.generation})</h2>",
            f"<pre>{e(note.text)}</pre>",
        ]
    title = f"hipevolve run {info.id}: {info.task}"
    return render("report.html.tmpl", {"TITLE": e(title), "BODY": "\n".join(sections)})


def write_report(archive_path: Path, run: int, out: Path | None = None) -> ReportResult:
    """Writes the run's report to `out` (default report-run<RUN>.html) atomically."""
    out = Path(out) if out is not None else Path(f"report-run{run}.html")
    if out.is_dir():
        out = out / f"report-run{run}.html"
    check_writable(out, "--out")  # before the page is built: a bad --out is answered at once
    with open_archive(archive_path) as archive:
        page = build_report(archive, run)
        scored = archive.outcomes(run)
        spent = RunBudget.from_archive(archive, run).spent
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it private; a report is for sharing
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return ReportResult(
        out=out,
        run=run,
        evaluations=spent,
        best_fitness=max((s.fitness for s in scored), default=0.0),
    )
