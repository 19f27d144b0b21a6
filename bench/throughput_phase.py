"""One phase of the side-by-side throughput bench, in a process of its own.

    PYTHONPATH=SHIM python bench/throughput_phase.py JOB.json OUT.json

bench/throughput_trees.py starts it with PYTHONPATH set to one tree's `hipevolve` namespace, so
everything here, and every judge, zygote and sandbox the pipeline starts, runs that tree's code.
JOB.json: {task, folders, cache_dir, trials, backend}. OUT.json: {statuses, seconds, wall_s,
imported_from}. Uses only what both trees have: load_candidate, get_task, load_settings and
evaluate_many. The clock covers evaluate_many alone (this process's own start is left out, as
the single-tree bench leaves it out).
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
    from hipevolve.verifier.pipeline import evaluate_many

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
    start = time.monotonic()
    evaluations = evaluate_many(candidates, task, settings, job["backend"])
    wall = time.monotonic() - start
    for c, e in zip(candidates, evaluations, strict=True):
        print(f"  {c.name}: {e.status} {e.message[:100]}", flush=True)
    out_file.write_text(json.dumps({
        "statuses": {c.name: str(e.status) for c, e in zip(candidates, evaluations, strict=True)},
        "seconds": {c.name: dict(e.seconds) for c, e in zip(candidates, evaluations, strict=True)},
        "wall_s": wall,
        "imported_from": imported_from,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
