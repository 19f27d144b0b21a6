"""`evolve export --out` refuses in one line, and writes nothing, when there is nothing correct to
export, the folder is not empty (without --force), the run is unknown, or the options conflict;
a missing archive is not created. Real stand-in runs over a real SQLite archive."""

from __future__ import annotations

from export_support import PACKAGE, cli, standin_run
from standin import KERNEL, MODEL, TASK_NAME, write_task_folder

from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import Evaluation, Status
from hipevolve.problems import load_task_folder


def test_run_without_a_correct_candidate_is_refused_and_nothing_is_written(tmp_path):
    task = load_task_folder(write_task_folder(tmp_path) / TASK_NAME, "user")
    db = tmp_path / "bad.db"
    with Archive.open(db) as archive:
        run = archive.start_run(task, {}, seed=0, budget=1)
        cid = archive.add_candidate(run, Candidate(format="native", hip_source=KERNEL,
                                                   python_source=MODEL, name="k"))  # fmt: skip
        wrong = Evaluation(status=Status.incorrect, task=TASK_NAME, message="wrong in case a")
        archive.record_evaluation(cid, wrong, "k", "t")
        archive.finish_run(run)
    out = tmp_path / "out"
    result = cli("export", "--task", TASK_NAME, "--run", "1", "--out", out, "--archive", db)
    assert isinstance(result.exception, UserError)
    assert "run 1 has no correct candidate" in result.exception.line()
    result = cli("export", "--task", TASK_NAME, "--out", out, "--archive", db)
    assert f"no run of task {TASK_NAME} has a correct candidate" in result.exception.line()
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_non_empty_output_is_refused_without_force_and_replaced_with_it(tmp_path):
    db = standin_run(tmp_path, budget=6)
    out = tmp_path / "kernel"
    first = cli("export", "--task", TASK_NAME, "--out", out, "--archive", db)
    assert first.exit_code == 0, first.output
    (out / "stale.txt").write_text("from an earlier export")
    again = cli("export", "--task", TASK_NAME, "--out", out, "--archive", db)
    assert isinstance(again.exception, UserError) and "not empty" in again.exception.line()
    assert (out / "stale.txt").exists()
    forced = cli("export", "--task", TASK_NAME, "--out", out, "--archive", db, "--force")
    assert forced.exit_code == 0, forced.output
    assert not (out / "stale.txt").exists() and (out / PACKAGE / "kernel.hip").is_file()
    # A folder evolve did not write keeps its other files under --force.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    forced = cli("export", "--run", "1", "--out", mine, "--archive", db, "--force")
    assert forced.exit_code == 0, forced.output
    assert (mine / "notes.txt").read_text() == "mine" and (mine / PACKAGE).is_dir()


def test_unknown_run_is_refused_with_the_list_of_runs(tmp_path):
    db = standin_run(tmp_path, budget=4)
    result = cli("export", "--task", TASK_NAME, "--run", "7", "--out", tmp_path / "o",
                 "--archive", db)  # fmt: skip
    assert isinstance(result.exception, UserError)
    assert f"no run 7 in {db}; runs: 1 ({TASK_NAME}, finished, 4 evaluations" in (
        result.exception.line()
    )
    assert not (tmp_path / "o").exists()


def test_out_and_dataset_are_exclusive_and_a_missing_archive_is_not_created(tmp_path):
    both = cli("export", "--out", tmp_path / "a", "--dataset", tmp_path / "b", "--archive",
               tmp_path / "x.db")  # fmt: skip
    assert "one of --out DIR" in both.exception.line()
    missing = cli("export", "--task", TASK_NAME, "--out", tmp_path / "a", "--archive",
                  tmp_path / "x.db")  # fmt: skip
    assert "no archive at" in missing.exception.line()
    assert not (tmp_path / "x.db").exists()


