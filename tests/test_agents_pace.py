"""The run's pace (evolution/pace.py): graph runs in flight and each generation's lag chosen
from the evaluator's slots and measured latencies (Little's law), unless the user set them;
each generation's choice logged, and read back by a resumed run. Against the loopback model
server of bench/llm_loop.py (real litellm client, graph, policy and run loop) and its stand-in
evaluator holding real slots."""

from __future__ import annotations

import math
import threading
import time

from bench_module import load_bench

from hipevolve.agents.llm.ensemble import Ensemble, ModelSettings
from hipevolve.agents.policy import AgentPolicy
from hipevolve.agents.state import AgentLimits
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.pace import EVENT, MOST_LAG, Decision, Pace
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import get_task

bench = load_bench("llm_loop")


def measured(pace: Pace, model_s: float, hold_s: float, runs: int = 3) -> None:
    """`runs` graph runs, each with model calls of `model_s` and one slot hold of `hold_s`."""
    slots = threading.Semaphore(pace.slots)
    for _ in range(runs):
        with pace.writing():
            pace.called(model_s)
            with pace.on_slot(slots):
                time.sleep(hold_s)


def test_graph_runs_in_flight_follow_littles_law_over_the_measured_latencies():
    pace = Pace(2)
    assert pace.concurrency() == 8  # nothing measured yet: 4 a slot
    measured(pace, model_s=0.5, hold_s=0.1)
    held = pace.evaluate_s  # 0.1 s, and what a loaded machine's sleeps overshoot
    assert pace.propose_s == 0.5 and 0.1 <= held < 0.5 and pace.evaluations_per_run() == 1
    # 2 slots * (0.5 + 0.1) / 0.1 + 2 waiting = 14 on an idle machine
    assert pace.concurrency() == math.ceil(2 * (0.5 + held) / held + 2) >= 6
    assert Pace(2, concurrency=3).concurrency() == 3  # the user's setting wins


def test_graph_runs_that_end_without_an_evaluation_ask_for_more_runs_in_flight():
    every, half = Pace(2), Pace(2)
    measured(every, model_s=0.5, hold_s=0.1, runs=4)
    slots = threading.Semaphore(2)
    for i in range(4):  # every other run ends without a GPU evaluation (a failed reply, a copy)
        with half.writing():
            half.called(0.5)
            if i % 2 == 0:
                with half.on_slot(slots):
                    time.sleep(0.1)
    assert every.evaluations_per_run() == 1 and half.evaluations_per_run() == 0.5
    # 2 * (0.5 + 0.1) / 0.1 + 2 = 14 against 2 * (0.5 + 0.05) / 0.05 + 2 = 24 on an idle machine
    assert half.concurrency() > every.concurrency()


def test_a_paced_lag_covers_the_graph_runs_in_flight_and_a_resume_reads_it_back():
    logged: list[Decision] = []
    pace = Pace(2, lag_bound=MOST_LAG)
    pace.log = logged.append
    measured(pace, model_s=1.0, hold_s=0.1)
    lag = pace.lag(5, proposals=8, fixed=1)  # ceil(24 / 8) = 3 on an idle machine
    assert lag == min(MOST_LAG, math.ceil(pace.concurrency() / 8)) >= 2
    assert pace.lag(5, proposals=8, fixed=1) == lag and len(logged) == 1  # decided once
    resumed = Pace(2, lag_bound=MOST_LAG)  # nothing measured: it would choose 1
    resumed.restore([d.model_dump(mode="json") for d in logged])
    assert resumed.lag(5, proposals=8, fixed=1) == lag
    assert Pace(2).lag(5, proposals=8, fixed=1) == 1  # not paced: the run's settings.lag


def paced_run(tmp_path, name: str, scale: float, eval_s: float) -> tuple[Pace, list[dict]]:
    task = get_task("softmax")
    server = bench.Server(scale=scale)
    httpd = server.serve()
    evaluate = bench.SlotStandIn(task.name, 2, eval_s, bench.Busy())
    models = ModelSettings.for_model("openai/bench", max_retries=0, timeout_s=60,
                                     api_base=f"http://127.0.0.1:{httpd.server_port}/v1")  # fmt: skip
    pace = Pace(2, lag_bound=MOST_LAG)
    try:
        with Archive.open(tmp_path / f"{name}.db") as archive:
            summary = run_evolution(
                task, archive, EvolutionSettings(islands=2, proposals_per_island=2, lag=MOST_LAG),
                evaluate, first=first_candidates(task), budget=10, seed=0, pace=pace,
                policy=AgentPolicy(Ensemble(models), AgentLimits(sweep_configurations=0)))  # fmt: skip
            events = [e.data for e in archive.events(summary.run, EVENT)]
    finally:
        httpd.shutdown()
    assert summary.reason == "budget"
    return pace, events


def test_graph_runs_in_flight_rise_when_model_latency_is_high_relative_to_evaluation(tmp_path):
    # The same evaluations (0.4 s a slot hold); model calls of about 0 s, then of 4 s a graph
    # run (the bench's 5 + 10 + 25 s scaled by 0.1).
    quick, quick_events = paced_run(tmp_path, "quick", scale=0.0, eval_s=0.4)
    slow, slow_events = paced_run(tmp_path, "slow", scale=0.1, eval_s=0.4)
    # the client's latencies, CPU contention included; the server's 4 s on top in the slow run
    assert slow.propose_s > 3.5 and slow.propose_s > quick.propose_s + 1.5
    assert slow.concurrency() >= quick.concurrency() + 4
    # each generation's choice is in the archive: its lag and the latencies it rests on
    assert slow_events and all(Decision.model_validate(e).lag >= 1 for e in slow_events)
    assert [e["generation"] for e in quick_events] == sorted({e["generation"] for e in quick_events})
