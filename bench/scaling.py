"""Scaling over the GPUs of one machine: the same candidates on 1 GPU and on 2, in one run.

    python bench/scaling.py                                # 32 softmax configurations
    python bench/scaling.py --candidates 8 --gpus 1 2      # smoke run
    python bench/scaling.py --ray --out scaling.json       # also Ray workers, and JSON
    python bench/scaling.py --task gated_delta_net --candidates 12 --no-cold
    python bench/scaling.py --candidates 48 --no-cold --rounds 3   # 1, 2, 1, 2, 1, 2 GPUs

The candidates are the first --candidates configurations of the task's tunable seed, in a fixed
shuffled order (seed 0), repeated when the grid is smaller (gated_delta_net has 3). Each phase
evaluates all of them through the production path
(hipevolve.verifier.pipeline.evaluate_many on persistent worker slots, one per GPU, as
`evolve` does), in batches of --batch (default 4: one generation of the default 4 islands),
--window of them at once (default 2: `evolve` plans each generation from the islands one
generation back, so a generation evaluates while the one before finishes; 1: each batch waits
for the last, as every run did before), and reports evaluations per minute over the phase's
wall time:

- warm: the compile cache already holds every candidate (compiled once, untimed, before the
  first phase), so a phase measures the GPU stage and its judges: the part more GPUs add;
- cold: each phase starts from an empty compile cache, so compiles (on the CPU cores, while
  other candidates run) are in the time, as in a search where every child is new.

Before a local phase is timed, every judge of every slot serves one untimed job (warm_up):
a judge's first job costs more than its later ones, a run's judges serve 64 jobs each, and a
short phase timed from cold slots holds twice as many first jobs on two GPUs as on one.
--no-warmup times from cold slots, as the bench did before. Ray phases are still timed from
cold workers: their slots live inside the actors.

With --ray the warm phase also runs on Ray GPU workers on this machine (`evolve --ray auto`).
Every phase must give the same statuses; the ratios are to the 1-GPU phase of the same kind.
With --rounds N the warm local phases run N times, alternating, and the goal line pools them:
all evaluations over all wall time for each GPU count (on an H200 x2 one round's ratio moved
between 1.48x and 1.94x within one call, mostly with the 1-GPU figure). Goal: at least 1.8x
from 1 to 2 GPUs.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, Field

from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.core.config import VerifierSettings, load_settings
from hipevolve.core.evaluation import Evaluation
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.offline.tunables import configurations, parse_tunables, with_values
from hipevolve.problems import get_task
from hipevolve.verifier.slots import Slots

GOAL = 1.8


class Spans(BaseModel):
    """Where a phase's slot time went (seconds, summed over slots and batches)."""

    busy: float = Field(description="slots evaluating (controller side, judge included)")
    judged: float = Field(description="of that, inside the judges (their 'total')")
    before_first: float = Field(description="slots idle from a batch's start to their first job")
    between: float = Field(description="slots idle between two jobs of one batch")
    after_last: float = Field(description="slots idle from their last job to the batch's end")


class Phase(BaseModel):
    label: str
    gpus: int
    cache: str  # warm or cold
    round: int = Field(default=0, description="which round of --rounds (warm local phases)")
    evaluations: int
    wall_s: float
    statuses: list[str]
    standby: int = Field(description="warm judges per worker slot")
    stages: dict[str, float] = Field(description="mean seconds per evaluation stage (judges')")
    odd: list[str] = Field(default=[], description="status and message of each evaluation not ok")
    spans: Spans | None = None
    warmup_jobs: int = Field(default=0, description="untimed jobs before the phase (warm_up)")
    warmup_total_s: float | None = Field(
        default=None, description="their mean seconds in the judge ('total')"
    )

    @property
    def per_minute(self) -> float:
        return 60.0 * self.evaluations / self.wall_s


def save_phases(path: Path, phases: list[Phase]) -> None:
    """The phases so far as JSON (with each one's per_minute), written after every phase so
    that a run cut short by a time limit keeps what it measured."""
    path.write_text(json.dumps([p.model_dump() | {"per_minute": p.per_minute} for p in phases],
                               indent=1))  # fmt: skip


def load_phases(path: Path) -> list[Phase]:
    return [Phase(**{k: v for k, v in p.items() if k != "per_minute"})
            for p in json.loads(path.read_text())]  # fmt: skip


