"""The SQLite archive: round trips, dedupe, idempotent evaluations, resume, migration, lineage.

Real SQLite files in tmp_path. Process faults (SIGKILL, a second writer, disk full, corrupt and
foreign files) are in test_archive_faults.py.
"""

from __future__ import annotations

import random
import sqlite3

import networkx as nx
import pytest

from hipevolve.archive import schema
from hipevolve.archive.lineage import ancestors_of_best, diffs_along, lineage_graph
from hipevolve.archive.store import Archive, EvaluationCounts, evaluation_key
from hipevolve.core.candidate import Candidate
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import CaseResult, Evaluation, StaticFacts, Status

MODEL = "from hipevolve.runtime import kernels\n\nclass ModelNew:\n    pass\n"


def native(body: str, name: str = "c") -> Candidate:
    return Candidate(
        format="native",
        hip_source=f'extern "C" __global__ void k() {{\n{body}\n}}\n',
        python_source=MODEL,
        name=name,
    )


def scored(speedup: float, status: Status = Status.ok) -> Evaluation:
    return Evaluation(
        status=status,
        task="softmax",
        backend="cuda",
        cases=(
            CaseResult(case="small", correct=True, time_us=10.0, ref_time_us=10.0 * speedup),
            CaseResult(case="large", correct=True, time_us=100.0, ref_time_us=100.0 * speedup),
        ),
        static=(StaticFacts(kernel="k", target="gfx942", vgprs=32, global_loads={"128": 2}),),
        message="fine",
        flags=("note",),
        seconds={"compile": 1.5},
    )


@pytest.fixture
def archive(tmp_path):
    with Archive.open(tmp_path / "a.db") as a:
        yield a


def test_candidate_and_evaluation_round_trip_through_a_reopened_archive(tmp_path):
    kb = Candidate(
        format="kernelbench", hip_source=None, python_source="class ModelNew:\n  x=1\n", name="kb"
    )
    with Archive.open(tmp_path / "a.db") as a:
        run = a.start_run("softmax", {"islands": 4, "budget": 20}, seed=7, budget=20)
        cid = a.add_candidate(
            run,
            native("int x = 1;"),
            agent="translator",
            model="offline",
            prompt_hash="p1",
            island=2,
            generation=3,
        )
        kid = a.add_candidate(run, kb)
        a.record_evaluation(cid, scored(2.0), "{}", "nvcc 13")
    with Archive.open(tmp_path / "a.db", create=False) as a:
        rec = a.candidate(cid)
        assert rec.candidate == native("int x = 1;")
        assert (rec.agent, rec.model, rec.prompt_hash, rec.island, rec.generation) == (
            "translator",
            "offline",
            "p1",
            2,
            3,
        )
        assert a.candidate(kid).candidate == kb
        assert a.evaluation_of(cid) == scored(2.0)
        assert a.evaluation_of(kid) is None
        info = a.runs()[0]
        assert (info.task, info.settings, info.seed, info.budget) == (
            "softmax",
            {"islands": 4, "budget": 20},
            7,
            20,
        )


def test_duplicate_source_in_a_run_returns_the_existing_id_and_adds_no_lineage(archive):
    run = archive.start_run("softmax", {}, 0, None)
    parent = archive.add_candidate(run, native("int a;"))
    first = archive.add_candidate(run, native("int b;"), parents=[parent])
    # Comments and spacing do not make a new candidate.
    again = archive.add_candidate(run, native("int   b;  // same"), parents=[first])
    assert again == first
    assert set(lineage_graph(archive, run).edges) == {(parent, first)}
    other_run = archive.start_run("softmax", {}, 1, None)
    assert archive.add_candidate(other_run, native("int b;")) != first


def test_evaluation_with_the_same_key_is_stored_once_and_the_stored_one_returned(archive):
    run = archive.start_run("softmax", {}, 0, None)
    cid = archive.add_candidate(run, native("int a;"))
    assert archive.record_evaluation(cid, scored(2.0), '{"task":"softmax"}', "nvcc") == scored(2.0)
    # A retry after a crash brings a new measurement: the stored one wins, nothing is added.
    assert archive.record_evaluation(cid, scored(3.0), '{"task":"softmax"}', "nvcc") == scored(2.0)
    assert archive.count_evaluations(run) == 1
    key = evaluation_key(archive.candidate(cid).source_hash, '{"task":"softmax"}', "nvcc")
    assert archive.evaluated(key) == scored(2.0)
    assert archive.evaluated(evaluation_key("x", "{}", "nvcc")) is None
    # Another toolchain is another evaluation.
    archive.record_evaluation(cid, scored(3.0), '{"task":"softmax"}', "hipcc")
    assert archive.count_evaluations(run) == 2
    assert archive.evaluation_of(cid) == scored(3.0)


