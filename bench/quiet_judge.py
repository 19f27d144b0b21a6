"""Does CPU work disturb the judge's timing? Idle host against a full compile load, quiet judge on/off.

    python bench/quiet_judge.py                                # GPU: softmax and gated_delta_net
    python bench/quiet_judge.py --rounds 1 --tasks softmax     # smoke run, about a minute
    python bench/quiet_judge.py --cpu --rounds 2               # no GPU: everything on the CPU

Issue 33: the gated_delta_net reference, a host-bound PyTorch loop, swung 1.8x within one run while
compiles ran beside it. For each round, and for each policy (verifier.quiet_judge on, then off),
each task's seed kernel is evaluated by a fresh judge through the verifier's GPU stage
(pipeline.prepare once, then pipeline.run_prepared on new worker slots, so the judge starts on
its slot's cores) twice: on an idle host, and while a full compile load runs. The load is
--load-jobs threads each compiling the softmax seed again and again (a new comment each time, so
the cache never answers) through the build stage, which starts every compile under the policy:
niced and off the judge's cores when on, as before when off. The judge times the task's
reference and the seed kernel in the same evaluation.

Prints, per task and case, the median over rounds of the reference's and the seed's time for
each phase, and loaded/idle for each policy side by side (each policy against its own idle
phase, since pinning the judge changes the idle time too). Goal: within 1.05 with the policy on.

--cpu: no GPU needed. The candidate is the task's reference itself (its Model as ModelNew), the
cases are the task's small ones, timed on the CPU, and the load compiles with nvcc for sm_90
(it compiles here without a GPU). The judges' reference therefore runs on the CPU: the worst
case for CPU contention, and a way to try the bench on a laptop.
Rounds stop early when the next would not finish within --deadline-s.
"""

from __future__ import annotations

import argparse
import ast
import itertools
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from hipevolve.core import cpu_share
from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import Evaluation, Status
from hipevolve.core.taskspec import Case, TaskSpec
from hipevolve.problems import get_task
from hipevolve.verifier.build.compile import Compiler, build
from hipevolve.verifier.pipeline import Prepared, prepare, run_prepared
from hipevolve.verifier.slots import Slots, visible_gpus

# The cases that swung in issue 33, and a large softmax whose time is all GPU.
DEFAULT_CASES = {"gated_delta_net": ("qwen_tp1_short",), "softmax": ("lm_head_vocab",)}
LOAD_SEED = Path(__file__).resolve().parents[1] / "problems" / "softmax" / "seeds" / "tunable"
PHASES = ("idle", "loaded")
POLICIES = ("on", "off")


class CompileLoad:
    """`jobs` threads compiling one source again and again through the build stage."""

    def __init__(self, source: str, compiler: Compiler, cache_dir: Path, jobs: int) -> None:
        self.source, self.compiler, self.cache_dir, self.jobs = source, compiler, cache_dir, jobs
        self.started = self.done = 0
        self.failed = ""
        self._stop = threading.Event()
        self._count = itertools.count()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def _loop(self) -> None:
        cpu_share.lower_this_thread(cpu_share.current())  # as the pipeline's CPU-stage threads
        while not self._stop.is_set():
            with self._lock:
                self.started += 1
            salt = next(self._count)
            result = build(f"{self.source}\n// load {os.getpid()} {salt}\n", self.compiler,
                           self.cache_dir)  # fmt: skip
            with self._lock:
                self.done += 1
                if not result.ok and not self.failed:
                    self.failed = result.log[:300] or "compile failed"

    def __enter__(self) -> CompileLoad:
        self._stop.clear()
        self.started = self.done = 0
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(self.jobs)]
        for t in self._threads:
            t.start()
        while self.started < self.jobs:  # every thread has a compile running
            time.sleep(0.05)
        time.sleep(1.0)  # past the compilers' start-up
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
        shutil.rmtree(self.cache_dir / "lib", ignore_errors=True)


@dataclass
class Times:
    """Per (task, case, policy, phase): the reference's and the candidate's medians, per round."""

    ref: dict[tuple, list[float]] = field(default_factory=dict)
    cand: dict[tuple, list[float]] = field(default_factory=dict)
    compiles: dict[str, int] = field(default_factory=dict)

    def add(self, task: str, policy: str, phase: str, evaluation: Evaluation) -> None:
        for c in evaluation.cases:
            key = (task, c.case, policy, phase)
            if c.ref_time_us:
                self.ref.setdefault(key, []).append(c.ref_time_us)
            if c.time_us:
                self.cand.setdefault(key, []).append(c.time_us)


