"""KernelBench round trip: its tasks in, lowered candidates out, over levels 1-3.

    nice python bench/kernelbench_roundtrip.py /tmp/kb                      # CPU part, every task
    nice python bench/kernelbench_roundtrip.py /tmp/kb --sample 10          # 10 tasks per level
    python bench/kernelbench_roundtrip.py /tmp/kb --gpu --out kb.json       # + GPU verdicts (L1-2)
    python bench/kernelbench_roundtrip.py /tmp/kb --levels 1 --sample 3     # smoke run, ~1 min
    python bench/kernelbench_roundtrip.py /tmp/kb --rows kb.json --gpu      # GPU verdicts only

`--rows FILE` takes steps 1-5 from an earlier run's `--out` file instead of running them, for a GPU
machine without the AMD toolchain: it lowers again only the tasks whose lowered candidate built (the
lowering is deterministic) and goes on to step 6.

The argument is a KernelBench checkout (its KernelBench/ folder holds level1..level4) or that
dataset folder itself. Per level, every task (or every k-th with --sample N: N spread evenly,
said in the header):
1. loaded: the file read as a task (problems/kernelbench.py) through `--tasks-dir` on the dataset
   root, the way `evolve tasks list --tasks-dir KernelBench` reads it;
2. ref ok: its reference run on the CPU on its reduced case (problems/check.py), KernelBench's
   GPU-sized inputs scaled down;
3. lowered: the offline translator's native candidate (agents/lowering/lower.py), else its
   one-line reason (the most common reasons are printed per level);
4. builds: the lowered ModelNew built on the CPU from the written model.py (app/translate.py);
5. gfx942 / 0 spills: the lowered candidate through the verifier's static backend (screen, then
   the gfx942 device compile): status `compiled`, and no kernel with scratch spills;
6. with --gpu, levels 1-2 only: each lowered candidate verified on this machine's GPU
   (verifier.pipeline.evaluate_many, default settings): ok / incorrect / other (with statuses).
Prints one table and the wall time; `--out FILE` writes every row as JSON.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from pathlib import Path

from hipevolve.agents.lowering.lower import Unlowered, lower
from hipevolve.app.translate import model_builds_on_cpu
from hipevolve.core.candidate import write_candidate
from hipevolve.core.config import load_settings
from hipevolve.problems import discover
from hipevolve.problems.check import cases_to_check, run_reference


def dataset_root(path: Path) -> Path:
    """The folder holding level1..level4: the checkout's KernelBench/ or `path` itself."""
    for root in (path / "KernelBench", path):
        if (root / "level1").is_dir():
            return root
    sys.exit(f"error: no level1 folder under {path} (pass a KernelBench checkout)")


def level_of(task) -> int:  # noqa: ANN001 (a TaskSpec)
    return int(task.reference.parent.name.removeprefix("level"))


def sampled(tasks: list, n: int | None) -> list:
    if not n or n >= len(tasks):
        return tasks
    step = len(tasks) / n
    return [tasks[int(i * step)] for i in range(n)]


def cpu_row(task, settings, folder: Path) -> dict:  # noqa: ANN001
    from hipevolve.verifier.pipeline import prepare

    row: dict = {"task": task.name, "level": level_of(task)}
    start = time.perf_counter()
    case = cases_to_check(task)[0]
    ref = run_reference(task, case)
    row.update(ref_ok=ref.ok, ref_case=case.name, ref_s=round(ref.seconds, 2), ref_error=ref.error)
    lowered = lower(task)
    row["lowered"] = not isinstance(lowered, Unlowered)
    if isinstance(lowered, Unlowered):
        row["reason"] = lowered.reason
        row["seconds"] = round(time.perf_counter() - start, 2)
        return row
    written = write_candidate(lowered, folder / task.name)
    problem = model_builds_on_cpu(lowered, task, written)
    row.update(builds=not problem, build_error=problem)
    done = prepare(lowered, task, settings.verifier, "static").done
    facts = done.static if done else ()
    row.update(static=done.status.value if done else "none",
               static_message=(done.message if done else "")[:200],
               kernels=len(facts), spills=sum(f.spills for f in facts),
               seconds=round(time.perf_counter() - start, 2))  # fmt: skip
    return row


def earlier_rows(path: Path, picked: list, folder: Path) -> list[dict]:
    """Rows of an earlier `--out` for the picked tasks; the built candidates lowered again."""
    try:
        stored = {row["task"]: row for row in json.loads(path.read_text())}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.exit(f"error: cannot read rows from {path} ({exc}); pass a file an earlier --out wrote")
    rows = []
    for task in picked:
        row = stored.get(task.name)
        if row is None:
            continue
        if row.get("builds"):
            lowered = lower(task)
            if isinstance(lowered, Unlowered):
                sys.exit(f"error: {task.name} no longer lowers ({lowered.reason}); run steps 1-5 again")
            write_candidate(lowered, folder / task.name)
        rows.append(row)
    print(f"{len(rows)} rows from {path}, {sum(bool(r.get('builds')) for r in rows)} candidates "
          "lowered again", flush=True)
    return rows


