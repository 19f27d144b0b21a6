"""The offline tunable sweep on each new model-written elite and on the seeds (evolution/sweep.py):
when a child a model wrote, or a seed, is its island's best and declares @tunables, the offline
tuner proposes configurations of it in the following generations, within the budget; the seeds'
configurations keep the slots busy while the first model calls are written. Against the loopback
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


def run_swept(tmp_path, scale: float = 0.01, eval_s: float = 0.05):
    """A softmax run against the loopback server; its candidates (id, agent, model, evaluation,
    parent, generation), the ids of its islands' bests and its slot spans."""
    task = get_task("softmax")
    server = bench.Server(scale=scale)
    httpd = server.serve()
    models = ModelSettings.for_model("openai/bench", max_retries=0, timeout_s=60,
                                     api_base=f"http://127.0.0.1:{httpd.server_port}/v1")  # fmt: skip
    policy = AgentPolicy(Ensemble(models), AgentLimits(sweep_configurations=3))
    busy = bench.Busy()
    try:
        with Archive.open(tmp_path / "a.db") as archive:
            summary = run_evolution(
                task, archive, EvolutionSettings(islands=2, proposals_per_island=2, lag=1),
                bench.SlotStandIn(task.name, 2, eval_s, busy),
                first=first_candidates(task), budget=BUDGET, seed=0, policy=policy)  # fmt: skip
            rows = archive.db.execute(
                "SELECT c.id, c.agent, c.model, c.evaluation_id, l.parent, c.generation "
                "FROM candidates c LEFT JOIN lineage l ON l.child = c.id AND l.kind = 'mutation' "
                "WHERE c.run = ?", [summary.run]).fetchall()  # fmt: skip
            elites = {e.candidate_id for e in archive.elites(summary.run)}
            checkpoints = archive.events(summary.run, "generation")
    finally:
        httpd.shutdown()
    islands = [Island.model_validate(i) for c in checkpoints for i in c.data["islands"]]
    bests = {top.candidate_id for top in map(best, islands) if top is not None}
    return summary, rows, bests, elites, busy


def test_the_tuner_sweeps_each_new_model_written_island_best_within_the_budget(tmp_path):
    summary, rows, bests, elites, _ = run_swept(tmp_path)
    by_id = {r[0]: r for r in rows}
    swept = [r for r in rows if r[1] == AGENT]
    assert any(by_id[r[4]][2] == "openai/bench" for r in swept), (
        "no configuration of a new model-written elite was proposed")
    for _, _, _, evaluation, parent, _ in swept:
        assert evaluation is not None  # evaluated, on the run's slots
        # its parent a model wrote, or is a seed (generation 0), not the tuner's own child ...
        assert by_id[parent][2] == "openai/bench" or by_id[parent][5] == 0
        assert parent in bests  # ... and was its island's best
        assert parse_tunables(archive_source(tmp_path, parent))  # ... and declares tunables
    assert max(Counter(r[4] for r in swept).values()) <= 3  # agents.sweep_configurations
    # what each configuration tried is its idea: the tunables it moved from its elite's
    with Archive.open(tmp_path / "a.db") as archive:
        ideas = [archive.candidate(r[0]).attempt.idea for r in swept]
    assert all(i.startswith("offline tuner (TPE over the declared @tunables) on candidate ")
               and "->" in i for i in ideas), ideas  # fmt: skip
    assert summary.progress.evaluations <= BUDGET
    assert elites  # the run kept its elites


def test_the_seeds_configurations_hold_the_slots_while_the_first_models_write(tmp_path):
    # Model calls of 0.4-2.5 s (x0.1 of bench/llm_loop.py's) and 0.3 s evaluations: the first
    # model-written child comes seconds after the seed; its configurations come before.
    _, rows, _, _, busy = run_swept(tmp_path, scale=0.1, eval_s=0.3)
    by_id = {r[0]: r for r in rows}
    seeds = {r[0] for r in rows if r[5] == 0}
    of_seeds = [r for r in rows if r[1] == AGENT and r[4] in seeds]
    assert of_seeds and all(r[3] is not None for r in of_seeds), "the seeds were not swept"
    hashes = {r[0]: archive_source_hash(tmp_path, r[0]) for r in rows}
    started = {}
    for start, _, digest in sorted(busy.spans):
        started.setdefault(digest, start)
    first_model = min(started[hashes[r[0]]] for r in rows
                      if r[2] == "openai/bench" and hashes[r[0]] in started)  # fmt: skip
    early = [r for r in of_seeds if started[hashes[r[0]]] < first_model]
    assert early, "no seed configuration was evaluated before the first model-written child"
    assert all(by_id[r[4]][5] == 0 for r in early)


def archive_source_hash(tmp_path, candidate_id: int) -> str:
    with Archive.open(tmp_path / "a.db") as archive:
        return archive.candidate(candidate_id).source_hash


def archive_source(tmp_path, candidate_id: int) -> str:
    with Archive.open(tmp_path / "a.db") as archive:
        return archive.candidate(candidate_id).candidate.hip_source or ""