def test_cache_hit_from_another_run_scores_the_candidate_but_costs_that_run_nothing(archive):
    first = archive.start_run("softmax", {}, 0, None)
    archive.record_evaluation(archive.add_candidate(first, native("int a;")), scored(2.0), "s", "t")
    second = archive.start_run("softmax", {}, 1, None)
    cid = archive.add_candidate(second, native("int a;"))
    assert archive.record_evaluation(cid, scored(5.0), "s", "t") == scored(2.0)
    assert archive.count_evaluations(second) == 0
    assert archive.best(second).candidate_id == cid
    assert archive.best(second).fitness == pytest.approx(2.0)


def test_best_and_top_rank_only_ok_candidates_by_fitness(archive):
    run = archive.start_run("softmax", {}, 0, None)
    ids = {}
    for name, speedup, status in [
        ("slow", 1.5, Status.ok),
        ("fast", 4.0, Status.ok),
        ("wrong", 9.0, Status.incorrect),
        ("sus", 50.0, Status.suspect),
        ("mid", 2.5, Status.ok),
    ]:
        ids[name] = archive.add_candidate(run, native(f"int {name};"))
        archive.record_evaluation(ids[name], scored(speedup, status), "s", "t")
    archive.add_candidate(run, native("int never_evaluated;"))
    assert [s.candidate_id for s in archive.top(run, 10)] == [ids["fast"], ids["mid"], ids["slow"]]
    assert archive.best(run).candidate_id == ids["fast"]
    assert archive.best(run).fitness == pytest.approx(4.0)
    assert archive.best(archive.start_run("softmax", {}, 1, None)) is None


def test_source_hashes_before_a_generation_are_the_runs_earlier_candidates_only(archive):
    run = archive.start_run("softmax", {}, 0, None)
    hashes = {}
    for name, generation in [("g0", 0), ("g1", 1), ("g2", 2)]:
        cid = archive.add_candidate(run, native(f"int {name};"), generation=generation)
        hashes[name] = archive.candidate(cid).source_hash
    other = archive.start_run("softmax", {}, 1, None)
    archive.add_candidate(other, native("int elsewhere;"), generation=0)
    assert archive.source_hashes_before(run, 0) == frozenset()
    assert archive.source_hashes_before(run, 2) == {hashes["g0"], hashes["g1"]}
    assert archive.source_hashes_before(run, 9) == set(hashes.values())


def test_evaluation_counts_count_the_runs_scored_candidates_cache_hits_included(archive):
    first = archive.start_run("softmax", {}, 0, None)
    archive.record_evaluation(archive.add_candidate(first, native("int a;")), scored(2.0), "s", "t")
    run = archive.start_run("softmax", {}, 1, None)
    assert archive.evaluation_counts(run) == EvaluationCounts(evaluated=0, ok=0)
    for name, status in [("a", Status.ok), ("b", Status.incorrect), ("c", Status.ok)]:
        cid = archive.add_candidate(run, native(f"int {name};"))
        archive.record_evaluation(cid, scored(2.0, status), "s", "t")  # "a": another run's
    archive.add_candidate(run, native("int never_evaluated;"))
    assert archive.evaluation_counts(run) == EvaluationCounts(evaluated=3, ok=2)
    assert archive.count_evaluations(run) == 2  # the cache hit cost this run nothing


def test_recording_an_evaluation_marks_the_queue_row_done(archive):
    run = archive.start_run("softmax", {}, 0, None)
    a, b = (archive.add_candidate(run, native(f"int {n};")) for n in "ab")
    archive.enqueue(a)
    archive.enqueue(b)
    archive.mark_in_flight(a)
    assert (archive.queued(run), archive.queued(run, "in_flight")) == ([b], [a])
    archive.record_evaluation(a, scored(1.0), "s", "t")
    assert archive.queued(run, "done") == [a]
    assert archive.queued(run, "in_flight") == []


