"""The archive's read-only queries for the exports and the report (archive/queries.py), on a
real SQLite file: each answers from the run asked about only, in its documented order."""

from __future__ import annotations

import pytest
from test_archive import native, scored

from hipevolve.archive.store import Archive
from hipevolve.core.evaluation import Status
from hipevolve.problems import get_task


@pytest.fixture
def two_runs(tmp_path):
    """Run 1: a seed (ok), its child (ok, cached by run 2's identical source later) and a
    failing child; run 2: a copy of run 1's child, scored from the cache."""
    with Archive.open(tmp_path / "a.db") as a:
        r1 = a.start_run("softmax", {"islands": 1}, seed=0, budget=10)
        seed = a.add_candidate(r1, native("int s;"), agent="seed", island=0, generation=0)
        a.record_evaluation(seed, scored(1.0), "key", "tc")
        child = a.add_candidate(r1, native("int c;"), parents=[seed], kind="mutation",
                                agent="mutator", model="m", island=0, generation=1)  # fmt: skip
        a.record_evaluation(child, scored(2.0), "key", "tc")
        bad = a.add_candidate(r1, native("int b;"), parents=[seed], kind="mutation",
                              agent="mutator", island=0, generation=1)  # fmt: skip
        a.record_evaluation(bad, scored(1.0, Status.incorrect), "key", "tc")
        a.record_llm_call(r1, "mutator", "m", "p", 10, 5, 0.01, 1.0)
        a.record_llm_call(r1, "mutator", "m", "p", 20, 5, 0.03, 3.0)
        a.record_llm_call(r1, "auditor", "m", "p", 1, 1, 0.0, 0.5)
        a.finish_run(r1)
        r2 = a.start_run("softmax", {"islands": 1}, seed=1, budget=10)
        copy = a.add_candidate(r2, native("int c;"), agent="seed", island=0, generation=0)
        a.record_evaluation(copy, scored(9.0), "key", "tc")  # the same key: child's result
        yield a, r1, r2, (seed, child, bad, copy)


def test_outcomes_list_the_run_s_evaluated_candidates_in_id_order(two_runs):
    a, r1, r2, (seed, child, bad, copy) = two_runs
    got = a.outcomes(r1)
    assert [o.candidate_id for o in got] == [seed, child, bad]
    assert [o.status for o in got] == ["ok", "ok", "incorrect"]
    assert got[1].fitness == pytest.approx(2.0) and got[2].fitness == 0
    assert [o.candidate_id for o in a.outcomes(r2)] == [copy]
    assert a.count_scored(r1) == 3 and a.count_scored(r2) == 1


def test_lineage_edges_carry_the_parent_s_fitness(two_runs):
    a, r1, r2, (seed, child, bad, _) = two_runs
    edges = a.lineage_edges(r1)
    assert [(e.child, e.parent, e.kind) for e in edges] == [
        (child, seed, "mutation"), (bad, seed, "mutation")]  # fmt: skip
    assert all(e.parent_fitness == pytest.approx(1.0) for e in edges)
    assert a.lineage_edges(r2) == []


def test_evaluated_records_say_which_result_came_from_the_cache(two_runs):
    a, r1, r2, (seed, child, bad, copy) = two_runs
    first = list(a.evaluated_records(r1))
    assert [r.candidate.id for r in first] == [seed, child, bad]
    assert all(r.evaluated_for == r.candidate.id for r in first)
    assert first[1].candidate.agent == "mutator" and first[1].candidate.model == "m"
    assert first[1].candidate.candidate.hip_source == native("int c;").hip_source
    (cached,) = a.evaluated_records(r2)
    assert cached.candidate.id == copy and cached.evaluated_for == child
    assert cached.evaluation.fitness == pytest.approx(2.0)


def test_llm_usage_by_role_sums_calls_per_role_and_model(two_runs):
    a, r1, r2, _ = two_runs
    rows = a.llm_usage_by_role(r1)
    assert [(r.role, r.model, r.calls) for r in rows] == [("auditor", "m", 1), ("mutator", "m", 2)]
    mutator = rows[1]
    assert (mutator.tokens_in, mutator.tokens_out) == (30, 10)
    assert mutator.cost_usd == pytest.approx(0.04) and mutator.mean_latency_s == pytest.approx(2.0)
    assert a.llm_usage_by_role(r2) == []


def test_stored_task_is_the_spec_the_run_started_with(tmp_path):
    task = get_task("softmax")
    with Archive.open(tmp_path / "a.db") as a:
        assert a.stored_task("softmax") is None
        a.start_run(task, {"islands": 1}, seed=0, budget=1)
        assert a.stored_task("softmax") == task
        assert a.stored_task("gelu") is None