def gpu_verdicts(rows: list[dict], tasks: dict, settings, folder: Path) -> None:  # noqa: ANN001
    from hipevolve.core.candidate import load_candidate
    from hipevolve.verifier.build.backends import resolve_backend
    from hipevolve.verifier.pipeline import evaluate

    backend = resolve_backend("auto")
    for row in rows:
        if row["level"] > 2 or not row.get("builds"):
            continue
        task = tasks[row["task"]]
        # the GPU checks the default (timed) case: the reduced one sets module constants only
        # a CPU check applies
        cases = task.timed_cases
        evaluation = evaluate(load_candidate(folder / task.name), task, settings.verifier,
                              backend, cases=cases)  # fmt: skip
        row.update(gpu=evaluation.status.value, gpu_message=evaluation.message[:200])
        print(f"  gpu {task.name}: {evaluation.status.value} {evaluation.message[:100]}",
              flush=True)


def table(rows: list[dict], levels: list[int], gpu: bool) -> str:
    head = ["level", "loaded", "ref ok", "lowered", "builds", "gfx942", "0 spills"]
    if gpu:
        head += ["gpu ok", "incorrect", "other"]
    lines = [" | ".join(f"{h:>9}" for h in head)]
    for level in levels:
        rs = [r for r in rows if r["level"] == level]
        cells = [level, len(rs), sum(r["ref_ok"] for r in rs), sum(r["lowered"] for r in rs),
                 sum(bool(r.get("builds")) for r in rs),
                 sum(r.get("static") == "compiled" for r in rs),
                 sum(r.get("static") == "compiled" and r["spills"] == 0 for r in rs)]  # fmt: skip
        if gpu:
            judged = [r for r in rs if "gpu" in r]
            ok = sum(r["gpu"] == "ok" for r in judged)
            bad = sum(r["gpu"] == "incorrect" for r in judged)
            cells += [ok, bad, len(judged) - ok - bad] if level <= 2 else ["-", "-", "-"]
        lines.append(" | ".join(f"{c:>9}" for c in cells))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a KernelBench checkout or its dataset folder")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--sample", type=int, default=None,
                        help="tasks per level, spread evenly (default: every task)")
    parser.add_argument("--gpu", action="store_true",
                        help="verify the lowered level 1-2 candidates on this machine's GPU")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON")
    parser.add_argument("--rows", type=Path, default=None,
                        help="steps 1-5 from an earlier --out file instead of running them")
    args = parser.parse_args()

    start = time.perf_counter()
    root = dataset_root(args.checkout)
    skipped: list[str] = []
    tasks = {name: t for name, t in discover([root], warn=skipped.append)
             .items() if t.origin == "kernelbench"}  # fmt: skip
    settings = load_settings({})
    picked = [t for level in args.levels
              for t in sampled(sorted((t for t in tasks.values() if level_of(t) == level),
                                      key=lambda t: t.name), args.sample)]  # fmt: skip
    counts = collections.Counter(level_of(t) for t in tasks.values())
    print(f"KernelBench at {root}: {dict(sorted(counts.items()))} tasks per level loaded, "
          f"{len(skipped)} files skipped; "
          + (f"sampled {args.sample} per level" if args.sample else "every task"), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kb-roundtrip-") as tmp:
        folder = Path(tmp)
        if args.rows:
            rows = earlier_rows(args.rows, picked, folder)
        for task in picked if not args.rows else ():
            row = cpu_row(task, settings, folder)
            rows.append(row)
            state = ("lowered, " + ("builds" if row.get("builds") else "does not build")
                     + f", {row.get('static')}, spills {row.get('spills')}"
                     if row["lowered"] else f"not lowered: {row['reason'][:90]}")  # fmt: skip
            print(f"  L{row['level']} {task.name}: ref {'ok' if row['ref_ok'] else 'FAILED'} "
                  f"({row['ref_s']} s), {state} [{row['seconds']} s]", flush=True)
        if args.gpu:
            gpu_verdicts(rows, tasks, settings, folder)
    print()
    print(table(rows, args.levels, args.gpu))
    for level in args.levels:
        reasons = collections.Counter(
            r["reason"].split(":")[0][:60] for r in rows if r["level"] == level and not r["lowered"]
        )
        print(f"level {level} not lowered, top reasons: "
              + "; ".join(f"{n}x {why}" for why, n in reasons.most_common(4)))
        failed = [f"{r['task']} ({r['ref_error'][:60]})" for r in rows
                  if r["level"] == level and not r["ref_ok"]]  # fmt: skip
        if failed:
            print(f"level {level} references failing on the CPU: " + "; ".join(failed[:5]))
    print(f"wall time {time.perf_counter() - start:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
