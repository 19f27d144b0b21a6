"""One pipeline for every caller, cheapest stage first:

    screen (static checks) -> compile (cached, parallel) -> static AMD analysis -> GPU worker

`prepare` runs the CPU stages of one candidate and `run_prepared` its GPU stage in a warm judge.
`evaluate_many` compiles and analyses the candidates on all CPU cores and hands each to a free
worker slot (verifier/slots.py: one per visible GPU) as soon as it is compiled, so compiles
overlap evaluations, and warm standby judges make a fresh judge's start-up overlap the
evaluations before it. The Ray evaluator (verifier/ray.py) runs the same two stages
as Ray tasks and actors.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TypeVar

from hipevolve.core import cpu_share
from hipevolve.core.baseline import CaseBaseline, RunBaseline, RunBounds
from hipevolve.core.candidate import Candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import JUDGE_ERROR, Evaluation, Status
from hipevolve.core.hardware import H200, MI300X
from hipevolve.core.taskspec import Case, TaskSpec
from hipevolve.verifier.build.compile import (
    BuildResult,
    Compiler,
    build,
    cached_build,
    remove_stale_builds,
)
from hipevolve.verifier.build.rocm_limits import gate as amd_gate
from hipevolve.verifier.gpu.refusal import refused
from hipevolve.verifier.prepared import Prepared
from hipevolve.verifier.screen.screening import screen
from hipevolve.verifier.static_facts import StaticResult, from_the_build, static_analysis


def suspect_threshold(task: TaskSpec, settings: VerifierSettings) -> float:
    """Speedups above this are suspect: the task's own threshold, else the setting's."""
    return task.suspect_speedup or settings.suspect_speedup


def check_seeds(
    task: TaskSpec, settings: VerifierSettings, hidden: int | None = None
) -> tuple[int, ...]:
    """Public seeds 0..n-2, then one no agent ever sees: the run's `hidden` seed
    (RunBounds.hidden_seed), or one drawn fresh."""
    n = settings.check_seeds or task.check_seeds
    return (*range(n - 1), hidden if hidden is not None else hidden_seed())


def hidden_seed() -> int:
    """A check seed no agent can predict (os.urandom), never one of the public 0..n-2."""
    return random.SystemRandom().randrange(1 << 20, 1 << 31)


def _device(backend: str) -> str:
    """PyTorch's device name: ROCm builds also call GPUs "cuda"; "cpu" runs Python candidates."""
    return "cpu" if backend == "cpu" else "cuda"


def _peak(backend: str):
    from hipevolve.verifier.gpu.job import PeakRates

    gpu = MI300X if backend == "rocm" else H200
    return PeakRates(bytes_per_s=gpu.hbm_bytes_per_s, flops_per_s=gpu.bf16_flops_per_s)


R = TypeVar("R")
_TURN = threading.Lock()  # prepare's pure-Python part, one candidate at a time
_CPU_POOLS: dict[tuple[int | None, cpu_share.CpuShare], ThreadPoolExecutor] = {}
_CPU_POOLS_LOCK = threading.Lock()


def cpu_pool(workers: int | None, share: cpu_share.CpuShare | None = None) -> ThreadPoolExecutor:
    """The process's threads for the CPU stages, `workers` of them (None: as many as
    ThreadPoolExecutor picks), started once. A pool per batch started its threads as the batch
    began, each start waiting for the GIL that the first prepares held: on a 2-core machine
    that put 20 ms of a warm batch's 30 before its first GPU job.

    Its threads run with `share`'s CPU-work niceness and cores (default: the process's plan,
    cpu_share.current()), so the controller's Python does not take the judges' time."""
    share = cpu_share.current() if share is None else share
    with _CPU_POOLS_LOCK:
        if (workers, share) not in _CPU_POOLS:
            _CPU_POOLS[workers, share] = ThreadPoolExecutor(
                workers,
                thread_name_prefix="prepare",
                initializer=cpu_share.lower_this_thread,
                initargs=(share,),
            )
        return _CPU_POOLS[workers, share]


