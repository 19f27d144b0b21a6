"""Rich renderings of tasks for the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterable

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from hipevolve.core.hardware import ROOFLINE_GPUS
from hipevolve.core.taskspec import TaskSpec


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.1f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def _ordered(tasks: Iterable[TaskSpec]) -> list[TaskSpec]:
    return sorted(tasks, key=lambda t: (t.origin != "builtin", t.family, t.name))


def task_summary(task: TaskSpec) -> dict:
    """One task as `evolve tasks list --json` prints it."""
    return {
        "name": task.name,
        "family": task.family,
        "origin": task.origin,
        "timed_cases": len(task.timed_cases),
        "small_cases": len(task.small_cases),
        "tolerance": task.tolerance.kind,
        "description": task.description,
        "reference": str(task.reference),
    }


def task_lines(tasks: Iterable[TaskSpec], width: int | None) -> list[str]:
    """`evolve tasks list`: a header and one line per task, whatever the width. On a terminal
    (`width`) a long description ends in an ellipsis; elsewhere (None: a pipe, a log) it is
    printed whole, so each task stays one greppable line."""
    rows = [("name", "family", "origin", "cases", "description")] + [
        (
            t.name,
            t.family,
            t.origin,
            f"{len(t.timed_cases)}t/{len(t.small_cases)}s",
            " ".join(t.description.split()),
        )
        for t in _ordered(tasks)
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for row in rows:
        line = "  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True))
        line = f"{line}  {row[4]}".rstrip()
        if width is not None and len(line) > width:
            line = line[: max(width - 1, 0)].rstrip() + "\u2026"
        lines.append(line)
    return lines


def case_table(task: TaskSpec) -> Table:
    table = Table(title=f"{task.name}: cases")
    table.add_column("case", no_wrap=True)
    table.add_column("arguments", overflow="fold")
    table.add_column("dtypes")
    table.add_column("timed")
    for c in task.cases:
        args = ", ".join(f"{k}={v}" for k, v in {**c.init, **c.inputs}.items())
        table.add_row(escape(c.name), escape(args), ", ".join(c.dtypes), "yes" if c.timed else "no")
    return table


def roofline_table(task: TaskSpec) -> Table:
    """Lower bounds per case and GPU: memory-bound / compute-bound, microseconds."""
    table = Table(title=f"{task.name}: roofline (lower bounds, us: memory / compute)")
    table.add_column("case", no_wrap=True)
    table.add_column("bytes", justify="right", no_wrap=True)
    table.add_column("FLOP", justify="right", no_wrap=True)
    for gpu in ROOFLINE_GPUS:
        table.add_column(gpu.name, justify="right", no_wrap=True)
    for c in task.cases:
        if not c.roofline:
            continue
        bounds = c.roofline.bounds_us()
        table.add_row(
            c.name,
            _si(c.roofline.bytes, "B"),
            _si(c.roofline.flops, "FLOP"),
            *(f"{bounds[g.name][0]:.1f} / {bounds[g.name][1]:.1f}" for g in ROOFLINE_GPUS),
        )
    return table


def reference_run_line(r) -> str:
    """One reference run of `evolve tasks check`, printed as soon as it ends."""
    mark = "[green]ok[/green]    " if r.ok else "[red]failed[/red]"
    detail = "; ".join(r.outputs) or r.error
    return f"{mark} {r.task} {r.case}: {r.seconds:.3f} s: {escape(detail)}"


def short_kernel_name(name: str) -> str:
    """'void (anonymous namespace)::softmax_rows<float>(float const*, long)' -> 'softmax_rows<float>'."""
    name = name.replace("(anonymous namespace)::", "").removeprefix("void ")
    return name.split("(")[0] or name


def static_table(facts) -> Table:
    targets = sorted({f.target for f in facts})
    if all(f.platform == "cuda" for f in facts):  # no AMD toolchain here: the CUDA build's
        table = Table(
            title=f"static facts of the CUDA build ({', '.join(targets)})",
            caption="regs: per thread/0/0; occ: warps per scheduler; spill: stack "
            "bytes/spilled registers; loads: PTX bits x count; MFMA: tensor-core ops; "
            "ds: shared-memory instructions",
        )
    else:
        table = Table(
            title=f"static AMD facts ({', '.join(targets)})",
            caption="regs: VGPR/AGPR/SGPR; occ: waves per SIMD; spill: scratch "
            "bytes/spills; loads: bits x count; ds: LDS instructions",
        )
    table.add_column("kernel", overflow="fold", min_width=24)
    for column in ("regs", "occ", "LDS", "spill", "MFMA", "loads", "ds"):
        table.add_column(column, no_wrap=True)
    for f in facts:
        loads = " ".join(f"{w}x{n}" for w, n in {**f.global_loads, **f.buffer_loads}.items())
        name = short_kernel_name(f.kernel).replace("__hip_bfloat16", "bf16")
        if len(targets) > 1:
            name += f" [{f.target}]"
        table.add_row(
            name,
            f"{f.vgprs}/{f.agprs}/{f.sgprs}",
            str(f.occupancy),
            str(f.lds_bytes),
            f"{f.scratch_bytes}/{f.spills}",
            str(f.mfma),
            loads or "-",
            str(f.lds_ops),
        )
    return table


def evaluation_json(ev) -> str:
    """`evolve verify --json`: the Evaluation, plus what a reader would otherwise compute from
    it: each case's speedup (ref_time_us / time_us) and the fitness (their geometric mean when
    ok, else 0)."""
    data = ev.model_dump(mode="json")
    for case, out in zip(ev.cases, data["cases"], strict=True):
        out["speedup"] = case.speedup
    data["fitness"] = ev.fitness
    return json.dumps(data, indent=2)


def print_evaluation(console: Console, ev) -> None:
    colour = "green" if ev.status.value in ("ok", "compiled") else "red"
    console.print(
        f"[{colour}]{ev.status.value}[/{colour}] on {ev.task} ({ev.backend}): {ev.message}",
        soft_wrap=True,
    )
    if ev.cases:
        table = Table(title="cases")
        for column in (
            "case",
            "correct",
            "time us",
            "reference us",
            "speedup",
            "CV",
            "rel RMS err",
            "max abs err",
            "roofline",
        ):
            table.add_column(column, justify="right")

        def fmt(v, spec=".3g"):
            return "-" if v is None else format(v, spec)

        for c in ev.cases:
            table.add_row(
                c.case,
                "yes" if c.correct else "no",
                fmt(c.time_us, ".1f"),
                fmt(c.ref_time_us, ".1f"),
                fmt(c.speedup, ".2f") + "x",
                fmt(c.cv, ".1%"),
                fmt(c.rel_rms_err, ".2e"),
                fmt(c.max_abs_err, ".2e"),
                fmt(c.roofline_fraction, ".0%"),
            )
        console.print(table)
        if ev.status.value == "ok":
            console.print(f"fitness (geometric-mean speedup): {ev.fitness:.3f}x")
    if ev.static:
        console.print(static_table(ev.static))
    for text in (ev.compile_log, ev.mismatch):
        if text:
            console.print(text, markup=False, highlight=False, soft_wrap=True)
    for flag in ev.flags:
        if flag.split(":", 1)[-1] in ev.message:  # the rejection's reason, printed above
            continue
        console.print(f"flag: {flag}", markup=False, highlight=False, soft_wrap=True)


def _plain(console: Console, text: str, **options: object) -> None:
    """Text as it is: a task's own words are never read as rich markup ([i] stays [i])."""
    console.print(text, markup=False, highlight=False, **options)