def test_resume_requeues_in_flight_and_loses_nothing_completed(tmp_path):
    path = tmp_path / "a.db"
    with Archive.open(path) as a:
        run = a.start_run("softmax", {}, 0, None)
        ids = [a.add_candidate(run, native(f"int v{i};")) for i in range(5)]
        for cid in ids:
            a.enqueue(cid)
        for cid in ids[:2]:
            a.mark_in_flight(cid)
            a.record_evaluation(cid, scored(1.0 + cid), "s", "t")
        a.mark_in_flight(ids[2])
        a.mark_in_flight(ids[3])
        # Closed without finish_run: the process stopped mid-run.
    with Archive.open(path) as a:
        assert a.runs()[0].status == "interrupted"
        resumed = a.resume(run)
        assert resumed.run.status == "running"
        assert resumed.requeued == (ids[2], ids[3])
        assert resumed.queued == (ids[2], ids[3], ids[4])
        assert a.queued(run, "done") == ids[:2]
        assert a.count_evaluations(run) == 2
        assert a.best(run).candidate_id == ids[1]
        assert [e.kind for e in a.events(run)] == ["resumed"]


def test_finish_run_records_the_end_and_frees_the_run(tmp_path):
    path = tmp_path / "a.db"
    with Archive.open(path) as a:
        run = a.start_run("softmax", {}, 0, None)
        a.finish_run(run)
        assert a.run(run).status == "finished"
        assert a.run(run).finished is not None
        with pytest.raises(UserError, match=f"run {run} is not open for writing"):
            a.add_candidate(run, native("int a;"))
    with Archive.open(path) as other:
        assert other.resume(run).run.status == "running"
        with pytest.raises(UserError, match=f"no run {run + 1} in "):
            other.resume(run + 1)


def test_a_run_held_by_a_live_archive_refuses_a_second_writer_in_the_same_process(tmp_path):
    path = tmp_path / "a.db"
    holder = Archive.open(path)
    run = holder.start_run("softmax", {}, 0, None)
    with Archive.open(path) as second:
        with pytest.raises(UserError) as e:
            second.resume(run)
        assert e.value.line().startswith(f"run {run} is being written by pid ")
        with pytest.raises(UserError, match=f"run {run} is being written by pid "):
            second.add_candidate(run, native("int a;"))
        holder.close()
        second.resume(run)
        second.add_candidate(run, native("int a;"))


def test_elites_replace_their_cell_and_random_elite_is_reproducible_for_a_seed(archive):
    run = archive.start_run("softmax", {}, 0, None)
    ids = [archive.add_candidate(run, native(f"int e{i};")) for i in range(6)]
    for i, cid in enumerate(ids[:5]):
        archive.set_elite(run, island=i % 2, cell=f"occ{i}", candidate_id=cid, fitness=float(i))
    archive.set_elite(run, island=0, cell="occ0", candidate_id=ids[5], fitness=9.0)
    island0 = archive.elites(run, 0)
    assert [(e.cell, e.candidate_id, e.fitness) for e in island0] == [
        ("occ0", ids[5], 9.0),
        ("occ2", ids[2], 2.0),
        ("occ4", ids[4], 4.0),
    ]
    assert len(archive.elites(run)) == 5
    draws = [archive.random_elite(run, 0, random.Random(3)).candidate_id for _ in range(3)]
    assert len(set(draws)) == 1
    many = {archive.random_elite(run, 0, random.Random(s)).candidate_id for s in range(40)}
    assert many == {e.candidate_id for e in island0}
    assert archive.random_elite(run, 7, random.Random(0)) is None


def test_llm_usage_sums_the_runs_calls_and_events_round_trip(archive):
    run = archive.start_run("softmax", {}, 0, None)
    other = archive.start_run("softmax", {}, 1, None)
    archive.record_llm_call(run, "mutator", "openai/gpt", "p1", 1000, 200, 0.01, 2.5)
    archive.record_llm_call(run, "repairer", "openai/gpt", "p2", 500, 100, 0.005, 1.0)
    archive.record_llm_call(other, "mutator", "openai/gpt", "p3", 7, 7, 7.0, 7.0)
    usage = archive.llm_usage(run)
    assert (usage.calls, usage.tokens_in, usage.tokens_out) == (2, 1500, 300)
    assert usage.cost_usd == pytest.approx(0.015)
    archive.log_event(run, "migration", {"from": 0, "to": 1, "ids": [1, 2]})
    archive.log_event(run, "generation", {"n": 1})
    assert [(e.kind, e.data) for e in archive.events(run)] == [
        ("migration", {"from": 0, "to": 1, "ids": [1, 2]}),
        ("generation", {"n": 1}),
    ]
    assert [e.kind for e in archive.events(run, "generation")] == ["generation"]