def prepare(
    candidate: Candidate, task: TaskSpec, settings: VerifierSettings, backend: str
) -> Prepared:
    """The CPU stages for one candidate, its one trip through them: static screen, compile
    (cached), its machine-code digest, AMD analysis, and any verdict they reach (`done`); what
    is left needs a GPU (run_prepared).

    The pure-Python part (the screen and the cache lookups) runs in one turn, one candidate at
    a time: several at once only interleave under the GIL and all finish late, holding back a
    batch's first GPU job. Compiles and analyses the cache lacks run after the turn, in
    subprocesses, in parallel."""
    from hipevolve.verifier.build import kernelbench

    built: BuildResult | None = None
    static: StaticResult | None = None
    compiler = None
    candidate, dropped = kernelbench.without_compiler_choice(candidate)
    with _TURN:
        checked = screen(candidate)
        native = checked.passed and candidate.format == "native" and backend != "cpu"
        if native and backend in ("cuda", "rocm"):
            from hipevolve.verifier.build.backends import compiler_for

            compiler = compiler_for(backend)
            built = cached_build(candidate.hip_source, compiler, settings.cache_dir)
        if native:
            static = static_analysis(
                candidate.hip_source, settings, cached_only=True, compiler=compiler
            )
    flags = (*checked.flags, *dropped)

    def finished(status: str, message: str, digest: str | None = None, **more) -> Prepared:
        done = Evaluation(
            status=status,
            task=task.name,
            backend=backend,
            message=message,
            flags=more.pop("flags", flags),
            **more,
        )
        return Prepared(candidate=candidate, flags=flags, done=done, digest=digest)

    if not checked.passed:
        return finished(*refused("screen", checked.message))
    if candidate.format != "native":
        if backend == "static":  # the device code of its load_inline sources, where there is
            return _kernelbench_static(candidate, settings, finished)
        if backend not in ("cpu", "cuda", "rocm"):
            raise ValueError(f"unknown backend {backend}")
        if backend == "cpu" and "load_inline" not in candidate.python_source:
            return Prepared(candidate=candidate, flags=flags)
        # An extension compiles libtorch's headers: a minute (65 s measured), not a kernel's 2 s.
        ext = kernelbench.build(
            candidate, backend, settings.cache_dir, timeout_s=max(settings.compile_timeout_s, 600.0)
        )
        if ext.hacked:
            return finished(
                *refused("extension_check", ext.hacked), flags=(*flags, kernelbench.LESS_ISOLATED)
            )
        if not ext.ok:
            return finished(
                Status.compile_error,
                "its load_inline extension does not build",
                compile_log=ext.log,
            )
        return Prepared(
            candidate=candidate, extensions=ext.folder, flags=(*flags, kernelbench.LESS_ISOLATED)
        )
    if backend == "cpu":
        raise ValueError("the cpu backend runs KernelBench-format Python candidates only")
    facts: Future[StaticResult | None] | None = None
    read_by_the_build = from_the_build(settings, compiler)  # the CUDA facts: the build's own
    if compiler is not None and built is None:
        if static is None and not read_by_the_build:  # the AMD analysis beside the build
            facts = _beside(static_analysis, candidate.hip_source, settings, compiler=compiler)
        built = build(
            candidate.hip_source,
            compiler,
            settings.cache_dir,
            timeout_s=settings.compile_timeout_s,
            max_object_bytes=settings.max_object_bytes,
        )
    digest = machine_digest(candidate, built, compiler) if compiler and built else None
    builds = built is None or built.ok
    if facts is not None and builds:
        static = facts.result()
    if static is None and read_by_the_build and built is not None and built.facts is not None:
        static = StaticResult(facts=built.facts)
    if static is None:  # the CUDA facts only of a source that builds (the AMD facts: cached)
        static = static_analysis(
            candidate.hip_source, settings, compiler=compiler if builds else None
        )
    if built is not None and built.hacked:
        return finished(*refused("library_check", built.hacked), static=static.facts)
    if built is not None and not built.ok:
        return finished(
            Status.compile_error, "does not compile", compile_log=built.log, static=static.facts
        )
    if static.error:
        return finished(
            Status.compile_error,
            "does not compile for AMD",
            digest,
            compile_log=static.error,
        )
    limits = amd_gate(candidate.hip_source, static.facts)
    if not limits.passed:
        why = "; ".join(limits.reasons)
        return finished(*refused("amd_limits", why), digest, static=static.facts)
    flags = (*flags, *limits.notes)
    if backend == "static":
        return finished(
            Status.compiled,
            "compiles; analysed for AMD, not run (no GPU)",
            static=static.facts,
            flags=(*flags, static.note) if static.note else flags,
        )
    return Prepared(
        candidate=candidate,
        library=built.library if built else None,
        static=static.facts,
        flags=flags,
        digest=digest,
    )


