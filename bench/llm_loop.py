"""The agents' loop against a model server on loopback: are the GPU slots kept busy, what does a
proposal cost in tokens, and does a model that writes nothing new stop the run?

A small OpenAI-compatible server on 127.0.0.1 answers each role with a realistic latency (the
profiler_reader, optimizer and mutator of a strong hosted model: 5, 10 and 25 s, times --scale)
and a reply a model could write: a diagnosis, an idea, and a SEARCH/REPLACE edit that moves one
`@tunable` of the parent to a value the run has not tried. It counts the tokens of every request
with cl100k_base and reports them as `usage`. The real graph, policy and run loop run against it;
the evaluator is a stand-in that holds one of --slots slots for --eval-s seconds (times --scale)
per candidate, or, with --gpu, the verifier on this machine's GPUs.

Side by side in one run:
  before  the previous settings: graph runs 2 at a time, generations one after another (lag 0)
  after   evolve's defaults: 4 graph runs per slot, the next generation's model calls overlapping
          this generation's evaluations (lag 1)
and a third run whose mutator only ever repeats the parent: it must stop on its own.

    python bench/llm_loop.py                       # stand-in evaluator, 2 slots, budget 24
    python bench/llm_loop.py --gpu --scale 1       # the verifier on this machine's GPUs
"""

from __future__ import annotations

import argparse
import json
import random
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from hipevolve.agents.llm.ensemble import Ensemble, ModelSettings
from hipevolve.agents.policy import AgentPolicy
from hipevolve.agents.state import AgentLimits
from hipevolve.app.prompt_show import count_tokens
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.offline.tunables import current_configuration, parse_tunables
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import get_task
from hipevolve.verifier.evaluators import BaseEvaluator

LATENCY_S = {"profiler_reader": 5.0, "optimizer": 10.0, "mutator": 25.0, "repairer": 25.0,
             "translator": 25.0, "auditor": 8.0}  # fmt: skip
_DEFINE = re.compile(r"^// @tunable (\w+): (.+)$\n(?:^//.*$\n)*^#define \1 (\S+)", re.M)


