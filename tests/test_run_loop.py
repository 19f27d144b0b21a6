"""The evolution run loop (evolution/run.py) against a real SQLite archive.

`StandIn` stands in for the GPU worker, which this machine does not have: it scores a native
candidate by its declared tunable values (a known table, so the optimum of the small space is
known), returns real Evaluation objects (ok with per-case results, or incorrect for one corner of
the space) and logs every candidate it finished. The verifier pipeline behind the production
evaluator (evaluators.pipeline_evaluator) is exercised by the gpu-marked test at the bottom.

The SIGKILL test runs the loop in a child process with a slow stand-in, kills it with -9 after a
few evaluations, and resumes in this process (FAULTS 30 and 34).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from standin import (
    GDN_DECODE,
    OPTIMUM,
    StandIn,
    evaluated_hashes,
    logged,
    make_task,
    sigkill_when,
)

from hipevolve.app.run_job import first_candidates
from hipevolve.archive.lineage import lineage_graph
from hipevolve.archive.store import Archive
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import Status
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.offline.tunables import current_configuration, parse_tunables
from hipevolve.evolution.run import Progress, run_evolution
from hipevolve.problems import load_task_folder

TESTS = Path(__file__).resolve().parent


def search(tmp_path: Path, name: str, budget: int, seed: int = 7, **kwargs):
    log = tmp_path / f"{name}.log"
    path = tmp_path / f"{name}.db"
    with Archive.open(path) as archive:
        task = make_task(tmp_path)
        summary = run_evolution(
            task,
            archive,
            EvolutionSettings(),
            StandIn(log),
            first=first_candidates(task),
            budget=budget,
            seed=seed,
            **kwargs,
        )
    return summary, path, log


# ---------------------------------------------------------------------------------- the loop


def test_budget_is_never_exceeded_and_no_candidate_is_evaluated_twice(tmp_path):
    seen: list[Progress] = []
    summary, path, log = search(tmp_path, "a", budget=23, on_progress=seen.append)
    assert summary.reason == "budget" and summary.status == "finished"
    assert all(p.evaluations <= 23 for p in seen)
    assert summary.progress.evaluations == 23
    sent = logged(log)
    assert len(sent) == 23 and len(set(sent)) == 23
    assert sorted(evaluated_hashes(path)) == sorted(sent)
    with Archive.open(path) as archive:
        assert archive.count_evaluations(1) == 23
        assert archive.queued(1) == [] and archive.queued(1, "in_flight") == []
        assert archive.run(1).status == "finished"


def test_each_session_records_the_toolchain_its_numbers_come_from(tmp_path):
    _, path, _ = search(tmp_path, "a", budget=3)
    with Archive.open(path) as archive:
        (event,) = archive.events(1, "environment")
    assert event.data == {"toolchain": "stand-in"}  # the stand-in names no device


@pytest.mark.parametrize("seed", range(6))
def test_best_fitness_never_decreases_and_reaches_the_known_optimum(tmp_path, seed):
    seen: list[Progress] = []
    summary, path, _ = search(tmp_path, "a", budget=40, seed=seed, on_progress=seen.append)
    bests = [p.best_fitness for p in seen]
    assert bests == sorted(bests)
    assert summary.progress.best_fitness == pytest.approx(OPTIMUM)
    assert summary.progress.best_speedups == pytest.approx({"a": OPTIMUM * 1.1, "b": OPTIMUM / 1.1})
    assert 0 < summary.progress.valid_rate <= 1
    with Archive.open(path) as archive:
        top = archive.best(1)
        assert top is not None and top.fitness == pytest.approx(OPTIMUM)
        assert top.candidate_id == summary.progress.best_candidate
        kernel = archive.candidate(top.candidate_id).candidate.hip_source or ""
        config = current_configuration(parse_tunables(kernel))
        assert config == {"BLOCK": "256", "UNROLL": "4", "VEC": "4"}
        # The elites table mirrors the islands' grids.
        assert max(e.fitness for e in archive.elites(1)) == pytest.approx(OPTIMUM)


def test_same_seed_evaluates_the_same_sequence_of_hashes(tmp_path):
    first = search(tmp_path, "a", budget=20, seed=3)[1]
    second = search(tmp_path, "b", budget=20, seed=3)[1]
    other = search(tmp_path, "c", budget=20, seed=4)[1]
    assert evaluated_hashes(first) == evaluated_hashes(second)
    assert evaluated_hashes(first) != evaluated_hashes(other)


def test_exhausted_space_stops_before_the_budget_and_says_so(tmp_path):
    # The GDN decode seed declares five tunables (BV: 4 values, NT_FEW: 2, NT_MANY: 3,
    # FEW_WAVES: 2, FAST_EXP: 2) and no catalogue transform applies to it: 96 kernels in all,
    # every one reachable (the policy's last resort jumps anywhere in the declared space).
    task = load_task_folder(GDN_DECODE, "builtin")
    log = tmp_path / "gdn.log"
    with Archive.open(tmp_path / "gdn.db") as archive:
        summary = run_evolution(task, archive, EvolutionSettings(), StandIn(log),
                                first=first_candidates(task), budget=150, seed=1)  # fmt: skip
    assert summary.reason == "exhausted" and summary.status == "finished"
    assert "exhausted" in summary.message
    assert len(logged(log)) == 96 == summary.progress.evaluations
    # BV = 64, NT_FEW = 128, NT_MANY = 512, FEW_WAVES = 1, FAST_EXP = 1
    assert summary.progress.best_fitness == pytest.approx(1.3 * 1.1 * 1.05)


def test_resume_refuses_another_seed(tmp_path):
    summary, path, log = search(tmp_path, "a", budget=8, should_stop=lambda: True)
    with Archive.open(path) as archive, pytest.raises(UserError, match="another seed"):
        task = make_task(tmp_path)
        run_evolution(task, archive, EvolutionSettings(), StandIn(log),
                      first=first_candidates(task), budget=8, seed=8,
                      run_id=summary.run)  # fmt: skip


# ---------------------------------------------------------------------------------- stopping


def test_should_stop_finishes_the_batch_in_flight_and_the_run_resumes(tmp_path):
    progress: list[Progress] = []
    summary, path, log = search(
        tmp_path, "stop", budget=30, on_progress=progress.append,
        should_stop=lambda: len(progress) >= 3,
    )  # fmt: skip
    assert summary.status == "interrupted" and summary.reason == "stopped"
    assert summary.resume is not None and f"run_id={summary.run}" in summary.message
    before = logged(log)
    assert len(before) == progress[-1].evaluations < 30
    with Archive.open(path) as archive:
        assert archive.run(summary.run).status == "interrupted"
        assert archive.queued(summary.run) == archive.queued(summary.run, "in_flight") == []
        task = make_task(tmp_path)
        resumed = run_evolution(task, archive, EvolutionSettings(), StandIn(log),
                                first=first_candidates(task), budget=30, seed=7,
                                run_id=summary.run)  # fmt: skip
        assert resumed.reason == "budget" and archive.count_evaluations(summary.run) == 30
    after = logged(log)
    assert len(after) == len(set(after)) == 30
    uninterrupted = search(tmp_path, "whole", budget=30)[1]
    assert evaluated_hashes(path) == evaluated_hashes(uninterrupted)


CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from test_run_loop import StandIn, make_task
from hipevolve.archive.store import Archive
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.app.run_job import first_candidates
from hipevolve.evolution.run import run_evolution

root = Path(sys.argv[2])
with Archive.open(root / "run.db") as archive:
    task = make_task(root)
    run_evolution(task, archive, EvolutionSettings(),
                  StandIn(root / "child.log", delay_s=0.1), first=first_candidates(task),
                  budget=int(sys.argv[3]), seed=11)
"""