def reference_as_candidate(task: TaskSpec) -> Candidate:
    """The task's reference module with Model renamed ModelNew and its input builders dropped."""
    tree = ast.parse(task.reference.read_text())
    tree.body = [n for n in tree.body
                 if not (isinstance(n, ast.FunctionDef) and n.name.startswith("get_"))]  # fmt: skip
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Model":
            node.name = "ModelNew"
    return Candidate(format="kernelbench", hip_source=None, python_source=ast.unparse(tree),
                     name=f"{task.name}_reference")  # fmt: skip


def cases_of(task: TaskSpec, names: tuple[str, ...], cpu: bool) -> tuple[Case, ...]:
    if cpu:  # the small cases, timed: the large ones take minutes on a CPU
        return tuple(c.model_copy(update={"timed": True}) for c in task.cases if c.small)
    wanted = names or DEFAULT_CASES.get(task.name) or tuple(c.name for c in task.timed_cases)
    found = tuple(c for c in task.cases if c.name in wanted)
    if len(found) != len(wanted):
        known = ", ".join(c.name for c in task.cases)
        raise UserError(f"{task.name} has no case among {', '.join(wanted)}", f"pick from {known}")
    return found


def load_compiler(backend: str) -> Compiler:
    """The compiler of the load: the backend's own; on the CPU, nvcc for sm_90."""
    if backend != "cpu":
        from hipevolve.verifier.build.backends import compiler_for

        return compiler_for(backend)
    from hipevolve.verifier.build.nvidia import find_nvcc, nvcc_command

    nvcc = find_nvcc()
    if nvcc is None:
        raise UserError("--cpu compiles its load with nvcc, which is not here",
                        "install the CUDA toolkit (it compiles without a GPU)")  # fmt: skip
    argv = nvcc_command(nvcc, Path("kernel.hip"), Path("lib.so"), arch="sm_90")
    return Compiler(name="cuda", argv=tuple(argv), toolchain="nvcc sm_90 (load)")


def judged(prepared: Prepared, task: TaskSpec, cases: tuple[Case, ...],
           settings: VerifierSettings, backend: str) -> Evaluation:  # fmt: skip
    """One evaluation by a fresh judge on a new slot (the first GPU), under settings' policy."""
    devices = visible_gpus(backend)[:1]
    with Slots(backend, devices, standby=0) as slots:  # no standby judge starting beside it
        return run_prepared(prepared, task, settings, backend, slots.slots[0].judges, cases=cases)


def prepared_for(task: TaskSpec, settings: VerifierSettings, backend: str) -> Prepared:
    if backend == "cpu":
        return Prepared(candidate=reference_as_candidate(task))
    seed = load_candidate(task.seeds[0])
    prepared = prepare(seed, task, settings, backend)
    if prepared.done is not None:
        raise UserError(f"{task.name}'s seed: {prepared.done.status.value}: "
                        f"{prepared.done.message}", "run `evolve verify` on it")  # fmt: skip
    return prepared


def one_round(work: list, times: Times, settings: dict[str, VerifierSettings], backend: str,
              load: dict[str, CompileLoad]) -> None:  # fmt: skip
    for policy in POLICIES:
        cpu_share.install(settings[policy].cpu_policy())
        cpu_share.claim(1)  # the load's compiles keep off the judge's cores from the start
        for phase in PHASES:
            for task, prepared, cases in work:
                if phase == "idle":
                    evaluation = judged(prepared, task, cases, settings[policy], backend)
                else:
                    with load[policy] as running:
                        evaluation = judged(prepared, task, cases, settings[policy], backend)
                    times.compiles[policy] = times.compiles.get(policy, 0) + running.done
                if evaluation.status is not Status.ok:
                    print(f"  {task.name} {policy}/{phase}: {evaluation.status.value}: "
                          f"{evaluation.message[:200]}", file=sys.stderr)  # fmt: skip
                times.add(task.name, policy, phase, evaluation)


