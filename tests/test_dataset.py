"""`evolve export --dataset`: one JSONL record per evaluation, a JSON schema and its documentation.

The runs are real stand-in searches in a real SQLite archive (tests/standin.py), including the
stand-in's incorrect corner (BLOCK=512, UNROLL=8), so failed records are in the data too.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import typer
from standin import TASK_NAME, StandIn, write_task_folder
from typer.testing import CliRunner

from hipevolve.app.export_commands import register
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.lineage import lineage_graph
from hipevolve.archive.store import Archive
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import StaticFacts
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import run_evolution
from hipevolve.export.dataset import CaseRecord, DatasetRecord, ParentRef, export_dataset
from hipevolve.problems import load_task_folder

BUDGET = 40


def search(root: Path, db: Path, seed: int) -> None:
    task = load_task_folder(write_task_folder(root) / TASK_NAME, "user")
    with Archive.open(db) as archive:
        run_evolution(task, archive, EvolutionSettings(), StandIn(root / f"log{seed}"),
                      first=first_candidates(task), budget=BUDGET, seed=seed)  # fmt: skip


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """An archive with two runs of the stand-in task (the second reuses the first's results)."""
    root = tmp_path_factory.mktemp("dataset")
    db = root / "runs.db"
    search(root, db, seed=1)
    search(root, db, seed=2)
    return db


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def scored(db: Path, run: int) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT count(*) FROM candidates WHERE run = ? AND evaluation_id IS NOT NULL", [run]
        ).fetchone()[0]


def test_every_evaluated_candidate_is_one_record_valid_against_the_written_schema(
    two_runs, tmp_path
):
    jsonschema = pytest.importorskip("jsonschema")
    done = export_dataset(two_runs, tmp_path / "data")
    records = lines(tmp_path / "data" / "evaluations.jsonl")
    assert len(records) == done.records == scored(two_runs, 1) + scored(two_runs, 2)
    assert done.runs == (1, 2) and sum(done.statuses.values()) == done.records
    schema = json.loads((tmp_path / "data" / "schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for record in records:
        validator.validate(record)
        DatasetRecord.model_validate(record)
    # One candidate appears once per run; the runs come in order.
    keys = [(r["run"], r["candidate_id"]) for r in records]
    assert len(set(keys)) == len(keys) and keys == sorted(keys, key=lambda k: k[0])


def test_records_carry_sources_lineage_speedups_and_failures(two_runs, tmp_path):
    export_dataset(two_runs, tmp_path / "data", runs=[1])
    records = {r["candidate_id"]: r for r in lines(tmp_path / "data" / "evaluations.jsonl")}
    with Archive.open(two_runs) as archive:
        graph = lineage_graph(archive, 1)
        for cid, record in records.items():
            candidate = archive.candidate(cid).candidate
            assert record["hip_source"] == candidate.hip_source
            assert record["python_source"] == candidate.python_source
            evaluation = archive.evaluation_of(cid)
            assert record["status"] == evaluation.status.value
            assert record["fitness"] == pytest.approx(evaluation.fitness)
            parents = {(p["candidate_id"], p["kind"]) for p in record["parents"]}
            assert parents == {(p, graph.edges[p, cid]["kind"]) for p in graph.predecessors(cid)}
            descent = {p for p, kind in parents if kind != "inspiration"}
            if descent:  # the fittest code-carrying parent
                best = max(graph.nodes[p]["fitness"] for p in descent)
                assert record["parent"] in descent
                assert graph.nodes[record["parent"]]["fitness"] == best
            else:
                assert record["parent"] is None
    seeds = [r for r in records.values() if r["agent"] == "seed"]
    assert seeds and all(r["parent"] is None and r["generation"] == 0 for r in seeds)
    children = [r for r in records.values() if r["generation"] > 0]
    assert children and all(r["parent"] is not None for r in children)
    ok = [r for r in records.values() if r["correct"]]
    for r in ok:  # the stand-in's two cases: geometric mean = fitness, a = fitness * 1.1
        speedups = {c["case"]: c["speedup"] for c in r["cases"]}
        assert speedups["a"] == pytest.approx(r["fitness"] * 1.1)
        assert speedups["b"] == pytest.approx(r["fitness"] / 1.1)
    wrong = [r for r in records.values() if r["status"] == "incorrect"]
    assert wrong, "the search was expected to reach the stand-in's incorrect corner"
    for r in wrong:
        assert not r["correct"] and r["fitness"] == 0.0 and r["message"]
        assert r["cases"][0]["message"] == "max abs error 3.1"


def test_an_evaluation_reused_from_another_run_is_marked_cached(two_runs, tmp_path):
    export_dataset(two_runs, tmp_path / "data", runs=[2])
    records = lines(tmp_path / "data" / "evaluations.jsonl")
    assert {r["run"] for r in records} == {2}
    cached = [r for r in records if r["cached"]]
    assert cached, "run 2 shares its seed kernel with run 1, so at least that result is reused"
    with Archive.open(two_runs) as archive:
        for r in cached:
            first = archive.db.execute(
                "SELECT candidate FROM evaluations WHERE id = ?", [r["evaluation_id"]]
            ).fetchone()[0]
            assert archive.candidate(first).run == 1
            assert archive.candidate(first).source_hash == r["source_hash"]


def test_dataset_doc_documents_every_field_and_the_counts(two_runs, tmp_path):
    done = export_dataset(two_runs, tmp_path / "data", runs=[1])
    doc = (tmp_path / "data" / "DATASET.md").read_text()
    for model in (DatasetRecord, CaseRecord, ParentRef, StaticFacts):
        for name in model.model_fields:
            assert f"| `{name}` |" in doc, (model.__name__, name)
    assert f"{done.records} records" in doc and "{{" not in doc
    assert f"{done.statuses['ok']} ok" in doc


def test_unknown_run_lists_the_runs_and_writes_nothing(two_runs, tmp_path):
    app = typer.Typer()
    register(app)
    out = tmp_path / "data"
    result = CliRunner().invoke(app, ["export", "--dataset", str(out), "--run", "1", "--run", "9",
                                      "--archive", str(two_runs)])  # fmt: skip
    assert isinstance(result.exception, UserError)
    assert "no run 9" in result.exception.line()
    assert f"runs: 1 ({TASK_NAME}, finished" in result.exception.line()
    assert f"2 ({TASK_NAME}, finished" in result.exception.line()
    assert not out.exists()


def test_non_empty_output_is_refused_without_force(two_runs, tmp_path):
    out = tmp_path / "data"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(UserError, match="not empty"):
        export_dataset(two_runs, out)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    export_dataset(two_runs, out, force=True)
    assert (out / "keep.txt").exists() and (out / "evaluations.jsonl").is_file()


def test_a_run_with_no_evaluation_is_refused(tmp_path):
    task = load_task_folder(write_task_folder(tmp_path) / TASK_NAME, "user")
    db = tmp_path / "empty.db"
    with Archive.open(db) as archive:
        archive.finish_run(archive.start_run(task, {}, seed=0, budget=1))
    with pytest.raises(UserError, match="recorded no evaluation; nothing was written"):
        export_dataset(db, tmp_path / "data")
    assert not (tmp_path / "data").exists()
