"""Where a native evaluation's fixed time goes: the recorder, the timed inputs, the judge's stages.

    python bench/verifier_overheads.py                       # CPU or GPU, ~1 min
    python bench/verifier_overheads.py --reps 5 --calls 50   # smoke run
    python bench/verifier_overheads.py --judge-candidates 0  # without the pipeline phase

Issue 32: launch plans made evaluations about a third slower (H100: 0.2 s of recorder start per
evaluation, 0.07 s of per-call input shifting). This prints, per phase:
- recorder: forking a recorder from a warm zygote, and sending it the softmax seed's job until its
  plan arrives (the judge now forks it as the job arrives and sends the job before the
  reference's timing, verifier/gpu/judge/record_ahead.py: what is left on the evaluation's path is
  the part of the record that outlasts the reference's timing); on a GPU machine with the seed's
  real library, elsewhere with a stand-in C library (the softmax seed calls no launcher on the
  host);
- inputs: per timed call, the executor's fresh guarded copy of the softmax case's inputs
  (Executor.guarded_clone), the pooled shifted copy that replaces it (input_pool.py), and the
  plan's buffers made for the call (PlanModel.prepare), on the GPU when there is one;
- judge: with a GPU, the pipeline on the softmax bench candidates (bench/candidates/softmax,
  the correct ones): evaluations per minute and mean seconds per stage as the judge reports them
  (reference, reference_timing, record, record_ahead, start, load, check, timing, ...). Without
  one, a warm CPU judge (one judge serving every job, as the pipeline's slots reuse theirs) on a
  Python softmax candidate and the task's small case: the judge's own stages, no plan.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
SOFTMAX_SEED = ROOT / "problems" / "softmax" / "seeds" / "tunable"
CANDIDATES = BENCH / "candidates" / "softmax"
# A correct KernelBench-format softmax: what a CPU judge can run (native candidates need a GPU).
PYTHON_SOFTMAX = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        xf = x.float()
        e = (xf - xf.amax(dim=-1, keepdim=True)).exp()
        return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)
"""


def _ms(values: list[float]) -> str:
    if not values:
        return "n/a"
    spread = (
        f" (min {min(values) * 1e3:.2f}, max {max(values) * 1e3:.2f})" if len(values) > 1 else ""
    )
    return f"{statistics.median(values) * 1e3:.2f} ms median{spread}"


# ----------------------------------------------------------------------------- the library


def seed_library(work: Path) -> tuple[Path, str]:
    """(a library the recorder can load for the softmax seed, what it is)."""
    from hipevolve.verifier.build.backends import compiler_for, gpu_backend

    backend = gpu_backend()
    if backend is not None:
        from hipevolve.verifier.build.compile import build

        built = build((SOFTMAX_SEED / "kernel.hip").read_text(), compiler_for(backend), work)
        if built.ok and built.library is not None:
            return built.library, f"the seed's {backend} build"
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        raise SystemExit("no GPU build and no C compiler: the recorder has no library to load")
    (work / "empty.c").write_text("int hipevolve_nothing(void) { return 0; }\n")
    lib = work / "libempty.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(lib), str(work / "empty.c")], check=True)
    return lib, "a stand-in C library (no GPU build here)"


def record_job(library: Path):  # noqa: ANN201 (a RecordJob)
    """The softmax seed's record job for the task's largest case, as the judge would send it."""
    from hipevolve.core import reference
    from hipevolve.problems import get_task
    from hipevolve.verifier.gpu.job import CandidateJob, RecordJob
    from hipevolve.verifier.gpu.plan import input_specs

    task = get_task("softmax")
    module = reference.load_module(task.reference)
    case = max(task.cases, key=lambda c: _input_bytes(module, c))
    inputs = reference.build_inputs(module, case.inputs, "meta", 0)
    cand = CandidateJob(format="native", model=SOFTMAX_SEED / "model.py", library=library,
                        source=SOFTMAX_SEED / "kernel.hip")  # fmt: skip
    cases = {case.name: {"init": case.init, "inputs": input_specs(inputs)}}
    return RecordJob(reference=task.reference, candidate=cand, cases=cases), case


def _input_bytes(module, case) -> int:  # noqa: ANN001
    from hipevolve.core import reference

    inputs = reference.build_inputs(module, case.inputs, "meta", 0)
    return sum(t.numel() * t.element_size() for t in inputs if hasattr(t, "numel"))


# ----------------------------------------------------------------------------- the phases