def pooled_ratio(phases: list[Phase], cache: str, lo: int, hi: int) -> tuple[float, list[float]]:
    """Local phases of one cache kind on `hi` GPUs against `lo`: evaluations per minute over
    every round pooled (all evaluations over all wall time), and each round's own ratio."""

    def rate(ps: list[Phase]) -> float:
        return sum(p.evaluations for p in ps) / sum(p.wall_s for p in ps)

    local = [p for p in phases if p.cache == cache and p.label.startswith("local")]
    low, high = [p for p in local if p.gpus == lo], [p for p in local if p.gpus == hi]
    rounds = sorted({p.round for p in low} & {p.round for p in high})
    if not rounds:
        return 0.0, []
    each = [rate([p for p in high if p.round == r]) / rate([p for p in low if p.round == r])
            for r in rounds]  # fmt: skip
    return rate(high) / rate(low), each


def candidates_for(task: TaskSpec, n: int) -> list[Candidate]:
    """n configurations of the task's tunable seed, shuffled; a grid smaller than n repeats
    (every evaluation is a whole one: only the compile is shared)."""
    seed = load_candidate(task.seeds[0])
    space = list(configurations(parse_tunables(seed.hip_source or "")))
    random.Random(0).shuffle(space)
    space *= -(-n // len(space))
    return [seed.model_copy(update={"hip_source": with_values(seed.hip_source or "", config)})
            for config in space[:n]]  # fmt: skip


def in_batches(evaluate, candidates: list[Candidate], batch: int,
               windows: list[tuple[float, float]] | None = None,
               window: int = 1) -> list[Evaluation]:  # fmt: skip
    """All evaluations, in batches, at most `window` of them evaluating at once: batch k starts
    once batch k - window is in, as `evolve` starts generation g once generation g - 1 - lag is
    (window = lag + 1). `windows` collects each batch's (start, end); with window > 1, where
    batches overlap, the whole run's."""
    first = time.monotonic()
    flight: deque[tuple[float, Future[list[Evaluation]]]] = deque()
    results: list[Evaluation] = []

    def land() -> None:
        began, running = flight.popleft()
        results.extend(running.result())
        if windows is not None and window == 1:
            windows.append((began, time.monotonic()))

    with ThreadPoolExecutor(max_workers=window) as pool:
        for start in range(0, len(candidates), batch):
            if len(flight) == window:
                land()
            flight.append(
                (time.monotonic(), pool.submit(evaluate, candidates[start : start + batch]))
            )
        while flight:
            land()
    if windows is not None and window > 1:
        windows.append((first, time.monotonic()))
    return results


class TimedSlots(Slots):
    """Slots that record (device, start, end) of every job they run, for slot_spans."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.spans: list[tuple[str, float, float]] = []

    def submit(self, evaluate):  # noqa: ANN001, ANN201
        def timed(slot):  # noqa: ANN001, ANN202
            began = time.monotonic()
            try:
                return evaluate(slot)
            finally:
                self.spans.append((slot.device, began, time.monotonic()))

        return super().submit(timed)


def slot_spans(spans: list[tuple[str, float, float]], windows: list[tuple[float, float]],
               devices: tuple[str, ...], judged: float) -> Spans:  # fmt: skip
    """Each slot's time in each batch window: busy, or idle before its first job, between
    jobs, or after its last (the batch waits for its slowest slot)."""
    before = between = after = 0.0
    for b0, b1 in windows:
        for device in devices:
            mine = sorted((a, z) for d, a, z in spans if d == device and b0 <= a < b1)
            if not mine:
                before += b1 - b0
                continue
            before += mine[0][0] - b0
            between += sum(a - z for (_, z), (a, _) in zip(mine, mine[1:], strict=False))
            after += b1 - mine[-1][1]
    busy = sum(z - a for _, a, z in spans)
    return Spans(busy=busy, judged=judged, before_first=before, between=between, after_last=after)


def warm_up(slots: TimedSlots, evaluate, candidates: list, standby: int) -> list[Evaluation]:
    """Untimed jobs until every slot has run standby + 1 of them; their spans are dropped.

    A slot takes its warm judges in turn, and taking one starts another, so it turns through
    standby + 1 judges, and a judge's first job does what its later ones skip: it builds every
    seed's reference (later jobs of the task add the new hidden seed alone, references.py) and
    makes its context's first launches and allocations. A run's judges serve 64 jobs each
    (worker.JOBS_PER_JUDGE), so a first job is 1 in 64 at any GPU count; timed from cold
    slots, a 48-evaluation phase holds 4 of them on one GPU and 8 on two. With the judges
    past their first job, a phase times the steady state, as a run spends it."""
    need, results = standby + 1, []
    while min(slots.served[d] for d in slots.devices) < need:
        if len(results) >= 4 * need * len(slots.devices):
            raise RuntimeError(f"warm-up: slots served {dict(slots.served)} after "
                               f"{len(results)} jobs, {need} each expected")  # fmt: skip
        start = len(results)
        batch = [candidates[(start + i) % len(candidates)] for i in range(len(slots.devices))]
        results += evaluate(batch)
    slots.spans.clear()
    return results


def not_ok(results: list[Evaluation]) -> list[str]:
    return [f"{r.status.value}: {r.message}" for r in results if not r.ok]


def stage_means(results: list[Evaluation]) -> dict[str, float]:
    keys = sorted({k for r in results for k in r.seconds})
    return {k: round(sum(r.seconds.get(k, 0.0) for r in results) / len(results), 3) for k in keys}


def local_phase(task, settings: VerifierSettings, backend: str, devices: tuple[str, ...],
                candidates, batch: int, cache: str, standby: int, window: int = 1,
                warmup: VerifierSettings | None = None) -> Phase:  # fmt: skip
    """warmup: the settings of the warm compile cache, for warm_up's jobs (None: no warm-up)."""
    from hipevolve.verifier.pipeline import evaluate_many

    windows: list[tuple[float, float]] = []
    with TimedSlots(backend, devices, standby=standby) as slots:

        def evaluate(cs, settings=settings):  # noqa: ANN001, ANN202
            return evaluate_many(cs, task, settings, backend, slots=slots)

        time.sleep(10)  # every slot's standby judges are up, as during a run
        warmed = []
        if warmup is not None:  # from the warm cache: a cold phase's compiles stay in its time
            warmed = warm_up(slots, lambda cs: evaluate(cs, warmup), candidates, standby)
            time.sleep(2)  # the last warm-up jobs' judges have forked their next sandboxes
        started = time.monotonic()
        results = in_batches(evaluate, candidates, batch, windows, window)
        wall = time.monotonic() - started
    label = f"local, {len(devices)} GPU{'s' if len(devices) > 1 else ''}"
    judged = sum(r.seconds.get("total", 0.0) for r in results)
    return Phase(label=label, gpus=len(devices), cache=cache, evaluations=len(results),
                 wall_s=wall, statuses=[r.status.value for r in results], standby=standby,
                 stages=stage_means(results), odd=not_ok(results),
                 spans=slot_spans(slots.spans, windows, devices, judged),
                 warmup_jobs=len(warmed),
                 warmup_total_s=stage_means(warmed).get("total") if warmed else None)  # fmt: skip


def ray_phase(task, settings: VerifierSettings, backend: str, gpus: int, candidates,
              batch: int, window: int = 1) -> Phase:  # fmt: skip
    from hipevolve.verifier.ray import RayEvaluator

    evaluator = RayEvaluator(task, settings, backend, "auto", workers=gpus)
    try:
        time.sleep(10)
        started = time.monotonic()
        results = in_batches(evaluator, candidates, batch, window=window)
        wall = time.monotonic() - started
    finally:
        evaluator.close()
    from hipevolve.verifier.slots import STANDBY_JUDGES

    return Phase(label=f"ray, {gpus} GPU workers", gpus=gpus, cache="warm",
                 evaluations=len(results), wall_s=wall,
                 statuses=[r.status.value for r in results], standby=STANDBY_JUDGES,
                 stages=stage_means(results), odd=not_ok(results))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="softmax")
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--window", type=int, default=2,
                        help="batches evaluating at once (default 2: `evolve` plans each "
                        "generation one behind, lag 1); 1: each batch waits for the last")  # fmt: skip
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--standby", type=int, default=None,
                        help="warm judges per slot (default: verifier.slots.STANDBY_JUDGES)")  # fmt: skip
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-cache phases")
    parser.add_argument("--rounds", type=int, default=1,
                        help="warm local phases: this many rounds over --gpus, pooled")  # fmt: skip
    parser.add_argument("--no-warmup", action="store_true",
                        help="time local phases from cold slots, each judge's first job "
                        "included (see warm_up)")  # fmt: skip
    parser.add_argument("--ray", action="store_true", help="also Ray GPU workers (warm)")
    parser.add_argument("--out", type=Path, help="write the phases as JSON, after each one")
    parser.add_argument("--cache-dir", type=Path,
                        help="the warm compile cache, kept for the next run (default: a new "
                        "folder, removed at the end)")  # fmt: skip
    args = parser.parse_args(argv)

    from hipevolve.verifier.build.backends import gpu_backend
    from hipevolve.verifier.pipeline import prepare
    from hipevolve.verifier.slots import STANDBY_JUDGES, visible_gpus

    backend = gpu_backend()
    if backend is None:
        raise SystemExit("scaling runs kernels: no GPU here")
    devices = visible_gpus(backend)
    if max(args.gpus) > len(devices):
        raise SystemExit(f"--gpus {max(args.gpus)}: only {len(devices)} GPU(s) visible")
    standby = args.standby or STANDBY_JUDGES
    task = get_task(args.task)
    candidates = candidates_for(task, args.candidates)
    base = load_settings().verifier
    warm_cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="scaling-warm-"))
    warm_cache.mkdir(parents=True, exist_ok=True)
    warm = base.model_copy(update={"cache_dir": warm_cache})
    print(f"{task.name}: {len(candidates)} candidates, batches of {args.batch}, "
          f"{args.window} at once, {len(devices)} GPUs visible ({backend})", flush=True)  # fmt: skip
    started = time.monotonic()
    for c in candidates:  # fill the warm cache, untimed
        prepare(c, task, warm, backend)
    print(f"compiled {len(candidates)} in {time.monotonic() - started:.0f} s", flush=True)

    warmup = None if args.no_warmup else warm
    phases: list[Phase] = []

    def record(phase: Phase) -> None:
        phases.append(phase)
        if args.out:
            save_phases(args.out, phases)

    for r in range(args.rounds):
        for n in args.gpus:
            phase = local_phase(task, warm, backend, devices[:n], candidates, args.batch,
                                "warm", standby, args.window, warmup)  # fmt: skip
            record(phase.model_copy(update={"round": r}))
            print(f"  {phase.label}, warm, round {r + 1}: {phase.per_minute:.1f}/min", flush=True)
    if not args.no_cold:
        for n in args.gpus:
            cold = base.model_copy(
                update={"cache_dir": Path(tempfile.mkdtemp(prefix="scaling-cold-"))}
            )
            record(local_phase(task, cold, backend, devices[:n], candidates, args.batch,
                               "cold", standby, args.window, warmup))  # fmt: skip
            shutil.rmtree(cold.cache_dir, ignore_errors=True)
            print(f"  {phases[-1].label}, cold: {phases[-1].per_minute:.1f}/min", flush=True)
    if args.ray:
        for n in args.gpus:
            record(ray_phase(task, warm, backend, n, candidates, args.batch, args.window))
            print(f"  {phases[-1].label}: {phases[-1].per_minute:.1f}/min", flush=True)
    if args.cache_dir is None:
        shutil.rmtree(warm_cache, ignore_errors=True)

    print()
    print(f"{'phase':<22}{'cache':<7}{'round':>6}{'evals':>6}{'wall s':>9}{'per min':>9}"
          f"{'vs 1 GPU':>10}")  # fmt: skip
    for p in phases:
        one = next(q for q in phases if q.cache == p.cache and q.gpus == min(args.gpus)
                   and q.round == p.round
                   and q.label.split(",")[0] == p.label.split(",")[0])  # fmt: skip
        print(f"{p.label:<22}{p.cache:<7}{p.round + 1:>6}{p.evaluations:>6}{p.wall_s:>9.1f}"
              f"{p.per_minute:>9.1f}{p.per_minute / one.per_minute:>9.2f}x")  # fmt: skip
    print(f"mean seconds per evaluation by stage, as the judges measured them "
          f"({standby} warm judges per slot):")  # fmt: skip
    for p in phases:
        print(f"  {p.label} {p.cache} {p.round + 1}: "
              + ", ".join(f"{k} {v:.2f}" for k, v in p.stages.items()))  # fmt: skip
    for p in phases:
        if p.warmup_jobs:
            print(f"  {p.label} {p.cache} {p.round + 1}: warm-up, untimed: {p.warmup_jobs} "
                  f"jobs, total {p.warmup_total_s:.2f}")  # fmt: skip
    print("slot time, as a share of slots x wall time: busy (in the judge) | idle before a "
          "batch's first job, between jobs, after the last:")  # fmt: skip
    for p in phases:
        if p.spans is not None:
            total = p.gpus * p.wall_s
            s = p.spans
            print(f"  {p.label} {p.cache} {p.round + 1}: {s.busy / total:.1%} "
                  f"({s.judged / total:.1%}) | "
                  f"{s.before_first / total:.1%}, {s.between / total:.1%}, "
                  f"{s.after_last / total:.1%}")  # fmt: skip
    for p in phases:
        for line in p.odd:
            print(f"  not ok in {p.label} {p.cache}: {line[:160]}")
    statuses = {tuple(p.statuses) for p in phases}
    counts = ", ".join(
        f"{s} {phases[0].statuses.count(s)}" for s in sorted(set(phases[0].statuses))
    )
    print(f"statuses agree across phases: {'yes' if len(statuses) == 1 else 'NO'} ({counts})")
    if 1 in args.gpus and 2 in args.gpus:
        for cache in ("warm", "cold"):
            ratio, each = pooled_ratio(phases, cache, 1, 2)
            if each:
                verdict = "met" if ratio >= GOAL else "NOT met"
                rounds = f"; rounds {', '.join(f'{r:.2f}x' for r in each)}" if len(each) > 1 else ""
                print(f"goal {GOAL}x from 1 to 2 GPUs, {cache} cache: {ratio:.2f}x ({verdict})"
                      f"{rounds}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
