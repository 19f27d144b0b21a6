"""One pipeline for every caller, cheapest stage first:

    screen (static checks) -> compile (cached, parallel) -> static AMD analysis -> GPU worker

`evaluate_many` compiles and analyses every candidate on all CPU cores first, then runs the GPU
workers one after another with a warm standby judge, so a fresh worker's start-up overlaps the
previous evaluation.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel

from hipevolve.config import VerifierSettings
from hipevolve.hardware import H200, MI300X
from hipevolve.taskspec import Case, TaskSpec
from hipevolve.verifier.build import BuildResult, build_many, cache_key, trim_log
from hipevolve.verifier.candidate import Candidate
from hipevolve.verifier.evaluation import Evaluation, StaticFacts, Status
from hipevolve.verifier.static_checks import screen


class StaticResult(BaseModel):
    facts: tuple[StaticFacts, ...] = ()
    error: str = ""  # trimmed compiler log when the source does not compile for a target
    note: str = ""  # the analysis itself failed (a tool, not the candidate)


STANDBY_JUDGES = 3  # judges kept warm while a batch is evaluated


def suspect_threshold(task: TaskSpec, settings: VerifierSettings) -> float:
    """Speedups above this are suspect: the task's own threshold, else the setting's."""
    return task.suspect_speedup or settings.suspect_speedup


def check_seeds(task: TaskSpec, settings: VerifierSettings) -> tuple[int, ...]:
    """Public seeds 0..n-2, then one drawn fresh per evaluation that no agent ever sees."""
    n = settings.check_seeds or task.check_seeds
    return (*range(n - 1), random.SystemRandom().randrange(1 << 20, 1 << 31))


def static_analysis(source: str, settings: VerifierSettings) -> StaticResult:
    """gfx facts for every configured target, cached by source, target and toolchain."""
    from hipevolve.verifier.amd_static import AmdCompileError, analyze, find_toolchain

    tc = find_toolchain()
    if tc is None:
        return StaticResult()
    facts: list[StaticFacts] = []
    for target in settings.amd_targets:
        if target not in tc.targets:
            continue
        key = cache_key(source, (target,), tc.version)
        cached = settings.cache_dir / "static" / f"{key}.json"
        if cached.exists():
            facts += [StaticFacts.model_validate(f) for f in json.loads(cached.read_text())]
            continue
        workdir = Path(tempfile.mkdtemp(prefix="amd-"))
        try:
            found = analyze(source, target, workdir, timeout_s=settings.compile_timeout_s,
                            toolchain=tc)
        except AmdCompileError as e:
            return StaticResult(error=f"{target}: " + trim_log(e.log, workdir))
        except RuntimeError as e:  # our disassembler failed: no facts, but not the candidate's fault
            return StaticResult(facts=tuple(facts), note=f"static analysis incomplete: {e}")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        cached.parent.mkdir(parents=True, exist_ok=True)
        # a temp name of its own: two threads may analyse the same source at once
        fd, tmp = tempfile.mkstemp(dir=cached.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps([fact.model_dump() for fact in found]))
        os.replace(tmp, cached)
        facts += found
    return StaticResult(facts=tuple(facts))


def _device(backend: str) -> str:
    """PyTorch's device name: ROCm builds also call GPUs "cuda"; "cpu" runs Python candidates."""
    return "cpu" if backend == "cpu" else "cuda"


def _peak(backend: str):
    from hipevolve.verifier.isolate import PeakRates

    gpu = MI300X if backend == "rocm" else H200
    return PeakRates(bytes_per_s=gpu.hbm_bytes_per_s, flops_per_s=gpu.bf16_flops_per_s)


def _run_on_gpu(candidate: Candidate, library: Path | None, task: TaskSpec, cases, backend: str,
                settings: VerifierSettings, do_timing: bool, standby, workdir: Path):
    from hipevolve.verifier.candidate import write_candidate
    from hipevolve.verifier.isolate import CandidateJob, Timeouts, WorkerJob, run_worker

    written = write_candidate(candidate, workdir / "candidate")
    if candidate.format == "native":
        job_candidate = CandidateJob(format="native", model=written / "model.py",
                                     library=library, source=written / "kernel.hip")
    else:
        job_candidate = CandidateJob(format="kernelbench", model=written)
    job = WorkerJob.for_task(
        task, job_candidate, device=_device(backend), cases=cases, seeds=check_seeds(task, settings),
        do_timing=do_timing, trials=settings.trials, warmup=settings.warmup,
        timeouts=Timeouts(load=settings.load_timeout_s, check=settings.check_timeout_s,
                          timing=settings.timing_timeout_s),
        peak=_peak(backend), suspect_speedup=suspect_threshold(task, settings))
    return run_worker(job, standby)


