"""The agents' loop against a model server on loopback: are the GPU slots kept busy, what does a
proposal cost in tokens, and does a model that writes nothing new stop the run?

A small OpenAI-compatible server on 127.0.0.1 answers each role with a realistic latency (the
profiler_reader, optimizer and mutator of a strong hosted model: 5, 10 and 25 s, times --scale)
and a reply a model could write: a diagnosis, an idea, and a SEARCH/REPLACE edit that moves one
`@tunable` of the parent to a value the run has not tried. It counts the tokens of every request
with cl100k_base and reports them as `usage`. The real graph, policy and run loop run against it;
the evaluator is a stand-in with --slots slots, each evaluation holding one for --eval-s seconds
(times --scale), or, with --gpu, the verifier on this machine's GPUs (busy: the time each GPU
slot is held by an evaluation, its judge and sandbox; compiles run before, off the slot).

Side by side in one run:
  before          the settings of issue 34's review: graph runs 2 at a time, lag 0
  lag1            the next step: 4 graph runs per slot, lag 1 (generations overlap by one)
  after           evolve's defaults with a model: graph runs in flight and each generation's lag
                  paced from the slots and measured latencies (evolution/pace.py)
  repeats-parent  after's settings, a mutator that only repeats the parent: it must stop
Each run reports its slots' busy share over its whole wall time and over its steady part (from
the first evaluation of a model-written child to the start of the last evaluation: start-up and
drain left out), and, over the steady part, what the slots waited for: graph runs and model
calls in flight, candidates waiting for a slot, slot time with nothing to evaluate (starved),
and the share of slot time spent on second evaluations of the same code (re-checks, duels).

    python bench/llm_loop.py                       # stand-in evaluator, 2 slots, budget 64, x0.3
    python bench/llm_loop.py --runs after --budget 24  # a quick look at the defaults
    python bench/llm_loop.py --gpu --scale 1       # the verifier on this machine's GPUs
    python bench/llm_loop.py --runs after --budget 200 --scale 0.02   # a GDN run's cost
    python bench/llm_loop.py --runs after --budget 200 --scale 0.02 --device stand-in \
        --archive-dir runs/   # ... with head-to-heads, then: evolve report 1 --archive runs/after.db

What a run costs: the server caches prompts as a provider that caches on request does
(bench/llm_loop_server.py) and reports it in `usage`; litellm prices every call at Sonnet-class
list prices (PRICES: $3/M input, $15/M output, cache reads 0.1x, cache writes 1.25x), and the
archive's llm_calls add up to the run's dollars, printed per 200 evaluations with the input
tokens of one proposal (profiler_reader, optimizer, mutator) not read from the cache, beside
what the same calls cost uncached (every input token at the input price). The budget's split
(model-written children, the tuner, head-to-heads, re-checks, seeds) is printed too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from hipevolve.agents.llm.client import priced
from hipevolve.agents.llm.ensemble import Ensemble, ModelSettings
from hipevolve.agents.policy import AgentPolicy
from hipevolve.agents.state import AgentLimits
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.offline.tunables import current_configuration, parse_tunables
from hipevolve.evolution.pace import MOST_LAG, PRIOR_PER_SLOT, Pace
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import get_task
from hipevolve.verifier.evaluators import BaseEvaluator, duel_order

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is a folder of scripts
from llm_loop_server import LATENCY_S, Server  # noqa: E402  (the scripted model server)


class Busy:
    """Intervals during which each evaluation held a slot (with the code it evaluated), and
    samples of what was in flight."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float, str]] = []  # start, end, source hash
        self.holds: list[tuple[float, float]] = []  # --gpu: a GPU slot's own holds (no compile)
        self.waiting = 0  # evaluations waiting for a slot now
        self.lock = threading.Lock()

    def add(self, start: float, end: float, source_hash: str = "") -> None:
        with self.lock:
            self.spans.append((start, end, source_hash))

    def hold(self, start: float, end: float) -> None:
        with self.lock:
            self.holds.append((start, end))

    def wait(self, step: int) -> None:
        with self.lock:
            self.waiting += step

    def _busy(self) -> list[tuple[float, float]]:
        """What holds a slot: the GPU slots' holds where measured (the verifier compiles
        before it takes a slot), else each evaluation's whole span."""
        return self.holds or [(s, e) for s, e, _ in self.spans]

    def held(self, start: float, end: float) -> float:
        """Slot-seconds held between start and end."""
        return sum(max(0.0, min(e, end) - max(s, start)) for s, e in self._busy())

    def running(self, at: float) -> int:
        return sum(1 for s, e in self._busy() if s <= at < e)


