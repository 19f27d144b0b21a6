"""Offline suite: lowered seeds, an offline search from each, and the best kernel against PyTorch.

    python bench/offline_suite.py                                        # GPU: the default suite
    python bench/offline_suite.py --budget 10 --out offline_suite.json   # shorter search, JSON
    python bench/offline_suite.py --tasks gelu softmax --budget 3        # smoke run, ~2 min
    python bench/offline_suite.py --budget 10 --deadline-s 420           # time-boxed: no task
                                                       # starts after 420 s; the rest are named

For each task (default: the built-ins that lower, gelu silu_and_mul softmax log_softmax layernorm
rmsnorm fused_add_rmsnorm, and every task folder in tests/data/lowering/; `--tasks` takes
built-in names, names of those folders, or task folder paths), one process, one run:
1. lowers the reference with the offline translator (hipevolve.agents.roles.translator.lowered) or
   records the one-line reason it does not lower, and evaluates the lowered seed through the
   verifier pipeline (evaluate_many, through evolution.evaluators.pipeline_evaluator): its status;
2. runs an offline search from it (run_evolution, the offline mutator, default
   EvolutionSettings, a temporary SQLite archive, --budget evaluations, seed 0). The task's
   shipped seeds are removed so that the run starts from the lowering, as a seedless task does
   offline; the seed's evaluation from step 1 is reused (it counts toward the budget, once);
3. times on the task's largest timed case (by input bytes): the best kernel as the verifier
   timed it in its sandboxed worker during the search (a candidate never runs outside the
   verifier's worker processes), and, in this process right after the search, PyTorch eager (the
   reference Model) and torch.compile of the reference (default mode; compiled and warmed up
   before timing, so compile time is excluded). All three use the same timer
   (hipevolve.verifier.gpu.timing: Clock and time_trials, caches flushed before every trial, events
   around the call), input sets drawn the same way and the verifier's warm-up and trial counts;
   the median trial is reported. The eager time measured here is printed next to the verifier's
   own reference time for the case, so the two timings can be seen to agree.
Prints one table: task, family (pointwise / reduction / fusion / gemm, from task.toml's family),
seed correct, evaluations, best speedup vs eager and vs torch.compile; then per family the
coverage (correct offline seeds / tasks) and the geometric means of both speedups over the tasks
that have one. `--out FILE` writes the rows and the summary as JSON.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

ROOT = Path(__file__).resolve().parent.parent
TEST_TASKS = ROOT / "tests" / "data" / "lowering"
BUILTIN = ("gelu", "silu_and_mul", "softmax", "log_softmax", "layernorm", "rmsnorm",
           "fused_add_rmsnorm")  # fmt: skip
FAMILIES = {"elementwise": "pointwise", "pointwise": "pointwise", "reduction": "reduction",
            "fusion": "fusion", "matmul": "gemm", "gemm": "gemm"}  # fmt: skip
INPUT_BUDGET = 1 << 30  # bytes of timing input sets, as the verifier's default


class Row(BaseModel):
    """One task of the suite."""

    task: str
    family: str
    lowered: bool
    reason: str = Field(default="", description="why it did not lower, or why it stopped early")
    seed_status: str = Field(default="", description="the lowered seed's verifier status")
    seed_correct: bool = False
    evaluations: int = 0
    stop: str = Field(default="", description="why the search stopped")
    best_fitness: float | None = None
    case: str | None = Field(default=None, description="the case timed side by side")
    eager_us: float | None = None
    compile_us: float | None = None
    kernel_us: float | None = None
    verifier_ref_us: float | None = Field(
        default=None, description="the verifier's eager time for the case (agrees with eager_us)"
    )
    verifier_speedup: float | None = Field(
        default=None, description="the verifier's speedup vs eager for the case"
    )
    wall_s: float = 0.0

    @property
    def vs_eager(self) -> float | None:
        return _ratio(self.eager_us, self.kernel_us)

    @property
    def vs_compile(self) -> float | None:
        return _ratio(self.compile_us, self.kernel_us)


class FamilySummary(BaseModel):
    family: str
    tasks: int
    correct_seeds: int
    geomean_vs_eager: float | None = Field(description="over the tasks with a timed best kernel")
    geomean_vs_compile: float | None
    timed: int = Field(description="tasks with a timed best kernel")


# ------------------------------------------------------------------------------ pure: table


def _ratio(reference_us: float | None, kernel_us: float | None) -> float | None:
    if reference_us is None or not kernel_us:
        return None
    return reference_us / kernel_us


def family_of(task_family: str) -> str:
    """The suite's family name for a task.toml family (elementwise is pointwise)."""
    return FAMILIES.get(task_family, task_family)


def geomean(values: Sequence[float]) -> float | None:
    if not values:
        return None
    return math.exp(statistics.fmean(math.log(v) for v in values))