def _median(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def report(times: Times, work: list) -> float:
    """Prints the table; returns the worst mismatch of loaded and idle timing with the policy on,
    either way (loaded/idle or idle/loaded, whichever is larger: a loaded host that times faster
    does not match either)."""
    head = (f"{'task':16} {'case':20} {'what':9} {'idle on':>10} {'loaded on':>10} "
            f"{'ratio on':>9} | {'idle off':>10} {'loaded off':>10} {'ratio off':>9}")  # fmt: skip
    print(head)
    worst = 0.0
    for task, _, cases in work:
        for case in cases:
            for label, table in (("reference", times.ref), ("seed", times.cand)):
                cells, ratios = [], []
                for policy in POLICIES:
                    idle = _median(table.get((task.name, case.name, policy, "idle")))
                    loaded = _median(table.get((task.name, case.name, policy, "loaded")))
                    ratio = loaded / idle if idle and loaded else None
                    ratios.append(ratio)
                    cells.append(f"{_us(idle):>10} {_us(loaded):>10} "
                                 f"{f'{ratio:.3f}' if ratio else '-':>9}")  # fmt: skip
                if ratios[0]:
                    worst = max(worst, ratios[0], 1 / ratios[0])
                print(f"{task.name:16} {case.name:20} {label:9} {cells[0]} | {cells[1]}")
    return worst


def _us(value: float | None) -> str:
    return f"{value:.1f}" if value else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_argument_group("what to time")
    what.add_argument(
        "--tasks",
        default="gated_delta_net,softmax",
        help="comma-separated tasks (gated_delta_net,softmax)",
    )
    what.add_argument(
        "--cases",
        default="",
        help="comma-separated case names (default: per task, "
        "gated_delta_net qwen_tp1_short, softmax lm_head_vocab)",
    )
    what.add_argument(
        "--cpu",
        action="store_true",
        help="no GPU: the reference as candidate, small cases, on the CPU",
    )
    how = parser.add_argument_group("how")
    how.add_argument(
        "--rounds", type=int, default=3, help="evaluations per task, policy, phase (3)"
    )
    how.add_argument("--trials", type=int, default=30, help="timed trials per case (30)")
    how.add_argument(
        "--load-jobs",
        type=int,
        default=0,
        help="parallel compiles of the load (0: one per core of this process)",
    )
    how.add_argument(
        "--deadline-s",
        type=float,
        default=270.0,
        help="start no round that would end after this many seconds (270)",
    )
    args = parser.parse_args()
    try:
        return run(args)
    except UserError as e:
        print(f"error: {e.line()}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    start = time.monotonic()
    backend = "cpu"
    if not args.cpu:
        from hipevolve.verifier.build.backends import resolve_backend

        backend = resolve_backend("auto")
        if backend not in ("cuda", "rocm"):
            raise UserError("no GPU here for the judge to time on", "run with --cpu to try it")
    root = Path(tempfile.mkdtemp(prefix="quiet-judge-"))
    try:
        base = VerifierSettings(cache_dir=root / "cache", trials=args.trials)
        settings = {"on": base, "off": base.model_copy(update={"quiet_judge": False})}
        names = tuple(n for n in args.cases.split(",") if n)
        work = []
        for name in (t for t in args.tasks.split(",") if t):
            task = get_task(name)
            work.append((task, prepared_for(task, base, backend), cases_of(task, names, args.cpu)))
        jobs = args.load_jobs or len(os.sched_getaffinity(0))
        compiler = load_compiler(backend)
        source = (LOAD_SEED / "kernel.hip").read_text()
        load = {p: CompileLoad(source, compiler, root / f"load-{p}", jobs) for p in POLICIES}
        print(f"quiet judge on:  {cpu_share.plan(base.cpu_policy(), 1).describe()}")
        print(f"quiet judge off: {cpu_share.OFF.describe()}")
        print(f"load: {jobs} parallel {compiler.name} compiles of the softmax seed; "
              f"backend {backend}; {args.trials} trials")  # fmt: skip
        times, rounds, slowest = Times(), 0, 0.0
        while rounds < args.rounds:
            began = time.monotonic()
            if rounds and began + slowest - start > args.deadline_s:
                print(f"stopping after {rounds} rounds: another would pass --deadline-s")
                break
            one_round(work, times, settings, backend, load)
            rounds += 1
            slowest = max(slowest, time.monotonic() - began)
            print(f"round {rounds}/{args.rounds} done in {time.monotonic() - began:.0f} s",
                  file=sys.stderr)  # fmt: skip
        failed = next((lo.failed for lo in load.values() if lo.failed), "")
        if failed:
            print(f"warning: a load compile failed: {failed}", file=sys.stderr)
        rate = ", ".join(f"{p} {times.compiles.get(p, 0)}" for p in POLICIES)
        print(
            f"{rounds} rounds in {time.monotonic() - start:.0f} s; load compiles finished: {rate}"
        )
        worst = report(times, work)
        print(
            f"worst mismatch of loaded and idle timing with the quiet judge on: {worst:.3f}x "
            "(goal: at most 1.05x either way)"
        )
        return 0
    finally:
        cpu_share.install(cpu_share.CpuPolicy())
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