def _nodes_and_edges(graph):
    nodes = {n: dict(graph.nodes[n]) for n in graph.nodes}
    edges = {(a, b): graph.edges[a, b]["kind"] for a, b in graph.edges}
    return nodes, edges


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sigkill_mid_run_then_resume_repeats_nothing_and_keeps_the_lineage(tmp_path):
    budget = 24
    task = make_task(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(TESTS), str(tmp_path), str(budget)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    db = tmp_path / "run.db"
    # Batches are 1 seed, then 4 children a generation. When the stand-in has finished 10, 9 are
    # recorded and the fourth batch is in the evaluator with 3 x 0.1 s to go: kill it there.
    sigkill_when(proc, lambda: len(logged(tmp_path / "child.log")) >= 10)

    recorded = set(evaluated_hashes(db))
    assert len(recorded) == 9
    with Archive.open(db) as archive:
        nodes_before, edges_before = _nodes_and_edges(lineage_graph(archive, 1))
        in_flight = archive.queued(1, "in_flight")
    assert in_flight, "the kill was meant to land while a batch was in flight"

    log = tmp_path / "resume.log"
    with Archive.open(db) as archive:
        summary = run_evolution(task, archive, EvolutionSettings(), StandIn(log),
                                first=first_candidates(task), budget=budget, seed=11,
                                run_id=1)  # fmt: skip
        assert summary.reason == "budget"
        assert archive.count_evaluations(1) == budget
        nodes_after, edges_after = _nodes_and_edges(lineage_graph(archive, 1))
        requeued = archive.events(1, "resume")[0].data["requeued"]
    assert requeued == in_flight
    hashes = evaluated_hashes(db)
    assert len(hashes) == len(set(hashes)) == budget
    assert not recorded & set(logged(log)), "an evaluation completed before the kill was redone"
    # The resumed run evaluated the in-flight candidates first.
    in_flight_hashes = hashes[len(recorded) : len(recorded) + len(in_flight)]
    with Archive.open(db) as archive:
        assert in_flight_hashes == [archive.candidate(c).source_hash for c in in_flight]
    # Lineage: what existed before the kill is a subgraph, identical where it was completed.
    assert set(edges_before.items()) <= set(edges_after.items())
    for node, attrs in nodes_before.items():
        if attrs["status"] != "pending":
            assert nodes_after[node] == attrs
        else:
            assert node in nodes_after
    # And the run is the one an uninterrupted search with the same seed makes.
    whole = tmp_path / "whole"
    whole.mkdir()
    with Archive.open(whole / "run.db") as archive:
        task = make_task(whole)
        run_evolution(task, archive, EvolutionSettings(), StandIn(whole / "log"),
                      first=first_candidates(task), budget=budget, seed=11)  # fmt: skip
        assert _nodes_and_edges(lineage_graph(archive, 1))[1] == edges_after
    assert hashes == evaluated_hashes(whole / "run.db")


# ---------------------------------------------------------------------------------- the GPU


@pytest.mark.gpu
@pytest.mark.parametrize(("lag", "budget"), [(0, 3), (1, 5)])  # lag 1: two generations at once
def test_pipeline_evaluator_runs_a_short_search_on_the_gpu(tmp_path, lag, budget):
    from hipevolve.core.config import VerifierSettings
    from hipevolve.verifier.evaluators import pipeline_evaluator

    task = load_task_folder(GDN_DECODE, "builtin")
    evaluator = pipeline_evaluator(
        task, VerifierSettings(cache_dir=tmp_path / "cache", trials=10), "auto"
    )
    with Archive.open(tmp_path / "gpu.db") as archive:
        summary = run_evolution(task, archive, EvolutionSettings(islands=2, lag=lag), evaluator,
                                first=first_candidates(task), budget=budget, seed=0)  # fmt: skip
        evaluator.close()
        assert summary.progress.spent == budget  # copies of AMD-only tunables are free
        statuses = [
            archive.evaluation_of(cid).status
            for cid in archive.candidate_ids(summary.run)
            if archive.evaluation_of(cid) is not None
        ]
    assert statuses.count(Status.ok) >= 1, statuses
    assert summary.progress.best_fitness > 0
    assert set(summary.progress.best_speedups) == {c.name for c in task.timed_cases}
    assert json.loads(evaluator.settings_key)["task"] == task.name