def _lineage_run(a: Archive) -> tuple[int, dict[str, int]]:
    run = a.start_run("softmax", {}, 0, None)
    ids: dict[str, int] = {}
    ids["root"] = a.add_candidate(run, native("int v = 0;"))
    ids["m1"] = a.add_candidate(run, native("int v = 1;"), parents=[ids["root"]], island=1)
    ids["m2"] = a.add_candidate(run, native("int v = 2;"), parents=[ids["root"]], island=2)
    ids["x"] = a.add_candidate(
        run,
        native("int v = 3;"),
        parents=[ids["m1"], ids["m2"]],
        kind="crossover",
        inspirations=[ids["root"]],
        island=1,
    )
    ids["best"] = a.add_candidate(
        run,
        native("int v = 4;\nint w = 5;"),
        parents=[ids["x"]],
        inspirations=[ids["m1"]],
        island=1,
        generation=3,
    )
    a.add_edge(ids["best"], ids["m2"], "migration")
    for name, speedup in [("root", 1.0), ("m1", 1.2), ("m2", 1.5), ("x", 2.0), ("best", 3.0)]:
        a.record_evaluation(ids[name], scored(speedup), "s", "t")
    a.add_candidate(run, native("int pending;"), parents=[ids["best"]])
    return run, ids


def test_lineage_graph_rebuilt_from_a_reopened_archive_equals_the_one_before(tmp_path):
    with Archive.open(tmp_path / "a.db") as a:
        run, ids = _lineage_run(a)
        before = lineage_graph(a, run)
    with Archive.open(tmp_path / "a.db") as a:
        a.resume(run)
        after = lineage_graph(a, run)
    assert nx.utils.graphs_equal(before, after)
    assert before.edges[ids["m1"], ids["x"]]["kind"] == "crossover"
    # root inspired x: an edge of its own kind, not a parent.
    assert before.edges[ids["root"], ids["x"]]["kind"] == "inspiration"
    assert before.nodes[ids["best"]]["fitness"] == pytest.approx(3.0)
    assert before.nodes[ids["best"]]["generation"] == 3
    assert before.nodes[max(before.nodes)]["status"] == "pending"
    assert nx.is_directed_acyclic_graph(before)


def test_ancestors_of_best_follow_the_fittest_code_carrying_parent(archive):
    run, ids = _lineage_run(archive)
    # best <- x (mutation) and <- m2 (migration): x is fitter. x <- m1, m2 (crossover): m2 is
    # fitter. Inspirations (root -> x, m1 -> best) are never ancestors.
    assert ancestors_of_best(archive, run) == [ids["root"], ids["m2"], ids["x"], ids["best"]]
    diffs = diffs_along(archive, ancestors_of_best(archive, run))
    assert len(diffs) == 3
    assert "-int v = 3;\n+int v = 4;\n+int w = 5;" in diffs[-1]
    assert diffs[0].startswith(f"--- candidate {ids['root']}\n+++ candidate {ids['m2']}")
    assert ancestors_of_best(archive, archive.start_run("softmax", {}, 1, None)) == []


# ---------------------------------------------------------------------------- migration (33)

V1_SQL = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE tasks (name TEXT PRIMARY KEY, spec TEXT);
CREATE TABLE runs (id INTEGER PRIMARY KEY, task TEXT NOT NULL REFERENCES tasks(name),
  settings TEXT NOT NULL, seed INTEGER, budget INTEGER, status TEXT NOT NULL,
  started TEXT NOT NULL, finished TEXT);
CREATE TABLE run_locks (run INTEGER PRIMARY KEY REFERENCES runs(id), pid INTEGER NOT NULL,
  host TEXT NOT NULL, proc_start TEXT, token TEXT NOT NULL, heartbeat REAL NOT NULL);