def _beside(work: Callable[..., R], *args, **kwargs) -> Future[R]:
    """work(*args, **kwargs) on a thread of its own, with the calling thread's CPU-work share:
    prepare's two compiles (the library, the AMD static facts) run side by side: in series they
    would put both before a generation's first GPU job. (The CUDA facts need no compile of
    their own: the cuda build reads them, cuda_static.build_facts.)"""
    share = cpu_share.current()
    done: Future[R] = Future()

    def run() -> None:
        cpu_share.lower_this_thread(share)
        done.set_running_or_notify_cancel()
        try:
            done.set_result(work(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 (re-raised by done.result())
            done.set_exception(e)

    threading.Thread(target=run, name="prepare-facts", daemon=True).start()
    return done


def machine_digest(candidate: Candidate, built: BuildResult, compiler: Compiler) -> str | None:
    """The digest of what a native candidate runs when `compiler` (the cuda or rocm backend's)
    built it as `built`: its library's device and host code, normalised
    (verifier/build/machine_code.py), and its model.py, normalised (comments, docstrings and
    spacing gone). None where there is none: another format, a failed build, code
    machine_code.py cannot read. prepare computes it, once, from the build it evaluates."""
    from hipevolve.core.candidate import normalize_python
    from hipevolve.verifier.build.machine_code import library_digest

    if candidate.format != "native" or not built.ok or built.library is None:
        return None
    device = library_digest(built.library, compiler.name)
    if device is None:
        return None
    model = hashlib.sha256(normalize_python(candidate.python_source).encode()).hexdigest()
    return f"{compiler.name}:{device}:{model}"


def _kernelbench_static(candidate: Candidate, settings: VerifierSettings, finished) -> Prepared:
    """The static backend's verdict on a KernelBench file: its device code compiled for AMD,
    or a compile error, or a clear 'nothing compiled' (never a silent `compiled`)."""
    from hipevolve.verifier.build.amd_static import find_toolchain
    from hipevolve.verifier.build.kernelbench import static_facts

    answer = static_facts(
        candidate,
        lambda source: static_analysis(source, settings),
        have_toolchain=find_toolchain() is not None,
    )
    if answer.error:
        return finished(
            Status.compile_error,
            "its device code does not compile for AMD",
            compile_log=answer.error,
        )
    if answer.nothing:
        return finished(Status.compile_error, f"KernelBench format: {answer.nothing}; not run")
    return finished(Status.compiled, answer.message, static=answer.facts)


def _kernels_only(prepared: Prepared, backend: str) -> bool:
    """Whether the screen's rule (the kernels do the work) holds on what a KernelBench file's
    plan and extension really ran. On a GPU backend, always. On the cpu backend a plain
    PyTorch forward is the backend's stand-in for a kernel (tests, CPU-only machines), so the
    rule holds only for a file that brings a load_inline extension."""
    if prepared.candidate.format != "kernelbench":
        return False
    return backend != "cpu" or prepared.extensions is not None


def run_prepared(
    prepared: Prepared,
    task: TaskSpec,
    settings: VerifierSettings,
    backend: str,
    judges,
    *,
    cases: tuple[Case, ...] | None = None,
    do_timing: bool = True,
    bounds: RunBounds | None = None,
    side_by_side: Callable[[dict[str, dict[str, CaseBaseline]]], None] | None = None,
) -> Evaluation:
    """The GPU stage: the candidate runs in a warm judge of `judges` (a StandbyPool), checked
    and timed; the judge goes back to the pool if it can serve again. A candidate found hacked
    on late timing windows alone (WorkerResult.window_only) runs once more, and that run is
    the evaluation, flagged "run again". A suspect one whose times the card can reach (faster
    than a baseline's margin, not than the roofline) is re-checked (`recheck`); the strong
    baselines its re-check timed, by name and case, go to `side_by_side`."""
    from hipevolve.core.candidate import write_candidate
    from hipevolve.verifier.gpu.job import CandidateJob
    from hipevolve.verifier.isolate import job_for_task, run_worker

    bounds = bounds or RunBounds()
    workdir = Path(tempfile.mkdtemp(prefix="hipevolve-eval-"))
    try:
        written = write_candidate(prepared.candidate, workdir / "candidate")
        if prepared.candidate.format == "native":
            job_candidate = CandidateJob(
                format="native",
                model=written / "model.py",
                library=prepared.library,
                source=written / "kernel.hip",
            )
        else:
            job_candidate = CandidateJob(
                format="kernelbench", model=written, library=prepared.extensions
            )
        # A case that sets module constants (a KernelBench file's reduced CPU case) is for CPU
        # checks: the judge and the sandbox build cases from init and inputs alone.
        cases = cases or tuple(c for c in task.cases if not c.globals)
        job = job_for_task(
            task,
            job_candidate,
            settings,
            device=_device(backend),
            cases=cases,
            seeds=check_seeds(task, settings, bounds.hidden_seed),
            do_timing=do_timing,
            peak=_peak(backend),
            suspect_speedup=suspect_threshold(task, settings),
            fastest=bounds.fastest,
            time_reference=bounds.time_reference,
            kernels_only=_kernels_only(prepared, backend),
        )
        worker = run_worker(job, judges.take(), pool=judges)
        flags: list[str] = []
        if worker.status is Status.hacked and worker.window_only:
            # Escaped work shows again in a fresh sandbox; a window some other process's
            # work on the GPU delayed does not. The second run is the evaluation.
            first = worker.message
            worker = run_worker(job, judges.take(), pool=judges)
            flags.append(f"run again: the first run was hacked: {first[:200]}")
        if JUDGE_ERROR in worker.flags:
            # The judge's own code failed (a harness file gone mid-run, say), not the
            # candidate's: one more run on a fresh judge is the evaluation.
            first = worker.message
            worker = run_worker(job, judges.take(), pool=judges)
            flags.append(f"run again: the first judge failed: {first[:200]}")
        if worker.status is Status.suspect and not worker.beyond_roofline:
            worker, note = recheck(job, worker, task, settings, judges)
            flags.append(note)
            timed = {name: a.cases() for name, a in worker.baselines.items() if a.trials}
            if side_by_side is not None and timed:
                side_by_side(timed)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return Evaluation(
        status=worker.status,
        task=task.name,
        backend=backend,
        cases=worker.case_results(),
        static=prepared.static,
        message=worker.message,
        mismatch=worker.mismatch,
        flags=(*prepared.flags, *worker.flags, *flags, *worker.hacks),
        seconds=worker.seconds,
    )


RECHECKED = "suspect, re-checked:"  # the flag an admitted suspect carries


def recheck(job, first, task: TaskSpec, settings: VerifierSettings, judges):
    """A suspect evaluation's re-check: the same candidate on a fresh hidden seed and fresh
    timing inputs, with the task's strong baselines timed right after it in the same judge
    (side by side, same clock and inputs), and no margin gate: (the re-check's result, one
    line for the evaluation's flags). It survives, and is admitted with that line, when it is
    correct and its times stay within what the card can do (the roofline still applies); it
    is not admitted when anything fails. Part of the evaluation it re-checks, as the window
    re-run is: it spends no unit of a run's budget."""
    from dataclasses import replace

    from hipevolve.verifier.isolate import baseline_jobs, run_worker

    others = baseline_jobs(task, settings)
    t = job.timeouts  # each baseline may import, compile (FLA's Triton kernels) and time
    again = replace(
        job,
        seeds=check_seeds(task, settings),
        cases=tuple(replace(c, fastest_us=None, fastest_why="") for c in job.cases),
        timing_seed=hidden_seed(),
        time_reference=False,
        side_by_side=bool(others),
        baselines=others,
        deadline_s=job.deadline() + len(others) * (t.load + t.check + t.timing),
    )
    worker = run_worker(again, judges.take(), pool=judges)
    side = _side_by_side(worker)
    if worker.status is Status.ok:
        return (
            worker,
            f"{RECHECKED} {first.message[:200]}; correct on a fresh hidden seed and "
            f"fresh inputs{side}",
        )
    return worker, f"re-check of a suspect ({first.message[:200]}): {worker.status.value}{side}"


def _side_by_side(worker) -> str:
    """'; side by side: 1.3x FlashQLA (...)' for the strong baselines a re-check timed."""
    from hipevolve.core.baseline import speedup_over

    parts = []
    for name, answer in worker.baselines.items():
        found = speedup_over(name, answer.cases(), worker.case_results())
        if found is not None:
            parts.append(found.describe())
        elif answer.unavailable:
            parts.append(f"{name} not timed ({answer.unavailable[:80]})")
    return f"; side by side: {', '.join(parts)}" if parts else ""


def time_baseline(
    task: TaskSpec,
    settings: VerifierSettings,
    backend: str,
    judges,
    *,
    trials: int,
    device: str,
    toolchain: str,
    strong: bool = True,
    target: float = 0.0,
    cases: tuple[str, ...] | None = None,
    baselines: tuple[str, ...] | None = None,
) -> RunBaseline | str:
    """The run's baseline (hipevolve/core/baseline.py): the reference alone in a judge of
    `judges`, at most `trials` trials on each timed case (fewer once its median is known to
    `target`: WorkerJob.trial_target), then, with `strong`, each strong baseline the task
    names, timed the same way (those that could not be, with one line why; without, they are
    `pending`); or one line saying why the reference could not be timed. `cases` and
    `baselines`: only the cases and strong baselines of these names (None: all)."""
    from dataclasses import replace

    from hipevolve.verifier.isolate import baseline_jobs, job_for_task, run_worker

    cases = tuple(c for c in task.cases if not c.globals and (cases is None or c.name in cases))
    others = tuple(
        b
        for b in (baseline_jobs(task, settings) if strong else ())
        if baselines is None or b.name in baselines
    )
    job = job_for_task(
        task,
        None,
        settings,
        device=_device(backend),
        cases=cases,
        seeds=check_seeds(task, settings)[:1],
        reference_only=True,
        baselines=others,
    )
    t = job.timeouts  # each baseline may import, compile (torch.compile, TileLang) and time
    job = replace(
        job,
        trials=trials,
        reference_trials=0,
        trial_target=target,
        deadline_s=job.deadline() + len(others) * (t.load + t.check + t.timing),
    )
    worker = run_worker(job, judges.take(), pool=judges)
    if worker.status is not Status.ok:
        return f"{worker.status.value}: {worker.message}"
    timed = {c.case: b for c in worker.cases if (b := c.reference_baseline()) is not None}
    if not timed:
        return "the task has no timed case"
    strong_times, unavailable, notes, held = {}, {}, {}, {}
    for b in others:
        answer = worker.baselines.get(b.name)
        if answer is not None:
            held[b.name] = round(answer.seconds, 1)
        if answer is None:
            unavailable[b.name] = "the judge did not answer for it"
        elif answer.unavailable or not answer.cases():
            unavailable[b.name] = answer.unavailable or "no timed case"
        else:
            strong_times[b.name] = answer.cases()
            if answer.flags:
                notes[b.name] = "; ".join(answer.flags)[:300]
    pending = () if strong else tuple(b.name for b in task.baselines)
    return RunBaseline(
        task=task.name,
        device=device,
        toolchain=toolchain,
        clocks=gpu_clocks(),
        cases=timed,
        others=strong_times,
        unavailable=unavailable,
        notes=notes,
        held_s=held,
        pending=pending,
    )


def gpu_clocks() -> str:
    """The GPU clocks the driver reports now (nvidia-smi or rocm-smi), or '' where neither
    answers: recorded with a baseline so a user can tell a throttled machine from a slow kernel."""
    import subprocess

    queries = (
        [
            "nvidia-smi",
            "--query-gpu=index,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw",
            "--format=csv,noheader",
        ],
        ["rocm-smi", "--showclocks", "--csv"],
    )
    for argv in queries:
        if shutil.which(argv[0]) is None:
            continue
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0 and done.stdout.strip():
            return " | ".join(line.strip() for line in done.stdout.splitlines() if line.strip())
    return ""


def evaluate_many(
    candidates: list[Candidate | Prepared],
    task: TaskSpec,
    settings: VerifierSettings,
    backend: str,
    *,
    cases: tuple[Case, ...] | None = None,
    do_timing: bool = True,
    slots=None,
    bounds: Callable[[], RunBounds] | None = None,
    side_by_side: Callable[[dict[str, dict[str, CaseBaseline]]], None] | None = None,
) -> list[Evaluation]:
    """Evaluations in the order of `candidates`. Each is prepared here (its CPU stages), unless
    it comes prepared already (`prepare`'s Prepared: what a run's evaluator made when it asked
    for the candidate's digest), and each left unfinished runs in a GPU slot.

    backend: cuda, rocm or static; cpu runs KernelBench-format Python candidates on the CPU (the
    verifier's own tests use it to exercise isolation and checks where no GPU exists).
    slots: the worker slots (verifier.slots.Slots) to run on; None: one slot per visible GPU,
    started for this call and closed after it.
    bounds: each evaluation's RunBounds, asked as it starts (a run's evaluator); None: none.
    side_by_side: told the strong baselines each re-check timed (run_prepared).
    """
    from hipevolve.verifier.slots import STANDBY_JUDGES, Slots, visible_gpus

    remove_stale_builds(settings.cache_dir)
    cpu_share.install(settings.cpu_policy())  # before the slots: they split the cores by it
    results: list[Evaluation | None] = [None] * len(candidates)
    owned = None
    if slots is None and backend != "static":
        # A judge takes seconds to start (torch import, two device contexts) and an evaluation
        # about as long: a few kept warm make the start-up overlap the evaluations before.
        owned = slots = Slots(
            backend, visible_gpus(backend), standby=max(1, min(STANDBY_JUDGES, len(candidates) - 1))
        )
    try:
        cpu = cpu_pool(settings.compile_jobs or None)
        stages = {_prepared(cpu, c, task, settings, backend): i for i, c in enumerate(candidates)}
        on_gpu = {}
        # Each candidate goes to a free slot as soon as it is compiled, while others compile.
        for stage in as_completed(stages):
            i, prepared = stages[stage], stage.result()
            if prepared.done is not None:
                results[i] = prepared.done
            else:
                on_gpu[i] = slots.submit(
                    lambda slot, p=prepared: run_prepared(
                        p,
                        task,
                        settings,
                        backend,
                        slot.judges,
                        cases=cases,
                        do_timing=do_timing,
                        bounds=bounds() if bounds else None,
                        side_by_side=side_by_side,
                    )
                )
        for i, running in on_gpu.items():
            results[i] = running.result()
    finally:
        if owned is not None:
            owned.close()
    return [r for r in results if r is not None]


def _prepared(
    cpu: ThreadPoolExecutor,
    candidate: Candidate | Prepared,
    task: TaskSpec,
    settings: VerifierSettings,
    backend: str,
) -> Future[Prepared]:
    """The candidate's CPU stages on `cpu`, or, for one that comes prepared, its Prepared."""
    if isinstance(candidate, Candidate):
        return cpu.submit(prepare, candidate, task, settings, backend)
    ready: Future[Prepared] = Future()
    ready.set_result(candidate)
    return ready


def evaluate(
    candidate: Candidate, task: TaskSpec, settings: VerifierSettings, backend: str, **options
) -> Evaluation:
    return evaluate_many([candidate], task, settings, backend, **options)[0]
