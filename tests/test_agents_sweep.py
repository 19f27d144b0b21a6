"""The offline tunable sweep on each new model-written elite (evolution/sweep.py): when a child
a model wrote becomes its island's best and declares @tunables, the offline tuner proposes
configurations of it in the following generations, within the budget. Against the loopback
model server of bench/llm_loop.py (real litellm client, graph, policy and run loop; its mutator
moves one tunable of the parent) and its stand-in evaluator."""

from __future__ import annotations

from collections import Counter

from bench_module import load_bench

from hipevolve.agents.llm.ensemble import Ensemble, ModelSettings
from hipevolve.agents.policy import AgentPolicy
from hipevolve.agents.state import AgentLimits
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.evolution.islands import EvolutionSettings, Island, best
from hipevolve.evolution.offline.tunables import parse_tunables
from hipevolve.evolution.run import run_evolution
from hipevolve.evolution.sweep import AGENT
from hipevolve.problems import get_task

bench = load_bench("llm_loop")
BUDGET = 18


def test_the_tuner_sweeps_each_new_model_written_island_best_within_the_budget(tmp_path):
    task = get_task("softmax")
    server = bench.Server(scale=0.01)
    httpd = server.serve()
    models = ModelSettings.for_model("openai/bench", max_retries=0, timeout_s=60,
                                     api_base=f"http://127.0.0.1:{httpd.server_port}/v1")  # fmt: skip
    policy = AgentPolicy(Ensemble(models), AgentLimits(sweep_configurations=3))
    try:
        with Archive.open(tmp_path / "a.db") as archive:
            summary = run_evolution(
                task, archive, EvolutionSettings(islands=2, proposals_per_island=2, lag=1),
                bench.SlotStandIn(task.name, 2, 0.05, bench.Busy()),
                first=first_candidates(task), budget=BUDGET, seed=0, policy=policy)  # fmt: skip
            rows = archive.db.execute(
                "SELECT c.id, c.agent, c.model, c.evaluation_id, l.parent FROM candidates c "
                "LEFT JOIN lineage l ON l.child = c.id AND l.kind = 'mutation' "
                "WHERE c.run = ?", [summary.run]).fetchall()  # fmt: skip
            elites = {e.candidate_id for e in archive.elites(summary.run)}
            checkpoints = archive.events(summary.run, "generation")
    finally:
        httpd.shutdown()
    by_id = {r[0]: r for r in rows}
    swept = [r for r in rows if r[1] == AGENT]
    assert swept, "no configuration of a new model-written elite was proposed"
    islands = [Island.model_validate(i) for c in checkpoints for i in c.data["islands"]]
    bests = {top.candidate_id for top in map(best, islands) if top is not None}
    for _, _, _, evaluation, parent in swept:
        assert evaluation is not None  # evaluated, on the run's slots
        assert by_id[parent][2] == "openai/bench"  # its parent a model wrote ...
        assert parent in bests  # ... and was its island's best
        assert parse_tunables(archive_source(tmp_path, parent))  # ... and declares tunables
    assert max(Counter(r[4] for r in swept).values()) <= 3  # agents.sweep_configurations
    assert summary.progress.evaluations <= BUDGET
    assert elites  # the run kept its elites


def archive_source(tmp_path, candidate_id: int) -> str:
    with Archive.open(tmp_path / "a.db") as archive:
        return archive.candidate(candidate_id).candidate.hip_source or ""