def print_task(console: Console, task: TaskSpec, full: bool = False) -> None:
    """`evolve tasks show`: the task's description, tolerance, notes, cases and roofline, and a
    line per anchor; with `full`, each anchor's figures and the reference's source too (the
    Gated DeltaNet reference alone is 273 lines)."""
    name = Text(task.name, style="bold")
    console.print(
        Text.assemble(name, f" ({task.family}, {task.origin}): {task.description}"),
        soft_wrap=not console.is_terminal,
        highlight=False,
    )
    _plain(console, f"reference: {task.reference}")
    _plain(console, f"tolerance: {task.tolerance.describe()}; checked on {task.check_seeds} seeds")
    if task.seeds:
        _plain(console, "seed kernels: " + ", ".join(str(s) for s in task.seeds))
    if task.notes:
        _plain(console, task.notes.strip())
    console.print(case_table(task))
    console.print(roofline_table(task))
    for anchor in task.anchors:
        if not full:
            _plain(
                console,
                f"anchor: {anchor.name} ({anchor.hardware}): {len(anchor.figures)} "
                f"figures, {anchor.unit}",
            )
            continue
        table = Table(
            title=escape(f"anchor: {anchor.name} ({anchor.hardware})"),
            caption=escape(anchor.source),
        )
        table.add_column("case")
        table.add_column(escape(anchor.unit), justify="right")
        for case, value in anchor.figures.items():
            table.add_row(escape(case), f"{value:g}")
        console.print(table)
    source = task.reference.read_text()
    if not full:
        _plain(
            console,
            f"reference source: {len(source.splitlines())} lines "
            f"(`evolve tasks show {task.name} --full` prints it, and the anchors' figures)",
        )
    elif console.is_terminal:  # long lines wrap; nothing is cut at the terminal's edge
        console.print(Syntax(source, "python", line_numbers=False, word_wrap=True))
    else:  # a pipe or a file: the source as it is, line for line
        _plain(console, source.rstrip("\n"), soft_wrap=True)


def task_detail(task: TaskSpec) -> dict:
    """One task as `evolve tasks show --json` prints it: the spec and its reference's source."""
    return {**task.model_dump(mode="json"), "reference_source": task.reference.read_text()}
