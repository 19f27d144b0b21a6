"""bench/gdn_vs_fla.py's results: one row of one case (`Result`), the ratios to FLA and to
FlashQLA, the per-row summary against FlashQLA, the JSON form and the printed table. Pure
Python, no GPU."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from gdn_rows import DECODE, PREFILL

from hipevolve.core.hardware import H200, Gpu

BASELINE = {PREFILL: "FLA chunk", DECODE: "FLA fused_recurrent"}
ANCHOR = "FlashQLA"  # the prefill bar (issue 37): ratio in graph mode, its row's time / ours
HBM_BYTES_PER_S = H200.hbm_bytes_per_s  # the default card; the bench passes the one it ran on


@dataclass
class Result:
    """One row of one case. Times in microseconds; None where not measured."""

    task: str
    row: str
    case: str
    roofline_bytes: float = 0.0
    eager_us: float | None = None
    graph_us: float | None = None
    eager_trials: int = 0
    graph_trials: int = 0
    err_o: float | None = None
    err_state: float | None = None
    ok: bool | None = None
    x_fla_eager: float | None = None
    x_fla_graph: float | None = None
    x_qla_graph: float | None = None  # FlashQLA's graph time / this row's (prefill)
    graph_note: str = ""  # why there is no graph time
    note: str = ""  # not run, error, fewer trials


def roofline_pct(roofline_bytes: float, us: float | None, bandwidth: float = HBM_BYTES_PER_S):
    """Share of the memory roofline reached, in percent: bytes / time / bandwidth."""
    if us is None or us <= 0 or roofline_bytes <= 0:
        return None
    return 100.0 * roofline_bytes / (us * 1e-6) / bandwidth


def speedup(baseline_us: float | None, us: float | None) -> float | None:
    """baseline / row time: > 1 means the row is faster than the baseline."""
    if baseline_us is None or us is None or us <= 0:
        return None
    return baseline_us / us


def add_ratios(results: list[Result]) -> None:
    """Fills x_fla_* from the baseline row of the same task and case, and x_qla_graph from
    the FlashQLA row's graph time."""
    base = {(r.task, r.case): r for r in results if r.row == BASELINE[r.task]}
    qla = {(r.task, r.case): r for r in results if r.row == ANCHOR}
    for r in results:
        b = base.get((r.task, r.case))
        if b is not None:
            r.x_fla_eager = speedup(b.eager_us, r.eager_us)
            r.x_fla_graph = speedup(b.graph_us, r.graph_us)
        a = qla.get((r.task, r.case))
        if a is not None:
            r.x_qla_graph = speedup(a.graph_us, r.graph_us)


def anchor_summary(results: Sequence[Result], rows: Sequence[str]) -> list[str]:
    """Per row of `rows` (ours: the seed, a candidate): its graph-mode ratio to FlashQLA on
    each case, and whether it reaches 1.0 on every case FlashQLA ran within the tolerance."""
    lines = []
    for name in rows:
        mine = [r for r in results if r.row == name and r.x_qla_graph is not None]
        if not mine:
            continue
        within = [r for r in mine if r.ok]
        ahead = [r for r in within if r.x_qla_graph >= 1.0]
        cells = ", ".join(f"{r.case} {r.x_qla_graph:.2f}" for r in mine)
        lines.append(f"{name} / {ANCHOR} in CUDA graphs: {cells}; at least 1.0 within the "
                     f"tolerance on {len(ahead)} of {len(mine)} cases")  # fmt: skip
    return lines


def as_json(r: Result, card: Gpu = H200) -> dict[str, Any]:
    """A result with its roofline shares on `card`, for --out."""
    return {
        **asdict(r),
        "roofline_pct_eager": roofline_pct(r.roofline_bytes, r.eager_us, card.hbm_bytes_per_s),
        "roofline_pct_graph": roofline_pct(r.roofline_bytes, r.graph_us, card.hbm_bytes_per_s),
    }


def num(x: float | None, spec: str) -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, spec)


def _small(x: float | None, spec: str, floor: float) -> str:
    """x in `spec`, or in scientific notation when below `floor` (so it does not read as 0)."""
    if x is None or not math.isfinite(x):
        return "-"
    return format(x, spec) if x >= floor else f"{x:.0e}"


def _err(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"


COLUMNS = (
    ("row", 21, "<"), ("case", 15, "<"), ("eager us", 10, ">"), ("graph us", 10, ">"),
    ("xFLA eager", 10, ">"), ("xFLA graph", 10, ">"), ("xQLA graph", 10, ">"),
    ("%roof e/g", 11, ">"),
    ("err o", 8, ">"), ("err state", 9, ">"), ("ok", 4, ">"),
)  # fmt: skip


def format_table(task: str, results: Sequence[Result], tolerance: float, card: Gpu = H200) -> str:
    """One task's table, then notes (graph n/a reasons, fewer trials, rows not run); the
    roofline shares at `card`'s HBM bandwidth."""
    bandwidth = card.hbm_bytes_per_s
    lines = [
        f"{task}: tolerance rel_rms {tolerance:g}; xFLA = {BASELINE[task]} time / row time "
        f"(> 1: faster than FLA); xQLA = {ANCHOR}'s graph time / row's; %roof = roofline bytes "
        f"/ time / {bandwidth / 1e12:g} TB/s ({card.name}; decode: the share of the state-traffic "
        "floor)",
        " ".join(f"{name:{align}{width}}" for name, width, align in COLUMNS),
    ]
    notes = []
    for r in results:
        if r.eager_us is None and r.graph_us is None and r.note:
            lines.append(f"{r.row:<21} {r.case:<15} {r.note}")
            continue
        roof = (
            roofline_pct(r.roofline_bytes, r.eager_us, bandwidth),
            roofline_pct(r.roofline_bytes, r.graph_us, bandwidth),
        )
        ok = "-" if r.ok is None else ("yes" if r.ok else "NO")
        cells = (
            r.row, r.case, num(r.eager_us, ".1f"), num(r.graph_us, ".1f") if r.graph_us
            else "n/a", _small(r.x_fla_eager, ".2f", 0.01), _small(r.x_fla_graph, ".2f", 0.01),
            _small(r.x_qla_graph, ".2f", 0.01),
            f"{_small(roof[0], '.1f', 0.1)}/{_small(roof[1], '.1f', 0.1)}", _err(r.err_o), _err(r.err_state), ok,
        )  # fmt: skip
        lines.append(" ".join(f"{c:{a}{w}}" for c, (_, w, a) in zip(cells, COLUMNS, strict=True)))
        if r.graph_note:
            notes.append(f"  {r.row}, {r.case}: graph: n/a ({r.graph_note})")
        if r.note:
            notes.append(f"  {r.row}, {r.case}: {r.note}")
    return "\n".join(lines + notes)