def recorder_phase(reps: int, work: Path, library: Path) -> dict:
    from hipevolve.verifier.gpu.judge.record_ahead import Recorder
    from hipevolve.verifier.gpu.sandbox.zygote import Zygote

    job, _ = record_job(library)
    zygote = Zygote.start()
    forks, records, plan = [], [], None
    try:
        for i in range(reps + 1):  # the first warms the zygote (torch import, FakeTensorMode)
            t = time.perf_counter()
            rec = Recorder(str(work / f"record-{i}"), zygote)
            forked = time.perf_counter() - t
            rec.send(job)
            plan = rec.plan(limit_s=300.0)
            if i:
                forks.append(forked)
                records.append(rec.seconds_ahead())
    finally:
        zygote.close()
    return {"fork_s": forks, "record_s": records, "plan": plan}


def inputs_phase(calls: int, device: str, plan: dict | None) -> dict:
    import torch

    from hipevolve.core import reference
    from hipevolve.problems import get_task
    from hipevolve.verifier.gpu.plan import Plan
    from hipevolve.verifier.gpu.sandbox.executor import Executor, PlanModel
    from hipevolve.verifier.gpu.sandbox.input_pool import ShiftedInputs
    from hipevolve.verifier.gpu.sandbox.sandbox import CANARY, GUARD

    task = get_task("softmax")
    module = reference.load_module(task.reference)
    case = max(task.cases, key=lambda c: _input_bytes(module, c))
    sets = [reference.build_inputs(module, case.inputs, device, 1000 + i) for i in range(4)]
    tensors = [[t for t in s if isinstance(t, torch.Tensor)] for s in sets]
    owner = SimpleNamespace(torch=torch)  # guarded_clone uses the executor's torch only

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def per_call(step) -> list[float]:  # noqa: ANN001
        out = []
        for i in range(calls):
            sync()
            t = time.perf_counter()
            kept = step(i)
            sync()
            out.append(time.perf_counter() - t)
            del kept
        return out

    fresh = per_call(lambda i: [Executor.guarded_clone(owner, a)[0] for a in tensors[i % 4]])
    pool = ShiftedInputs(GUARD, CANARY)
    pooled = per_call(lambda i: [pool.place(j, a) for j, a in enumerate(tensors[i % 4])])
    prepared: list[float] = []
    if plan is not None:
        case_plan = next(iter(Plan.from_json(json.dumps(plan)).cases.values()))
        model = PlanModel(case_plan, {}, device)
        if [list(t.shape) for t in tensors[0]] == [s["shape"] for s in case_plan.inputs if s]:
            prepared = per_call(lambda i: model.prepare(*tensors[i % 4]))
    nbytes = sum(t.numel() * t.element_size() for t in tensors[0])
    return {"case": case.name, "input_bytes": nbytes, "device": device,
            "fresh_copy_s": fresh, "pooled_copy_s": pooled, "prepare_s": prepared}  # fmt: skip


def judge_phase(count: int, work: Path, backend: str) -> dict:
    from hipevolve.core.candidate import load_candidate
    from hipevolve.core.config import load_settings
    from hipevolve.problems import get_task
    from hipevolve.verifier.pipeline import evaluate_many

    manifest = json.loads((CANDIDATES / "manifest.json").read_text())
    chosen = [c for c in manifest["candidates"] if c["expect"] == "ok"][:count]
    candidates = [load_candidate(CANDIDATES / c["native"]) for c in chosen]
    settings = load_settings().verifier.model_copy(update={"cache_dir": work / "cache"})
    task = get_task("softmax")
    evaluate_many(candidates[:1], task, settings, backend)  # compiles and warms; not counted
    start = time.monotonic()
    evaluations = evaluate_many(candidates, task, settings, backend)
    wall = time.monotonic() - start
    stages: dict[str, list[float]] = {}
    for e in evaluations:
        for name, s in e.seconds.items():
            stages.setdefault(name, []).append(s)
    return {"evaluations": len(evaluations), "wall_s": wall,
            "statuses": [str(e.status) for e in evaluations],
            "stages": {n: statistics.mean(v) for n, v in stages.items()}}  # fmt: skip