def evaluate_many(candidates: list[Candidate], task: TaskSpec, settings: VerifierSettings,
                  backend: str, *, cases: tuple[Case, ...] | None = None,
                  do_timing: bool = True) -> list[Evaluation]:
    """Evaluations in the order of `candidates`.

    backend: cuda, rocm or static; cpu runs KernelBench-format Python candidates on the CPU (the
    verifier's own tests use it to exercise isolation and checks where no GPU exists).
    """
    results: list[Evaluation | None] = [None] * len(candidates)
    screens = [screen(c) for c in candidates]
    for i, s in enumerate(screens):
        if not s.passed:
            results[i] = Evaluation(status=Status.rejected, task=task.name, backend=backend,
                                    message=s.message, flags=s.flags)
    native = [i for i, c in enumerate(candidates) if results[i] is None and c.format == "native"]
    builds: dict[int, BuildResult] = {}
    if backend in ("cuda", "rocm") and native:
        from hipevolve.verifier.backends import compiler_for

        built = build_many([candidates[i].hip_source for i in native], compiler_for(backend),
                           settings.cache_dir, jobs=settings.compile_jobs,
                           timeout_s=settings.compile_timeout_s,
                           max_object_bytes=settings.max_object_bytes)
        builds = dict(zip(native, built, strict=True))
    with ThreadPoolExecutor(max_workers=settings.compile_jobs or None) as pool:
        statics = dict(zip(native, pool.map(
            lambda i: static_analysis(candidates[i].hip_source, settings), native), strict=True))
    for i in native:
        flags = screens[i].flags
        if i in builds and not builds[i].ok:
            results[i] = Evaluation(status=Status.compile_error, task=task.name, backend=backend,
                                    message="does not compile", compile_log=builds[i].log,
                                    flags=flags, static=statics[i].facts)
        elif statics[i].error:
            results[i] = Evaluation(status=Status.compile_error, task=task.name, backend=backend,
                                    message="does not compile for AMD",
                                    compile_log=statics[i].error, flags=flags)
        elif backend == "static":
            results[i] = Evaluation(status=Status.compiled, task=task.name, backend=backend,
                                    message="compiles; analysed for AMD, not run (no GPU)",
                                    static=statics[i].facts,
                                    flags=(*flags, statics[i].note) if statics[i].note else flags)
    pending = [i for i in range(len(candidates)) if results[i] is None]
    if pending and backend == "static":
        for i in pending:  # a KernelBench candidate has no HIP source to analyse statically
            results[i] = Evaluation(status=Status.compiled, task=task.name, backend=backend,
                                    message="KernelBench format: no static AMD analysis; not run")
        pending = []
    if pending:
        from hipevolve.verifier.isolate import StandbyPool

        if backend == "cpu" and any(candidates[i].format == "native" for i in pending):
            raise ValueError("the cpu backend runs KernelBench-format Python candidates only")
        # A judge takes seconds to start (torch import, two device contexts) and an evaluation
        # about as long: a few kept warm make the start-up overlap the evaluations before.
        warm = max(1, min(STANDBY_JUDGES, len(pending) - 1))
        with StandbyPool(size=warm, device=_device(backend)) as standby:
            for i in pending:
                workdir = Path(tempfile.mkdtemp(prefix="hipevolve-eval-"))
                try:
                    worker = _run_on_gpu(candidates[i], builds[i].library if i in builds else None,
                                         task, cases, backend, settings, do_timing, standby.take(),
                                         workdir)
                finally:
                    shutil.rmtree(workdir, ignore_errors=True)
                results[i] = Evaluation(
                    status=worker.status, task=task.name, backend=backend,
                    cases=worker.case_results(), static=statics.get(i, StaticResult()).facts,
                    message=worker.message, mismatch=worker.mismatch,
                    flags=(*screens[i].flags, *worker.flags, *worker.hacks),
                    seconds=worker.seconds)
    return [r for r in results if r is not None]


def evaluate(candidate: Candidate, task: TaskSpec, settings: VerifierSettings, backend: str,
             **options) -> Evaluation:
    return evaluate_many([candidate], task, settings, backend, **options)[0]