def summarise(rows: Sequence[Row]) -> list[FamilySummary]:
    """Per family, in order of first appearance: coverage and geometric-mean speedups."""
    families: dict[str, list[Row]] = {}
    for row in rows:
        families.setdefault(row.family, []).append(row)
    out = []
    for family, members in families.items():
        eager = [r.vs_eager for r in members if r.vs_eager is not None]
        compiled = [r.vs_compile for r in members if r.vs_compile is not None]
        out.append(
            FamilySummary(
                family=family,
                tasks=len(members),
                correct_seeds=sum(r.seed_correct for r in members),
                geomean_vs_eager=geomean(eager),
                geomean_vs_compile=geomean(compiled),
                timed=sum(r.vs_eager is not None and r.vs_compile is not None for r in members),
            )
        )
    return out


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_table(rows: Sequence[Row]) -> str:
    lines = [
        f"{'task':<22}{'family':<11}{'seed':<9}{'evals':>6}{'vs eager':>10}{'vs compile':>12}  note"
    ]
    for r in rows:
        seed = ("yes" if r.seed_correct else "no") if r.lowered else "unlowered"
        note = r.reason if r.reason else (f"case {r.case}" if r.case else "")
        lines.append(
            f"{r.task:<22}{r.family:<11}{seed:<9}{r.evaluations:>6}{_x(r.vs_eager):>10}"
            f"{_x(r.vs_compile):>12}  {note}".rstrip()
        )
    lines += ["", "per family: correct offline seeds / tasks; geometric means of the best kernels"]
    for s in summarise(rows):
        lines.append(
            f"{s.family:<11} coverage {s.correct_seeds}/{s.tasks} "
            f"({s.correct_seeds / s.tasks:.0%}); vs eager {_x(s.geomean_vs_eager)}, "
            f"vs torch.compile {_x(s.geomean_vs_compile)} (over {s.timed} of {s.tasks} tasks)"
        )
    return "\n".join(lines)


def largest(sizes: dict[str, int]) -> str:
    """The case with the most input bytes (the first of equals)."""
    return max(sizes, key=lambda name: sizes[name])


# ------------------------------------------------------------------------------ GPU work


def default_tasks() -> list[str]:
    return [*BUILTIN, *sorted(p.name for p in TEST_TASKS.iterdir() if (p / "task.toml").exists())]


def resolve_task(name: str):  # noqa: ANN201
    """A built-in name, a tests/data/lowering folder name, or a task folder path."""
    from hipevolve.problems import get_task, load_task_folder

    for folder in (Path(name), TEST_TASKS / name):
        if (folder / "task.toml").exists():
            return load_task_folder(folder, "user")
    return get_task(name)


