"""Where a model-driven run's budget goes (evolution/budget.py Shares): the offline tuner gets at
most agents.tuner_share of it, head-to-heads duel_share (the final confirmation's reserve
included), hidden-seed re-checks recheck_share; the rest is the models' children. Against the
loopback model server of bench/llm_loop.py (real litellm client over HTTP, graph, policy and run
loop; its mutator moves one tunable of the parent) and its stand-in evaluator given a device
name, so close calls go head to head and the run's best is confirmed against the seed, as on a
GPU (a 200-evaluation GDN run there spent 44 units on the tuner, 34 head to head and 16 on
re-checks, leaving the models 105)."""

from __future__ import annotations

import math

from bench_module import load_bench

from hipevolve.agents.llm.ensemble import Ensemble, ModelSettings
from hipevolve.agents.policy import AgentPolicy
from hipevolve.agents.state import AgentLimits
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.evolution.budget import DUEL, RECHECK, TUNER
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import get_task

bench = load_bench("llm_loop")
BUDGET = 100


class OnADevice(bench.SlotStandIn):
    """The bench's stand-in, naming a device: its numbers are treated as timings, so a close
    call goes head to head and the final best meets the seed."""

    device = "stand-in GPU"


def test_a_model_driven_run_spends_three_quarters_of_its_budget_on_model_written_children(tmp_path):
    task = get_task("softmax")
    server = bench.Server(scale=0.01)
    httpd = server.serve()
    models = ModelSettings.for_model("openai/bench", max_retries=0, timeout_s=60,
                                     api_base=f"http://127.0.0.1:{httpd.server_port}/v1")  # fmt: skip
    limits = AgentLimits()  # the defaults: tuner 10%, head-to-heads 8%, re-checks 5%
    try:
        with Archive.open(tmp_path / "a.db") as archive:
            summary = run_evolution(
                task, archive, EvolutionSettings(islands=4, proposals_per_island=2, lag=1),
                OnADevice(task.name, 2, 0.02, bench.Busy()), first=first_candidates(task),
                budget=BUDGET, seed=0, policy=AgentPolicy(Ensemble(models), limits))  # fmt: skip
            written = dict(archive.db.execute(
                "SELECT CASE WHEN coalesce(model, '') != '' THEN 'model' ELSE agent END, count(*)"
                " FROM candidates WHERE run = ? AND evaluation_id IS NOT NULL GROUP BY 1",
                [summary.run]).fetchall())  # fmt: skip
            duels = sum(e.data["evaluations"] for e in archive.events(summary.run, DUEL))
            rechecks = [e.data["status"] for e in archive.events(summary.run, RECHECK)]
    finally:
        httpd.shutdown()
    ran = sum(s != "skipped" for s in rechecks)
    shares = {
        TUNER: limits.tuner_share,
        "duels": limits.duel_share,
        "rechecks": limits.recheck_share,
    }
    bound = {k: math.ceil(v * BUDGET) for k, v in shares.items()}
    spent = {TUNER: written.get(TUNER, 0), "duels": duels, "rechecks": ran}
    assert summary.reason == "budget" and summary.progress.spent == BUDGET, summary.message
    assert all(spent[k] <= bound[k] for k in bound), (spent, bound)
    assert spent[TUNER] > 0 and duels > 0 and ran > 0  # each spender had a turn
    # the models' children: the budget less the seed and what the shares allowed at most
    assert written["model"] >= BUDGET - written.get("seed", 0) - sum(bound.values()), written
    assert written["model"] >= 0.75 * BUDGET, written
    assert f"{spent[TUNER]} on the offline tuner's configurations" in summary.message