def cpu_judge_phase(count: int, work: Path) -> dict:
    """`count` jobs through one warm CPU judge: mean seconds per stage as the judge reports them."""
    from hipevolve.problems import get_task
    from hipevolve.verifier.gpu.job import CandidateJob, CaseJob, Timeouts, WorkerJob
    from hipevolve.verifier.isolate import StandbyPool, run_worker

    model = work / "python_softmax.py"
    model.write_text(PYTHON_SOFTMAX)
    task = get_task("softmax")
    case = CaseJob(name="small", inputs={"rows": 64, "cols": 1024, "dtype": "float32"}, timed=True)
    job = WorkerJob(task=task.name, reference=task.reference,
                    tolerance=task.tolerance.model_dump(),
                    candidate=CandidateJob(format="kernelbench", model=model), device="cpu",
                    cases=(case,), seeds=(0, 1, 2), trials=10, warmup=2,
                    timeouts=Timeouts(startup=120, load=60, check=60, timing=60))  # fmt: skip
    stages: dict[str, list[float]] = {}
    statuses = []
    pool = StandbyPool(size=1, device="cpu")
    try:
        run_worker(job, pool.take(), pool=pool)  # the judge's start, not counted
        start = time.monotonic()
        for _ in range(count):
            result = run_worker(job, pool.take(), pool=pool)
            statuses.append(str(result.status))
            for name, s in result.seconds.items():
                stages.setdefault(name, []).append(s)
        wall = time.monotonic() - start
    finally:
        pool.close()
    return {"evaluations": count, "wall_s": wall, "statuses": statuses,
            "stages": {n: statistics.mean(v) for n, v in stages.items()}}  # fmt: skip


# ----------------------------------------------------------------------------- main


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Per-phase fixed costs of a native evaluation (issue 32).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--reps", type=int, default=10, help="recorders forked and timed")
    p.add_argument("--calls", type=int, default=100, help="timed calls' inputs made per way")
    p.add_argument("--judge-candidates", type=int, default=8,
                   help="softmax candidates through the pipeline (on a CPU: jobs through one "
                   "warm CPU judge; 0: skip)")  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="write the numbers as JSON here")
    args = p.parse_args(argv)
    if args.reps < 1 or args.calls < 1 or args.judge_candidates < 0:
        p.error("--reps and --calls: at least 1; --judge-candidates: at least 0")
    return args


def main() -> None:
    args = _parse_args()
    from hipevolve.verifier.build.backends import gpu_backend

    backend = gpu_backend()
    device = "cuda" if backend else "cpu"
    work = Path(tempfile.mkdtemp(prefix="hipevolve-overheads-"))
    report: dict = {"backend": backend or "none", "device": device}
    try:
        library, what = seed_library(work)
        print(f"recorder ({args.reps} forks from a warm zygote, softmax seed, {what}):")
        rec = recorder_phase(args.reps, work, library)
        print(f"  fork:                 {_ms(rec['fork_s'])}")
        print(f"  job sent -> plan:     {_ms(rec['record_s'])}")
        both = [f + r for f, r in zip(rec["fork_s"], rec["record_s"], strict=True)]
        print(f"  both, one after the other (the old critical path): {_ms(both)}")
        report["recorder"] = {k: v for k, v in rec.items() if k != "plan"}

        ins = inputs_phase(args.calls, device, rec["plan"])
        print(f"timed inputs ({args.calls} calls, case {ins['case']}, "
              f"{ins['input_bytes'] / 1e6:.1f} MB, {device}):")  # fmt: skip
        print(f"  fresh guarded copy:   {_ms(ins['fresh_copy_s'])}")
        print(f"  pooled shifted copy:  {_ms(ins['pooled_copy_s'])}")
        print(f"  plan buffers made:    {_ms(ins['prepare_s'])}")
        report["inputs"] = ins

        if args.judge_candidates == 0:
            print("judge: skipped (--judge-candidates 0)")
        else:
            if backend is None:
                judge = cpu_judge_phase(args.judge_candidates, work)
                what = "jobs, a Python softmax on a warm CPU judge (no GPU here)"
            else:
                judge = judge_phase(args.judge_candidates, work, backend)
                what = f"softmax candidates, warm cache, {backend}"
            rate = 60.0 * judge["evaluations"] / judge["wall_s"]
            print(f"judge ({judge['evaluations']} {what}): {rate:.1f} evaluations/min; "
                  f"statuses {sorted(set(judge['statuses']))}")  # fmt: skip
            for name, s in sorted(judge["stages"].items(), key=lambda kv: -kv[1]):
                print(f"  {name:<20} {s * 1e3:9.1f} ms mean")
            report["judge"] = judge
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