@dataclass
class Server:
    """Answers by role, with a latency; counts every request's tokens."""

    scale: float
    repeat_parent: bool = False
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    tokens: list[tuple[str, int, int]] = field(default_factory=list)  # role, in, out
    written: set = field(default_factory=set)  # configurations the mutator has written
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply(self, messages: list[dict]) -> tuple[str, str]:
        prompt = messages[-1]["content"]
        role = prompt.split("\n", 1)[0].removeprefix("# Role: ").strip()
        if role == "profiler_reader":
            text = json.dumps({"bottleneck": "latency", "summary": "few waves in flight per CU."})
        elif role == "optimizer":
            text = json.dumps({"idea": "try another tile configuration", "transform": None})
        elif role == "auditor":
            text = json.dumps({"shortcut": False, "reasons": "nothing skipped"})
        else:
            text = self._edit(prompt)
        return role, text

    def _edit(self, prompt: str) -> str:
        """One tunable of the parent moved to a value that makes a configuration this server
        has not written before (a model that remembers its attempts); the parent's own line
        when it only repeats."""
        found = _DEFINE.findall(prompt)
        if self.repeat_parent or not found:
            name, values, current = found[0] if found else ("X", "1", "1")
            line = f"#define {name} {current}"
            return f"kernel.hip\n<<<<<<< SEARCH\n{line}\n=======\n{line}\n>>>>>>> REPLACE\n"
        parent = {n: c for n, _, c in found}
        moves = [(n, v.strip()) for n, vs, c in found for v in vs.split(",") if v.strip() != c]
        with self.lock:
            self.rng.shuffle(moves)
            fresh = [(n, v) for n, v in moves
                     if tuple(sorted({**parent, n: v}.items())) not in self.written]  # fmt: skip
            name, value = (fresh or moves)[0]
            self.written.add(tuple(sorted({**parent, name: value}.items())))
        return (f"kernel.hip\n<<<<<<< SEARCH\n#define {name} {parent[name]}\n=======\n"
                f"#define {name} {value}\n>>>>>>> REPLACE\n")  # fmt: skip

    def serve(self) -> ThreadingHTTPServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                role, text = owner.reply(body["messages"])
                tokens_in = sum(count_tokens(m["content"]) for m in body["messages"]
                                if isinstance(m.get("content"), str))  # fmt: skip
                tokens_out = count_tokens(text)
                with owner.lock:
                    owner.tokens.append((role, tokens_in, tokens_out))
                time.sleep(LATENCY_S.get(role, 5.0) * owner.scale)
                data = json.dumps({
                    "id": "bench", "object": "chat.completion", "created": 0, "model": "bench",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                              "total_tokens": tokens_in + tokens_out},
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # quiet
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd


class Busy:
    """Intervals during which each evaluation held a slot."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self.lock = threading.Lock()

    def add(self, start: float, end: float) -> None:
        with self.lock:
            self.spans.append((start, end))

    def fraction(self, slots: int) -> float:
        """Slot-seconds busy over slot-seconds available, from the first evaluation's start to
        the last one's end."""
        if not self.spans:
            return 0.0
        start = min(s for s, _ in self.spans)
        end = max(e for _, e in self.spans)
        return sum(e - s for s, e in self.spans) / (slots * (end - start))


class SlotStandIn(BaseEvaluator):
    """Holds one of `slots` slots for `seconds` per candidate; a made-up fitness by tunables."""

    settings_key = "bench-llm-loop"
    toolchain = "stand-in"

    def __init__(self, task: str, slots: int, seconds: float, busy: Busy) -> None:
        self.task, self.parallelism, self.seconds, self.busy = task, slots, seconds, busy

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        out = []
        for candidate in candidates:
            start = time.monotonic()
            time.sleep(self.seconds)
            self.busy.add(start, time.monotonic())
            config = current_configuration(parse_tunables(candidate.hip_source or ""))
            fitness = 1.0 + (hash(tuple(sorted(config.items()))) % 1000) / 1000
            out.append(Evaluation(status=Status.ok, task=self.task, backend="stand-in", cases=(
                CaseResult(case="c", correct=True, time_us=100 / fitness, ref_time_us=100.0),)))
        return out


class Timed:
    """A real evaluator whose calls are recorded as busy spans (one candidate a call)."""

    def __init__(self, inner, busy: Busy) -> None:
        self.inner, self.busy = inner, busy
        self.settings_key, self.toolchain = inner.settings_key, inner.toolchain
        self.device, self.backend, self.parallelism = inner.device, inner.backend, inner.parallelism

    def close(self) -> None:
        self.inner.close()

    def digests(self, candidates: list[Candidate]) -> list[str | None]:
        return self.inner.digests(candidates)

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        start = time.monotonic()
        try:
            return self.inner(candidates)
        finally:
            self.busy.add(start, time.monotonic())


def one_run(args, label: str, limits: AgentLimits, lag: int, repeat_parent: bool = False) -> dict:
    task = get_task(args.task)
    server = Server(scale=args.scale, repeat_parent=repeat_parent)
    httpd = server.serve()
    busy = Busy()
    if args.gpu:
        from hipevolve.core.config import load_settings
        from hipevolve.verifier.evaluators import pipeline_evaluator

        evaluate = Timed(pipeline_evaluator(task, load_settings({}).verifier, "auto"), busy)
    else:
        evaluate = SlotStandIn(task.name, args.slots, args.eval_s * args.scale, busy)
    models = ModelSettings.for_model("openai/bench", api_base=f"http://127.0.0.1:{httpd.server_port}/v1",
                                     max_retries=0, timeout_s=600)  # fmt: skip
    policy = AgentPolicy(Ensemble(models), limits)
    # evolve's own defaults for a run with a model: 4 islands, 2 proposals each a generation.
    settings = EvolutionSettings(islands=4, proposals_per_island=2, lag=lag)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder, Archive.open(Path(folder) / "a.db") as archive:
        summary = run_evolution(task, archive, settings, evaluate, first=first_candidates(task),
                                budget=args.budget, seed=0, policy=policy)  # fmt: skip
        proposals = sum(1 for r, _, _ in server.tokens if r == "mutator")
        calls = archive.db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]
    httpd.shutdown()
    evaluate.close()
    tokens = sum(i + o for _, i, o in server.tokens)
    return {
        "run": label, "reason": summary.reason, "message": summary.message,
        "evaluations": summary.progress.evaluations, "generations": summary.progress.generation,
        "seconds": round(time.monotonic() - started, 1), "busy": busy.fraction(args.slots),
        "calls": len(server.tokens), "calls_recorded": calls, "tokens": tokens,
        "tokens_per_proposal": tokens / proposals if proposals else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="gated_delta_net")
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--eval-s", type=float, default=8.0, help="seconds a stand-in evaluation holds a slot")
    parser.add_argument("--scale", type=float, default=0.1, help="multiplies every latency")
    parser.add_argument("--gpu", action="store_true", help="the verifier on this machine's GPUs")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = [
        one_run(args, "before", AgentLimits(concurrency=2), lag=0),
        one_run(args, "after", AgentLimits(), lag=1),
        one_run(args, "repeats-parent", AgentLimits(), lag=1, repeat_parent=True),
    ]
    print(f"task {args.task}, {args.slots} slots, budget {args.budget}, latencies x{args.scale} "
          f"(mutator {LATENCY_S['mutator'] * args.scale:g} s, evaluation "
          f"{'GPU' if args.gpu else f'{args.eval_s * args.scale:g} s'})")  # fmt: skip
    print(f"{'run':15} {'evals':>5} {'gens':>4} {'secs':>6} {'busy':>6} {'calls':>5} "
          f"{'recorded':>8} {'tokens/proposal':>15}  stop")  # fmt: skip
    for r in rows:
        print(f"{r['run']:15} {r['evaluations']:5d} {r['generations']:4d} {r['seconds']:6.1f} "
              f"{100 * r['busy']:5.1f}% {r['calls']:5d} {r['calls_recorded']:8d} "
              f"{r['tokens_per_proposal']:15.0f}  {r['reason']}: {r['message'][:90]}")  # fmt: skip
    before, after = rows[0]["busy"], rows[1]["busy"]
    print(f"slots busy: {100 * after:.1f}% after vs {100 * before:.1f}% before "
          f"({after / before if before else float('inf'):.2f}x)")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