class Remembering:
    """An Evaluator that answers candidates it has scored before from memory (the lowered seed,
    scored in step 1) and sends the rest to the pipeline in one batch."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.settings_key, self.toolchain = inner.settings_key, inner.toolchain
        self.device = inner.device
        self.known: dict[str, Any] = {}

    @property
    def parallelism(self) -> int:
        return self.inner.parallelism

    def close(self) -> None:
        self.inner.close()

    def prepare(self, candidates: list) -> list:
        return self.inner.prepare(candidates)

    def run(self, prepared: list) -> list:
        todo = [p for p in prepared if p.candidate.source_hash not in self.known]
        for p, e in zip(todo, self.inner.run(todo) if todo else [], strict=True):
            self.known[p.candidate.source_hash] = e
        return [self.known[p.candidate.source_hash] for p in prepared]

    def __call__(self, candidates: list) -> list:
        todo = [c for c in candidates if c.source_hash not in self.known]
        for c, e in zip(todo, self.inner(todo) if todo else [], strict=True):
            self.known[c.source_hash] = e
        return [self.known[c.source_hash] for c in candidates]


def side_by_side(task: Any, case_name: str, settings: Any) -> dict[str, Any]:
    """Median trial times (us) of the reference eager and under torch.compile on one case."""
    import torch

    from hipevolve.core.reference import build_inputs, load_module
    from hipevolve.verifier.gpu.timing import Clock, input_sets_for, tensor_bytes, time_trials

    device = "cuda"  # ROCm builds of torch name HIP devices cuda too
    module = load_module(task.reference)
    case = task.case(case_name)
    calls = settings.warmup + settings.trials
    first = build_inputs(module, case.inputs, device, 0, True)
    sets = [first] + [
        build_inputs(module, case.inputs, device, seed, True)
        for seed in range(1, input_sets_for(tensor_bytes(first), INPUT_BUDGET, calls))
    ]
    init = list(module.get_init_inputs(**case.init))
    torch.manual_seed(0)
    eager = module.Model(*init).to(device).eval()
    compiled = torch.compile(eager)
    with torch.no_grad():
        for _ in range(3):  # compiles on the first call: kept out of the timing
            compiled(*sets[0])
    torch.cuda.synchronize()
    clock = Clock(device)
    times: dict[str, Any] = {}
    for name, model in {"eager": eager, "compile": compiled}.items():
        with torch.no_grad():
            trials, _ = time_trials(
                clock, lambda args, m=model: m(*args), sets, settings.trials, settings.warmup
            )
        times[f"{name}_us"] = statistics.median(trials)
    return times


def release_device_memory() -> None:
    """What side_by_side left on the GPU: torch.compile's graphs and the allocator's cache."""
    import gc

    import torch

    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()


def largest_timed_case(task: Any) -> str:
    from hipevolve.core.reference import build_inputs, load_module
    from hipevolve.verifier.gpu.timing import tensor_bytes

    module = load_module(task.reference)
    timed = task.timed_cases or task.cases
    return largest(
        {c.name: tensor_bytes(build_inputs(module, c.inputs, "cuda", 0, True)) for c in timed}
    )


def run_task(name: str, budget: int, seed: int, settings: Any) -> Row:
    from hipevolve.agents.roles.translator import lowered
    from hipevolve.app.run_job import first_candidates
    from hipevolve.archive.store import Archive
    from hipevolve.core.candidate import Candidate
    from hipevolve.evolution.islands import EvolutionSettings
    from hipevolve.evolution.run import run_evolution
    from hipevolve.verifier.evaluators import pipeline_evaluator

    began = time.monotonic()
    task = resolve_task(name).model_copy(update={"seeds": ()})
    row = Row(task=task.name, family=family_of(task.family), lowered=False)
    found = lowered(task)
    if not isinstance(found, Candidate):
        return row.model_copy(update={"reason": found.reason, "wall_s": time.monotonic() - began})
    inner = pipeline_evaluator(task, settings, "auto")
    if inner.backend not in ("cuda", "rocm"):
        raise SystemExit(f"the offline suite runs kernels on a GPU; found {inner.backend}")
    evaluate = Remembering(inner)
    try:
        first = evaluate([found])[0]
        update: dict[str, Any] = {
            "lowered": True, "seed_status": str(first.status), "seed_correct": first.ok,
            "evaluations": 1,
        }  # fmt: skip
        if not first.ok:
            update["reason"] = f"seed {first.status}: {first.message}"[:120]
        else:
            with (
                tempfile.TemporaryDirectory(prefix="offline-suite-") as tmp,
                Archive.open(Path(tmp) / "offline.db") as archive,
            ):
                summary = run_evolution(
                    task, archive, EvolutionSettings(), evaluate,
                    first=first_candidates(task), budget=budget, seed=seed,
                )  # fmt: skip
                top = archive.best(summary.run)
                assert top is not None  # the seed itself is ok
            update |= {
                "evaluations": summary.progress.evaluations,
                "stop": summary.reason,
                "best_fitness": top.fitness,
            }
    finally:
        # Its judges exit and give their device memory back (each may keep gigabytes cached):
        # kept across tasks, they filled the GPU by the sixth task of a run.
        inner.close()
    if first.ok:
        # the kernel's time is the verifier's: candidate code never runs in this process
        name = largest_timed_case(task)
        case = next(c for c in top.evaluation.cases if c.case == name)
        update |= side_by_side(task, name, settings) | {
            "case": name,
            "kernel_us": case.time_us,
            "verifier_ref_us": case.ref_time_us,
            "verifier_speedup": case.speedup,
        }
        release_device_memory()
    update["wall_s"] = time.monotonic() - began
    return row.model_copy(update=update)


class Report(BaseModel):
    device: str
    budget: int
    seed: int
    rows: list[Row]
    families: list[FamilySummary]
    wall_s: float


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tasks", nargs="+", default=None, help="task names or folders (default: the suite)"
    )
    parser.add_argument("--budget", type=int, default=50, help="evaluations per search (50)")
    parser.add_argument("--seed", type=int, default=0, help="search seed (0)")
    parser.add_argument("--out", type=Path, default=None, help="also write JSON to this file")
    parser.add_argument(
        "--deadline-s",
        type=float,
        default=None,
        help="time box in seconds: no task starts past it (the tasks left are named, not rowed)",
    )
    args = parser.parse_args(argv)

    import torch

    from hipevolve.core.config import load_settings

    settings = load_settings().verifier
    started = time.monotonic()
    rows = []
    names = args.tasks or default_tasks()
    for i, name in enumerate(names):
        if args.deadline_s is not None and time.monotonic() - started > args.deadline_s:
            print(f"time box reached; not run: {' '.join(names[i:])}")
            break
        row = run_task(name, args.budget, args.seed, settings)
        print(
            f"  {row.task}: seed {row.seed_status or 'unlowered'}, {row.evaluations} evaluations,"
            f" vs eager {_x(row.vs_eager)}, vs compile {_x(row.vs_compile)} "
            f"({row.wall_s:.0f} s)",
            flush=True,
        )
        rows.append(row)
    print()
    print(format_table(rows))
    wall = time.monotonic() - started
    print(f"\n{len(rows)} tasks in {wall:.0f} s, budget {args.budget}, seed {args.seed}")
    if args.out:
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""
        report = Report(
            device=device, budget=args.budget, seed=args.seed, rows=rows,
            families=summarise(rows), wall_s=wall,
        )  # fmt: skip
        args.out.write_text(report.model_dump_json(indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    sys.exit(main())