CREATE TABLE candidates (id INTEGER PRIMARY KEY, run INTEGER NOT NULL REFERENCES runs(id),
  source_hash TEXT NOT NULL, format TEXT NOT NULL, name TEXT, hip_source TEXT,
  python_source TEXT NOT NULL, agent TEXT, model TEXT, prompt_hash TEXT, island INTEGER,
  generation INTEGER, created TEXT NOT NULL);
CREATE UNIQUE INDEX idx_candidates_run_source_hash ON candidates (run, source_hash);
CREATE TABLE lineage (child INTEGER REFERENCES candidates(id),
  parent INTEGER REFERENCES candidates(id), kind TEXT, PRIMARY KEY (child, parent, kind));
CREATE TABLE evaluations (id INTEGER PRIMARY KEY,
  candidate INTEGER NOT NULL REFERENCES candidates(id), key TEXT NOT NULL,
  status TEXT NOT NULL, evaluation TEXT NOT NULL, created TEXT NOT NULL);
CREATE UNIQUE INDEX idx_evaluations_key ON evaluations (key);
CREATE TABLE queue (candidate INTEGER PRIMARY KEY REFERENCES candidates(id),
  run INTEGER NOT NULL REFERENCES runs(id), state TEXT NOT NULL, updated TEXT NOT NULL);
CREATE TABLE elites (run INTEGER REFERENCES runs(id), island INTEGER, cell TEXT,
  candidate INTEGER NOT NULL REFERENCES candidates(id), fitness REAL NOT NULL,
  PRIMARY KEY (run, island, cell));
INSERT INTO meta VALUES ('app', 'hipevolve'), ('schema_version', '1'), ('created', 'long ago');
INSERT INTO tasks VALUES ('softmax', NULL);
INSERT INTO runs VALUES (1, 'softmax', '{"islands":2}', 5, 10, 'finished', 't0', 't1');
"""


def _columns(path) -> dict[str, list[str]]:
    conn = sqlite3.connect(path)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    out = {t: sorted(r[1] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
    conn.close()
    return out


def test_a_v1_archive_migrates_to_the_current_schema_keeping_its_data(tmp_path):
    old = tmp_path / "v1.db"
    conn = sqlite3.connect(old)
    conn.executescript(V1_SQL)
    a, b = native("int a;"), native("int b;")
    for cid, c in [(1, a), (2, b)]:
        conn.execute(
            "INSERT INTO candidates VALUES (?, 1, ?, 'native', ?, ?, ?, 'mutator', 'm', 'p', 0,"
            " 1, 't')",
            [cid, c.source_hash, c.name, c.hip_source, c.python_source],
        )
    conn.execute("INSERT INTO lineage VALUES (2, 1, 'mutation')")
    conn.execute(
        "INSERT INTO evaluations VALUES (1, 2, 'k2', 'ok', ?, 't')", [scored(2.5).model_dump_json()]
    )
    conn.execute("INSERT INTO queue VALUES (2, 1, 'done', 't'), (1, 1, 'in_flight', 't')")
    conn.execute("INSERT INTO elites VALUES (1, 0, 'cell', 2, 2.5)")
    conn.commit()
    conn.close()

    with Archive.open(old) as arch:
        assert schema.stored_version(arch.db) == schema.SCHEMA_VERSION == 4
        assert arch.candidate(2).candidate == b
        assert arch.evaluated("k2") == scored(2.5)
        assert arch.best(1).candidate_id == 2  # fitness backfilled from the stored JSON
        assert arch.best(1).fitness == pytest.approx(2.5)
        assert set(lineage_graph(arch, 1).edges) == {(1, 2)}
        assert [e.candidate_id for e in arch.elites(1, 0)] == [2]
        assert arch.resume(1).requeued == (1,)
        arch.record_llm_call(1, "mutator", "m", "p", 1, 2, 0.0, 0.1)  # a v2 table, now there
        assert arch.db.execute("PRAGMA foreign_key_check").fetchall() == []
        created = dict(arch.db.execute("SELECT key, value FROM meta").fetchall())["created"]
        assert created == "long ago"
    Archive.open(tmp_path / "new.db").close()
    assert _columns(old) == _columns(tmp_path / "new.db")


def test_an_archive_from_a_newer_hipevolve_is_refused_with_one_line(tmp_path):
    path = tmp_path / "a.db"
    Archive.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(UserError, match="schema v99; this hipevolve reads up to v4") as e:
        Archive.open(path)
    assert "\n" not in e.value.line()
