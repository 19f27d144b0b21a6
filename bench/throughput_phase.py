"""One phase of the side-by-side throughput bench, in a process of its own.

    PYTHONPATH=SHIM python bench/throughput_phase.py JOB.json OUT.json

bench/throughput_trees.py starts it with PYTHONPATH set to one tree's `hipevolve` namespace, so
everything here, and every judge, zygote and sandbox the pipeline starts, runs that tree's code.
JOB.json: {task, folders, cache_dir, trials, backend}. OUT.json: {statuses, seconds, wall_s,
imported_from, mode, start_s}.

Each tree evaluates as its runs do (`mode`). A tree whose run evaluator takes a run baseline
(PipelineEvaluator.use_baseline: the reference timed once a card and cached, then inside every
check_every-th evaluation only) gets it first, as `evolve` gets it before its first
evaluation; its seconds are `start_s`, outside the clock, since a run pays them once (and
never again on the card: they are cached). An older tree's runs timed the reference inside
every evaluation through evaluate_many, and so does its phase here. The clock covers the
evaluations alone (this process's own start is left out, as the single-tree bench leaves it
out).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main() -> None:
    job_file, out_file = Path(sys.argv[1]), Path(sys.argv[2])
    job = json.loads(job_file.read_text())
    import hipevolve
    from hipevolve.core.candidate import load_candidate
    from hipevolve.core.config import load_settings
    from hipevolve.problems import get_task

    imported_from = str(Path(hipevolve.__file__).resolve().parent.parent)
    task = get_task(job["task"])
    if job.get("cases"):  # the cases both trees define (throughput_trees.case_names)
        keep = set(job["cases"])
        task = task.model_copy(update={"cases": tuple(c for c in task.cases if c.name in keep)})
    update: dict = {"cache_dir": Path(job["cache_dir"])}
    if job.get("trials"):
        update["trials"] = job["trials"]
    settings = load_settings().verifier.model_copy(update=update)
    candidates = [load_candidate(Path(f)) for f in job["folders"]]
    evaluate, mode, start_s = run_evaluator(task, settings, job["backend"])
    start = time.monotonic()
    evaluations = evaluate(candidates)
    wall = time.monotonic() - start
    close = getattr(evaluate, "close", None)
    if close is not None:
        close()
    for c, e in zip(candidates, evaluations, strict=True):
        print(f"  {c.name}: {e.status} {e.message[:100]}", flush=True)
    out_file.write_text(json.dumps({
        "statuses": {c.name: str(e.status) for c, e in zip(candidates, evaluations, strict=True)},
        "seconds": {c.name: dict(e.seconds) for c, e in zip(candidates, evaluations, strict=True)},
        "wall_s": wall,
        "imported_from": imported_from,
        "mode": mode,
        "start_s": start_s,
    }))  # fmt: skip


def run_evaluator(task, settings, backend: str):  # noqa: ANN001, ANN201 (either tree's types)
    """(evaluate(candidates) -> evaluations, the mode in words, seconds before the clock): the
    tree's run evaluator with the run's baseline where it has one, else evaluate_many."""
    from hipevolve.verifier import evaluators
    from hipevolve.verifier.pipeline import evaluate_many

    pipeline = getattr(evaluators, "PipelineEvaluator", None)
    if pipeline is None or not hasattr(pipeline, "use_baseline"):
        return (
            lambda candidates: evaluate_many(candidates, task, settings, backend),
            "evaluate_many: the reference timed inside every evaluation",
            0.0,
        )
    from hipevolve.core.config import load_settings

    fitness = load_settings().fitness
    timer = pipeline(task, settings, backend)
    began = time.monotonic()
    try:
        baseline = timer.baseline(fitness.baseline_trials, fitness.baseline_target)
    finally:
        timer.close()  # the evaluator below starts its judges inside the clock, as evaluate_many
    start_s = time.monotonic() - began
    if isinstance(baseline, str):
        raise SystemExit(f"the run's baseline could not be timed: {baseline}")
    evaluator = pipeline(task, settings, backend)
    if baseline is None:  # nothing is timed on this backend (static): nor in a run
        return evaluator, "as a run: nothing timed on this backend", start_s
    evaluator.use_baseline(baseline, fitness.check_every)
    mode = (
        "as a run: the run's baseline (cached a card), the reference timed inside every "
        f"{fitness.check_every}th evaluation"
    )
    return evaluator, mode, start_s


if __name__ == "__main__":
    main()