@contextmanager
def slot_holds(busy: Busy):  # noqa: ANN201 (a context manager)
    """Records each GPU slot hold of the verifier (verifier/slots.py) as busy time: the
    evaluation on the device, judge and sandbox included, its compile not."""
    from hipevolve.verifier import slots

    original = slots.Slots.submit

    def submit(self, evaluate):  # noqa: ANN001, ANN202 (Slots.submit's)
        def held(slot):  # noqa: ANN001, ANN202
            start = time.monotonic()
            try:
                return evaluate(slot)
            finally:
                busy.hold(start, time.monotonic())

        return original(self, held)

    slots.Slots.submit = submit
    try:
        yield
    finally:
        slots.Slots.submit = original


class Sampler:
    """Every 50 ms: graph runs inside the gate, model calls in flight, evaluations waiting."""

    def __init__(self, pace: Pace, server: Server, busy: Busy) -> None:
        self.pace, self.server, self.busy = pace, server, busy
        self.samples: list[tuple[float, int, int, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            self.samples.append((time.monotonic(), self.pace.gate.inside, self.server.in_flight,
                                 self.busy.waiting + self.pace.waiting))  # fmt: skip

    def done(self) -> None:
        self.stop.set()
        self.thread.join()


class CountingPace(Pace):
    """The run's pace, counting the evaluations waiting for one of its slots."""

    waiting = 0

    @contextmanager
    def on_slot(self, slots):  # noqa: ANN001, ANN201 (Pace.on_slot's)
        self.waiting += 1
        entered = False
        try:
            with super().on_slot(slots):
                self.waiting -= 1
                entered = True
                yield
        finally:
            if not entered:
                self.waiting -= 1


class SlotStandIn(BaseEvaluator):
    """A device of `slots` slots: each candidate holds one for `seconds`; a batch spreads over
    them. A made-up fitness by tunables."""

    settings_key = "bench-llm-loop"
    toolchain = "stand-in"

    def __init__(self, task: str, slots: int, seconds: float, busy: Busy) -> None:
        self.task, self.parallelism, self.seconds, self.busy = task, slots, seconds, busy
        self.free = threading.Semaphore(slots)

    def one(self, candidate: Candidate) -> Evaluation:
        self.busy.wait(+1)
        with self.free:
            self.busy.wait(-1)
            start = time.monotonic()
            time.sleep(self.seconds)
            self.busy.add(start, time.monotonic(), candidate.source_hash)
        return self.score(candidate)

    def score(self, candidate: Candidate) -> Evaluation:
        config = current_configuration(parse_tunables(candidate.hip_source or ""))
        digest = hashlib.sha256(repr(sorted(config.items())).encode()).digest()
        fitness = 1.0 + int.from_bytes(digest[:2], "big") % 1000 / 1000
        return Evaluation(
            status=Status.ok,
            task=self.task,
            backend="stand-in",
            cases=(CaseResult(case="c", correct=True, time_us=100 / fitness, ref_time_us=100.0),),
        )

    def head_to_head(self, a: Candidate, b: Candidate, rounds: int) -> list[Evaluation]:
        """On one slot, one after the other, as the verifier's head-to-heads run."""
        with self.free:
            start = time.monotonic()
            time.sleep(self.seconds * 2 * rounds)
            self.busy.add(start, time.monotonic(), "head-to-head")
        return [self.score(c) for c in duel_order(a, b, rounds)]

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        if len(candidates) == 1:
            return [self.one(candidates[0])]
        with ThreadPoolExecutor(max_workers=self.parallelism) as pool:
            return list(pool.map(self.one, candidates))


class Timed:
    """A real evaluator whose calls are recorded as busy spans (one candidate a call)."""

    def __init__(self, inner, busy: Busy) -> None:
        self.inner, self.busy = inner, busy
        self.settings_key, self.toolchain = inner.settings_key, inner.toolchain
        self.device, self.backend, self.parallelism = inner.device, inner.backend, inner.parallelism

    def close(self) -> None:
        self.inner.close()

    def prepare(self, candidates: list[Candidate]) -> list:
        return self.inner.prepare(candidates)

    def run(self, prepared: list) -> list[Evaluation]:
        start = time.monotonic()
        try:
            return self.inner.run(prepared)
        finally:
            self.busy.add(
                start, time.monotonic(), prepared[0].candidate.source_hash if prepared else ""
            )

    def baseline(self, trials: int, target: float = 0.0):  # noqa: ANN201 (the protocol's)
        return self.inner.baseline(trials, target)

    def strong_baselines(self, trials: int, target: float = 0.0):  # noqa: ANN201
        return self.inner.strong_baselines(trials, target)

    def use_baseline(self, baseline, check_every: int) -> None:  # noqa: ANN001
        self.inner.use_baseline(baseline, check_every)

    def head_to_head(self, a: Candidate, b: Candidate, rounds: int) -> list[Evaluation]:
        start = time.monotonic()
        try:
            return self.inner.head_to_head(a, b, rounds)
        finally:
            self.busy.add(start, time.monotonic(), "head-to-head")

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        start = time.monotonic()
        try:
            return self.inner(candidates)
        finally:
            self.busy.add(start, time.monotonic(), candidates[0].source_hash if candidates else "")


@dataclass(frozen=True)
class Setup:
    """One row's settings: graph runs at once (None: paced), lag (None: paced up to MOST_LAG)."""

    label: str
    concurrency: int | None
    lag: int | None
    repeat_parent: bool = False


SETUPS = {
    "before": Setup("before", concurrency=2, lag=0),
    "lag1": Setup("lag1", concurrency=None, lag=1),
    "after": Setup("after", concurrency=None, lag=None),
    "repeats-parent": Setup("repeats-parent", concurrency=None, lag=None, repeat_parent=True),
}


MODEL = "openai/bench"
# Sonnet-class list prices, per token, as litellm's price map spells them.
PRICES = {"input_cost_per_token": 3e-6, "output_cost_per_token": 15e-6,
          "cache_read_input_token_cost": 0.3e-6, "cache_creation_input_token_cost": 3.75e-6,
          "litellm_provider": "openai", "mode": "chat"}  # fmt: skip


def priced_like_sonnet() -> None:
    """litellm prices the bench's model at PRICES (and its cache reads and writes)."""
    from hipevolve.agents.llm.client import load_litellm

    load_litellm().register_model({MODEL: PRICES})


def one_run(args, setup: Setup) -> dict:
    task = get_task(args.task)
    server = Server(scale=args.scale, repeat_parent=setup.repeat_parent)
    httpd = server.serve()
    busy = Busy()
    if args.gpu:
        from hipevolve.core.config import load_settings
        from hipevolve.verifier.evaluators import pipeline_evaluator

        evaluate = Timed(pipeline_evaluator(task, load_settings({}).verifier, "auto"), busy)
    else:
        evaluate = SlotStandIn(task.name, args.slots, args.eval_s * args.scale, busy)
        evaluate.device = args.device
    priced_like_sonnet()
    models = ModelSettings.for_model(MODEL, api_base=f"http://127.0.0.1:{httpd.server_port}/v1",
                                     max_retries=0, timeout_s=600)  # fmt: skip
    if setup.lag is None:  # what `evolve --model` does (hipevolve/app/run_job.py _pace)
        pace = CountingPace(evaluate.parallelism, lag_bound=MOST_LAG)
        lag = MOST_LAG
    else:  # "lag1" is the previous default: 4 graph runs per slot, lag 1
        fixed = setup.concurrency or PRIOR_PER_SLOT * evaluate.parallelism
        pace = CountingPace(evaluate.parallelism, concurrency=fixed)
        lag = setup.lag
    policy = AgentPolicy(Ensemble(models), AgentLimits(concurrency=setup.concurrency))
    # evolve's own defaults for a run with a model: 4 islands, 2 proposals each a generation.
    settings = EvolutionSettings(islands=4, proposals_per_island=2, lag=lag)
    seeds = {c.candidate.source_hash for c in first_candidates(task)}
    sampler = Sampler(pace, server, busy)
    started, cpu = time.monotonic(), time.process_time()
    holds = slot_holds(busy) if args.gpu else nullcontext()
    with (
        holds,
        tempfile.TemporaryDirectory() as folder,
        Archive.open(_archive_path(args, setup, Path(folder))) as archive,
    ):
        summary = run_evolution(task, archive, settings, evaluate, first=first_candidates(task),
                                budget=args.budget, seed=0, policy=policy, pace=pace)  # fmt: skip
        ended, cpu = time.monotonic(), time.process_time() - cpu
        proposals = sum(1 for r, _, _ in server.tokens if r == "mutator")
        calls = archive.db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]
        lags = [e.data["lag"] for e in archive.events(summary.run, "pace")]
        latency = {role: (n, mean) for role, n, mean in archive.db.execute(
            "SELECT role, COUNT(*), AVG(latency_s) FROM llm_calls GROUP BY role")}  # fmt: skip
        outcomes = [f"{agent or '-'} {status} {n}" for agent, status, n in archive.db.execute(
            "SELECT c.agent, e.status, COUNT(*) FROM candidates c JOIN evaluations e "
            "ON e.id = c.evaluation_id WHERE c.run = ? GROUP BY c.agent, e.status "
            "ORDER BY c.agent, e.status", [summary.run])]  # fmt: skip
        copies = len(archive.events(summary.run, "machine_copy"))
        dollars = archive.db.execute("SELECT coalesce(sum(cost_usd), 0) FROM llm_calls "
                                     "WHERE run = ?", [summary.run]).fetchone()[0]  # fmt: skip
        # The same calls with nothing read from the cache: every input token at the input price.
        uncached = sum(priced(model, tokens_in, tokens_out)[0] for model, tokens_in, tokens_out
                       in archive.db.execute("SELECT model, tokens_in, tokens_out FROM llm_calls "
                                             "WHERE run = ?", [summary.run]))  # fmt: skip
        spent = {"seeds": 0, "model": 0}
        for agent, model, n in archive.db.execute(
                "SELECT agent, coalesce(model, ''), count(*) FROM candidates WHERE run = ? AND "
                "evaluation_id IS NOT NULL GROUP BY 1, 2", [summary.run]):  # fmt: skip
            key = "model" if model else "seeds" if agent == "seed" else agent
            spent[key] = spent.get(key, 0) + n
        errors = [e.data.get("error_class") for e in archive.events(summary.run, "llm_error")]
        rechecks = archive.events(summary.run, "audit_recheck")
        replies = len(archive.events(summary.run, "reply_error"))
        fallbacks = len(archive.events(summary.run, "reply_fallback"))  # JSON roles' offline rule
    sampler.done()
    httpd.shutdown()
    evaluate.close()
    tokens = sum(i + o for _, i, o in server.tokens)
    fresh = sum(i for _, i, _ in server.tokens) - sum(r for _, r, _ in server.caching)
    evaluations = summary.progress.evaluations
    return {
        "cost_usd": dollars, "cost_per_200": 200 * dollars / evaluations if evaluations else 0.0,
        "uncached_usd": uncached,
        "uncached_per_200": 200 * uncached / evaluations if evaluations else 0.0,
        "split": spent | {"head-to-heads": summary.progress.head_to_head,
                          "re-checks": sum(e.data.get("status") != "skipped" for e in rechecks)},
        "fresh_per_proposal": fresh / proposals if proposals else 0.0,
        "cache_read": sum(r for _, r, _ in server.caching),
        "cache_written": sum(w for _, _, w in server.caching),
        "run": setup.label, "reason": summary.reason, "message": summary.message,
        "evaluations": summary.progress.evaluations, "generations": summary.progress.generation,
        "seconds": round(ended - started, 1), "calls": len(server.tokens), "calls_recorded": calls,
        "tokens": tokens, "tokens_per_proposal": tokens / proposals if proposals else 0.0,
        "pace": pace.line(), "lags": lags, "most_graph_runs": pace.gate.most,
        "latency": latency, "cpu_per_proposal": cpu / proposals if proposals else 0.0,
        "ceiling": ceiling(pace, cpu / proposals if proposals else 0.0, evaluate.parallelism),
        "slots": evaluate.parallelism, "load": os.getloadavg()[0],
        "outcomes": outcomes, "copies": copies, "replies_refused": replies,
        "json_fallbacks": fallbacks,
        "call_errors": {c: errors.count(c) for c in sorted(set(errors), key=str)},
        "runs_written": pace.counts()[0], "holds": pace.counts()[1],
    } | shares(busy, sampler.samples, seeds, started, ended, evaluate.parallelism)  # fmt: skip


def _archive_path(args, setup: Setup, folder: Path) -> Path:  # noqa: ANN001 (the parsed args)
    """Where a row's run is archived: --archive-dir/<row>.db (kept, for `evolve report`), else
    a temporary folder's."""
    if not args.archive_dir:
        return folder / "a.db"
    Path(args.archive_dir).mkdir(parents=True, exist_ok=True)
    path = Path(args.archive_dir) / f"{setup.label}.db"
    path.unlink(missing_ok=True)
    return path


def ceiling(pace: Pace, cpu_per_proposal: float, slots: int) -> float:
    """The busy share one free core could feed: proposals a second (1 / CPU a proposal) times
    the slot-seconds each brings, over the slots."""
    per_run = pace.evaluations_per_run() or 1.0
    if not cpu_per_proposal or not pace.evaluate_s:
        return 1.0
    return min(1.0, per_run * pace.evaluate_s / (slots * cpu_per_proposal))


def shares(busy: Busy, samples: list, seeds: set[str], started: float, ended: float,
           slots: int) -> dict:  # fmt: skip
    """Busy shares over the whole run and over its steady part, and what the slots waited for
    in the steady part."""
    spans = sorted(busy.spans)
    children = [s for s, _, h in spans if h not in seeds]
    steady = (children[0], spans[-1][0]) if children and spans[-1][0] > children[0] else None
    out = {"busy": busy.held(started, ended) / (slots * (ended - started))}
    if steady is None:
        return out | {"steady": None}
    begin, end = steady
    window = [x for x in samples if begin <= x[0] < end] or [(begin, 0, 0, 0)]
    first_seen: set[str] = set()
    again = duels = 0.0
    for s, e, h in spans:
        inside = max(0.0, min(e, end) - max(s, begin))
        if h == "head-to-head":
            duels += inside
        elif h in first_seen:
            again += inside
        first_seen.add(h)
    held = busy.held(begin, end)
    starved = [x for x in window if busy.running(x[0]) < slots and x[3] == 0]
    return out | {
        "steady": held / (slots * (end - begin)),
        "steady_s": end - begin,
        "steady_share": (end - begin) / (ended - started),
        "graph_runs": sum(x[1] for x in window) / len(window),
        "model_calls": sum(x[2] for x in window) / len(window),
        "waiting": sum(x[3] for x in window) / len(window),
        "starved": len(starved) / len(window),
        "again": again / held if held else 0.0,
        "duels": duels / held if held else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="gated_delta_net")
    parser.add_argument(
        "--budget",
        type=int,
        default=64,
        help="evaluations a run; 64 makes start-up and drain a small share",
    )
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument(
        "--eval-s", type=float, default=8.0, help="seconds a stand-in evaluation holds a slot"
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=0.3,
        help="multiplies every latency (the controller's CPU is not scaled: at 0.1 "
        "a 2-core machine's CPU, not the models or slots, sets the pace)",
    )
    parser.add_argument("--gpu", action="store_true", help="the verifier on this machine's GPUs")
    parser.add_argument(
        "--device",
        default=None,
        help="a device name for the stand-in evaluator: its numbers count as timings, so close "
        "calls go head to head and the run's best is confirmed against the seed, as on a GPU",
    )
    parser.add_argument(
        "--archive-dir", help="keep each row's archive here as <row>.db (for `evolve report`)"
    )
    parser.add_argument(
        "--runs", default=",".join(SETUPS), help=f"rows to run, of {', '.join(SETUPS)}"
    )
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = [one_run(args, SETUPS[name]) for name in args.runs.split(",")]
    slots = rows[0]["slots"] if rows else args.slots
    print(f"task {args.task}, {slots} slots, budget {args.budget}, latencies x{args.scale} "
          f"(mutator {LATENCY_S['mutator'] * args.scale:g} s, evaluation "
          f"{'GPU' if args.gpu else f'{args.eval_s * args.scale:g} s'})")  # fmt: skip
    print("busy: slot time used over the run's whole wall time | over its steady part (first "
          "model-written child's evaluation to the last evaluation's start; share of the wall "
          "time in brackets)")  # fmt: skip
    print(f"{'run':15} {'evals':>5} {'gens':>4} {'secs':>6} {'busy whole':>10} "
          f"{'busy steady':>17} {'calls':>5} {'recorded':>8} {'tokens/proposal':>15}  stop")  # fmt: skip
    for r in rows:
        steady = (f"{100 * r['steady']:5.1f}% ({100 * r['steady_share']:3.0f}%)"
                  if r.get("steady") is not None else "-")  # fmt: skip
        print(f"{r['run']:15} {r['evaluations']:5d} {r['generations']:4d} {r['seconds']:6.1f} "
              f"{100 * r['busy']:9.1f}% {steady:>17} {r['calls']:5d} {r['calls_recorded']:8d} "
              f"{r['tokens_per_proposal']:15.0f}  {r['reason']}: {r['message'][:80]}")  # fmt: skip
    print("steady part, mean over time: graph runs in flight (most), model calls in flight, "
          "evaluations waiting for a slot; slot time starved (a slot idle, nothing waiting); "
          "slot time on hidden-seed re-checks and on head-to-heads (both spend the budget)")  # fmt: skip
    for r in rows:
        if r.get("steady") is None:
            continue
        print(f"  {r['run']:15} graph runs {r['graph_runs']:5.1f} ({r['most_graph_runs']:2d}), "
              f"model calls {r['model_calls']:5.1f}, waiting {r['waiting']:4.1f}, "
              f"starved {100 * r['starved']:4.1f}%, re-checks {100 * r['again']:4.1f}%, "
              f"head-to-heads {100 * r['duels']:4.1f}%; "
              f"lags {sorted(set(r['lags'])) or '-'}; {r['pace']}")  # fmt: skip
        print(f"  {'':15} this process's CPU: {r['cpu_per_proposal']:.2f} s a proposal (the "
              "controller, the client and this server; the static screen runs in worker "
              f"processes): one free core feeds the slots at most {100 * r['ceiling']:.0f}%; "
              f"the machine's load average at the end {r['load']:.1f} on {os.cpu_count()} "
              "cores")  # fmt: skip
        print(f"  {'':15} where the budget went (agent, status, evaluations): "
              f"{'; '.join(r['outcomes'])}; {r['copies']} machine-code copies; "
              f"{r['runs_written']} graph runs, {r['holds']} slot holds; replies refused "
              f"{r['replies_refused']}; failed calls {r['call_errors'] or 'none'}")  # fmt: skip
        print(f"  {'':15} cost at Sonnet-class prices (litellm, cache reads 0.1x, writes "
              f"1.25x): ${r['cost_usd']:.2f} for {r['evaluations']} evaluations, "
              f"${r['cost_per_200']:.2f} per 200 with the cache as litellm reports it "
              f"(${r['uncached_per_200']:.2f} per 200 uncached: every input token at the input "
              f"price); input tokens a proposal not read from the "
              f"cache {r['fresh_per_proposal']:.0f}; cache read {r['cache_read']}, written "
              f"{r['cache_written']} tokens")  # fmt: skip
        print(f"  {'':15} the budget's split (units): "
              + ", ".join(f"{k} {v}" for k, v in r["split"].items()))  # fmt: skip
        print("  " + " " * 15 + " model calls as the client saw them (the server's latency): " + ", ".join(
            f"{role} {n} x {mean:.2f} s ({LATENCY_S.get(role, 5.0) * args.scale:g})"
            for role, (n, mean) in sorted(r["latency"].items())))  # fmt: skip
    named = {r["run"]: r for r in rows}
    if "before" in named and "after" in named:
        before, after = named["before"]["busy"], named["after"]["busy"]
        print(f"slots busy (whole run): {100 * after:.1f}% after vs {100 * before:.1f}% before "
              f"({after / before if before else float('inf'):.2f}x)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
