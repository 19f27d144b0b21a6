"""`evolve --task T --budget N`, the main job, as a user runs it: real processes, real SQLite.

Refusals that come before any evaluator (budget, unknown task, no GPU here) run the real entry
point, `python -m hipevolve`. Everything past the GPU check runs `hipevolve.app.cli.main` with the
stand-in evaluator (tests/standin.py) in a child process, since the evaluator is the only part of
the job that needs a GPU; parsing, archive, display, signals and exit codes are the real ones.
The gpu-marked test at the bottom runs the real thing end to end.
"""

from __future__ import annotations

import io
import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console
from standin import (
    TASK_NAME,
    StandInEvaluators,
    evaluated_hashes,
    logged,
    write_task_folder,
)
from typer.testing import CliRunner

from hipevolve.app.cli import app
from hipevolve.app.run_job import JobOptions, run_job
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import load_candidate
from hipevolve.problems import get_task

TESTS = Path(__file__).resolve().parent

# `evolve ARGS...` with the stand-in evaluator: argv[1] the tests folder, argv[2] the stand-in's
# log, argv[3] its delay per candidate in seconds, the rest the command line.
CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from standin import StandInEvaluators
from hipevolve.app.cli import main
log, delay = Path(sys.argv[2]), float(sys.argv[3])
sys.argv = ["evolve", *sys.argv[4:]]
main(evaluators=StandInEvaluators(log, delay))
"""


def evolve(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    """The real entry point."""
    return subprocess.run(
        [sys.executable, "-m", "hipevolve", *map(str, args)],
        capture_output=True, text=True, timeout=120, cwd=cwd,
    )  # fmt: skip


def standin_argv(log: Path, *args: str | Path, delay_s: float = 0.0) -> list[str]:
    return [sys.executable, "-c", CHILD, str(TESTS), str(log), str(delay_s), *map(str, args)]


def evolve_standin(log: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(standin_argv(log, *args), capture_output=True, text=True, timeout=120,
                          cwd=cwd)  # fmt: skip


def one_line_error(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    line = out.stderr.strip()
    assert line.startswith("error: ") and "\n" not in line, out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    return line


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, Path]:
    """(tasks folder, archive) after a finished stand-in run of 5 evaluations (run 1)."""
    root = tmp_path_factory.mktemp("finished")
    tasks = write_task_folder(root)
    db = root / "runs.db"
    out = evolve_standin(root / "log", "--task", TASK_NAME, "--budget", "5", "--tasks-dir", tasks,
                         "--archive", db, cwd=root)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    return tasks, db


# ------------------------------------------------------------------------- refused inputs


@pytest.mark.parametrize("budget", ["0", "-3"])
def test_budget_below_one_is_refused_in_one_line_before_the_archive_is_touched(tmp_path, budget):
    not_ours = tmp_path / "notes.db"
    not_ours.write_text("my notes\n")  # an archive error would be reported had it been opened
    line = one_line_error(
        evolve("--task", "softmax", "--budget", budget, "--archive", not_ours, cwd=tmp_path)
    )
    assert f"--budget {budget}" in line and "at least one" in line
    assert files_in(tmp_path) == {"notes.db"} and not_ours.read_text() == "my notes\n"


def test_unknown_task_is_one_line_naming_the_closest_and_writes_nothing(tmp_path):
    line = one_line_error(evolve("--task", "softmx", "--budget", "5", cwd=tmp_path))
    assert "unknown task 'softmx'" in line and "softmax" in line
    assert files_in(tmp_path) == set()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("backend", [[], ["--backend", "cuda"], ["--backend", "rocm"]])
def test_without_a_gpu_the_search_is_one_line_naming_the_backends_and_doctor(tmp_path, backend):
    line = one_line_error(evolve("--task", "softmax", "--budget", "5", *backend, cwd=tmp_path))
    assert "no usable GPU here" in line
    assert "cuda: " in line and "rocm: " in line
    assert "evolve verify --backend static" in line and "evolve doctor" in line
    assert files_in(tmp_path) == set()


def test_static_backend_cannot_search_and_says_what_can(tmp_path):
    line = one_line_error(
        evolve("--task", "softmax", "--budget", "5", "--backend", "static", cwd=tmp_path)
    )
    assert "--backend static cannot search" in line and "evolve verify --backend static" in line
    assert files_in(tmp_path) == set()


def test_missing_task_option_is_one_line(tmp_path):
    line = one_line_error(evolve("--budget", "5", cwd=tmp_path))
    assert "--task is required" in line


def test_evolve_alone_prints_help_naming_the_search_and_the_commands(tmp_path):
    out = evolve(cwd=tmp_path)
    text = out.stdout + out.stderr
    for word in ("--task", "--budget", "--resume", "verify", "tasks", "doctor"):
        assert word in text
    assert files_in(tmp_path) == set()


def test_not_an_sqlite_file_is_one_line_and_left_as_it_was(tmp_path):
    tasks = write_task_folder(tmp_path)
    path = tmp_path / "notes.db"
    path.write_bytes(b"my notes, not an archive\n")
    out = evolve_standin(tmp_path / "log", "--task", TASK_NAME, "--budget", "5",
                         "--tasks-dir", tasks, "--archive", path, cwd=tmp_path)  # fmt: skip
    assert "not an SQLite file" in one_line_error(out)
    assert path.read_bytes() == b"my notes, not an archive\n"
    assert not logged(tmp_path / "log")


def test_sqlite_database_of_another_program_is_one_line_and_left_as_it_was(tmp_path):
    tasks = write_task_folder(tmp_path)
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE photos(id INTEGER PRIMARY KEY, name TEXT)")
    before = path.read_bytes()
    out = evolve_standin(tmp_path / "log", "--task", TASK_NAME, "--budget", "5",
                         "--tasks-dir", tasks, "--archive", path, cwd=tmp_path)  # fmt: skip
    assert "not a hipevolve archive" in one_line_error(out)
    assert path.read_bytes() == before


def test_corrupt_archive_is_one_line_pointing_to_recover(tmp_path, finished):
    tasks, db = finished
    path = tmp_path / "corrupt.db"
    data = bytearray(db.read_bytes())
    data[8192 : 8192 + 3 * 4096] = b"\xa5" * (3 * 4096)  # pages 3 to 5
    path.write_bytes(bytes(data))
    out = evolve_standin(tmp_path / "log", "--task", TASK_NAME, "--budget", "5",
                         "--tasks-dir", tasks, "--archive", path, cwd=tmp_path)  # fmt: skip
    line = one_line_error(out)
    assert "is corrupt" in line and ".recover" in line
    assert path.read_bytes() == bytes(data)


def test_resume_of_an_unknown_run_lists_the_runs_in_the_archive(tmp_path, finished):
    tasks, db = finished
    out = evolve_standin(tmp_path / "log", "--task", TASK_NAME, "--archive", db, "--resume", "7",
                         "--tasks-dir", tasks, cwd=tmp_path)  # fmt: skip
    line = one_line_error(out)
    assert "no run 7" in line
    assert f"run 1: {TASK_NAME}, finished, 5 evaluations" in line


def test_resume_with_another_task_names_the_runs_task(tmp_path, finished):
    tasks, db = finished
    out = evolve_standin(tmp_path / "log", "--task", "gated_delta_net_decode", "--archive", db,
                         "--resume", "1", "--tasks-dir", tasks, cwd=tmp_path)  # fmt: skip
    line = one_line_error(out)
    assert f"run 1 searched task {TASK_NAME}, not gated_delta_net_decode" in line
    assert f"--task {TASK_NAME}" in line


def test_resume_from_a_missing_archive_creates_no_file(tmp_path, finished):
    tasks, _ = finished
    path = tmp_path / "typo.db"
    out = evolve_standin(tmp_path / "log", "--task", TASK_NAME, "--archive", path, "--resume", "1",
                         "--tasks-dir", tasks, cwd=tmp_path)  # fmt: skip
    assert "no archive at" in one_line_error(out)
    assert files_in(tmp_path) == set()


def test_resume_of_a_run_a_live_process_writes_is_one_line_naming_it(tmp_path):
    tasks = write_task_folder(tmp_path)
    db = tmp_path / "live.db"
    writer = subprocess.Popen(
        standin_argv(tmp_path / "live.log", "--task", TASK_NAME, "--budget", "30",
                     "--tasks-dir", tasks, "--archive", db, delay_s=5.0),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300  # a hang guard, not a speed test: a busy machine is slow
        while not in_flight(db):  # the writer holds run 1 and is evaluating its seed
            assert writer.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        out = evolve_standin(tmp_path / "log", "--task", TASK_NAME, "--archive", db,
                             "--resume", "1", "--tasks-dir", tasks, cwd=tmp_path)  # fmt: skip
        assert f"run 1 is being written by pid {writer.pid}" in one_line_error(out)
        assert writer.poll() is None, "the refused resume disturbed the live writer"
    finally:
        writer.kill()
        writer.wait()


def in_flight(db: Path) -> int:
    """Candidates the writer of `db` is evaluating now (read without taking any lock)."""
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as conn:
            return conn.execute("SELECT count(*) FROM queue WHERE state = 'in_flight'").fetchone()[
                0
            ]
    except sqlite3.OperationalError:  # tables not created yet
        return 0


# ------------------------------------------------------------------------- a search


GENERATION_LINE = re.compile(r"^run 1 generation (\d+): (\d+)/20 evaluations, valid \d+%, ")


def test_search_prints_a_line_per_generation_and_a_summary_with_the_best_kernel(tmp_path):
    tasks = write_task_folder(tmp_path)
    db = tmp_path / "a.db"
    out = evolve_standin(tmp_path / "log", "--task", TASK_NAME, "--budget", "20",
                         "--tasks-dir", tasks, "--archive", db, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "\x1b" not in out.stdout  # no escape codes when stdout is not a terminal
    lines = out.stdout.splitlines()
    gens = [GENERATION_LINE.match(line) for line in lines]
    gens = [(int(m[1]), int(m[2])) for m in gens if m]
    with Archive.open(db) as archive:
        checkpoints = archive.events(1, "generation")
        best = archive.best(1)
        assert best is not None
        record = archive.candidate(best.candidate_id)
    assert [g for g, _ in gens] == list(range(1, len(checkpoints) + 1))
    assert gens[-1][1] == 20 and [e for _, e in gens] == sorted(e for _, e in gens)
    assert "budget spent: 20 of 20 evaluations" in lines
    assert (
        f"best: candidate {best.candidate_id}, {best.fitness:.3f}x geometric-mean speedup "
        f"(source sha256 {record.source_hash})"
    ) in lines
    for case in best.evaluation.cases:
        assert f"  case {case.case}: {case.speedup:.3f}x" in lines
    folder = tmp_path / "hipevolve_best" / db.stem / f"{TASK_NAME}-run1"
    assert load_candidate(folder).source_hash == record.source_hash
    assert f"stored: archive {db}, run 1, candidate {best.candidate_id}; files in {folder}" in (
        out.stdout
    )
    export = f"export: evolve export --task {TASK_NAME} --run 1 --archive {db} --out "
    assert any(line.startswith(export) for line in lines)
    assert not any(line.startswith("resume:") for line in lines)  # nothing to resume


def test_live_display_on_a_terminal_shows_rate_time_left_and_the_case_table(tmp_path):
    tasks = write_task_folder(tmp_path)
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    options = JobOptions(task=TASK_NAME, budget=12, archive=tmp_path / "a.db", tasks_dirs=(tasks,))
    outcome = run_job(options, StandInEvaluators(tmp_path / "log"), console, console)
    assert outcome.exit_code == 0 and outcome.best is not None
    text = screen.getvalue()
    assert "evaluations/min" in text and "left" in text and "12/12 evaluations" in text
    assert "speedup" in text and f"{outcome.best.fitness:.3f}x geometric mean" in text


def test_first_ctrl_c_finishes_the_batch_and_the_printed_command_completes_the_run(tmp_path):
    tasks = write_task_folder(tmp_path)
    db = tmp_path / "stop.db"
    log = tmp_path / "first.log"
    proc = subprocess.Popen(
        standin_argv(log, "--task", TASK_NAME, "--budget", "30", "--tasks-dir", tasks,
                     "--archive", db, delay_s=0.2),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    # Batches are the seed, then 4 children a generation; `evolve` plans with lag 1, so
    # generations 1 and 2 (both from the seed's islands) evaluate side by side: with 3 done,
    # each has children to go when Ctrl-C lands.
    deadline = time.monotonic() + 300  # a hang guard, not a speed test: a busy machine is slow
    while len(logged(log)) < 3:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the search made no progress"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert "stopping: finishing the evaluations in flight" in stderr
    first = logged(log)
    assert len(first) == 9  # the seed and both generations in flight, whole
    with Archive.open(db) as archive:
        assert archive.count_evaluations(1) == 9
        assert archive.queued(1) == archive.queued(1, "in_flight") == []
        assert archive.run(1).status == "interrupted"
    resume = [line for line in stdout.splitlines() if line.startswith("resume: ")]
    assert len(resume) == 1, stdout
    argv = shlex.split(resume[0].removeprefix("resume: "))
    assert argv[:7] == ["evolve", "--task", TASK_NAME, "--archive", str(db), "--resume", "1"]

    second = tmp_path / "second.log"
    result = CliRunner().invoke(app, argv[1:], obj=StandInEvaluators(second))
    assert result.exit_code == 0, result.output
    assert "budget spent: 30 of 30 evaluations" in result.output
    everything = first + logged(second)
    assert len(everything) == len(set(everything)) == 30  # nothing evaluated twice
    # And the same search as one run without the interruption.
    whole = tmp_path / "whole.db"
    result = CliRunner().invoke(
        app, ["--task", TASK_NAME, "--budget", "30", "--tasks-dir", str(tasks), "--archive",
              str(whole)], obj=StandInEvaluators(tmp_path / "whole.log"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert evaluated_hashes(db) == evaluated_hashes(whole)


def test_second_ctrl_c_aborts_at_once_and_resume_evaluates_the_dropped_batch(tmp_path):
    tasks = write_task_folder(tmp_path)
    db = tmp_path / "abort.db"
    log = tmp_path / "first.log"
    proc = subprocess.Popen(
        standin_argv(log, "--task", TASK_NAME, "--budget", "30", "--tasks-dir", tasks,
                     "--archive", db, delay_s=2.0),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    deadline = time.monotonic() + 300  # a hang guard, not a speed test: a busy machine is slow
    while in_flight(db) < 8:  # the seed is done, generations 1 and 2 (lag 1) are out
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the search made no progress"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.2)
    started = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    # Not waiting for the batch is proved below by the evaluations still in flight (a waited-for
    # batch would have finished them); a wall-clock bound here failed on a loaded machine, where
    # the exit alone took seconds. This one only guards against a hang.
    assert time.monotonic() - started < 60, "the second Ctrl-C did not end the process"
    assert proc.returncode == 130, stdout + stderr
    assert "aborted: the evaluations in flight were dropped" in stdout
    first = logged(log)
    with Archive.open(db) as archive:
        dropped_ids = archive.queued(1, "in_flight")
        assert len(dropped_ids) == 8 - (len(first) - 1)
        assert dropped_ids, "nothing was left in flight: the second Ctrl-C waited for the batch"
        assert archive.run(1).status == "interrupted"
    argv = shlex.split(next(ln for ln in stdout.splitlines() if ln.startswith("resume: "))[8:])
    second = tmp_path / "second.log"
    result = CliRunner().invoke(app, argv[1:], obj=StandInEvaluators(second))
    assert result.exit_code == 0, result.output
    everything = first + logged(second)
    assert len(everything) == len(set(everything)) == 30
    with Archive.open(db) as archive:
        dropped = [archive.candidate(c).source_hash for c in dropped_ids]
    # The dropped generations went first: recorded right after what the first session
    # recorded, in candidate order.
    assert evaluated_hashes(db)[len(first) : len(first) + len(dropped)] == dropped


# ------------------------------------------------------------------------- the GPU


@pytest.mark.gpu
def test_short_search_on_the_gpu_prints_a_best_speedup(tmp_path):
    if not get_task("softmax").seeds:
        pytest.skip("softmax has no seed kernels yet (problems/softmax/seeds/)")
    db = tmp_path / "gpu.db"
    out = subprocess.run(
        [sys.executable, "-m", "hipevolve", "--task", "softmax", "--budget", "8", "--archive",
         str(db)],
        capture_output=True, text=True, timeout=540, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    match = re.search(r"^best: candidate \d+, (\d+\.\d+)x geometric-mean speedup", out.stdout,
                      re.MULTILINE)  # fmt: skip
    assert match, out.stdout
    assert float(match[1]) > 0
    with Archive.open(db) as archive:
        assert archive.count_evaluations(1) <= 8
    assert (tmp_path / "hipevolve_best" / db.stem / "softmax-run1" / "kernel.hip").is_file()


def test_two_archives_in_one_folder_keep_their_best_kernels_apart(tmp_path):
    tasks = write_task_folder(tmp_path)
    written = {}
    for name, budget in (("a.db", "1"), ("b.db", "12")):  # the seed alone; a better child
        out = evolve_standin(tmp_path / f"log-{name}", "--task", TASK_NAME, "--budget", budget,
                             "--tasks-dir", tasks, "--archive", tmp_path / name, cwd=tmp_path)
        assert out.returncode == 0, out.stdout + out.stderr
        with Archive.open(tmp_path / name) as archive:
            best = archive.best(1)
            assert best is not None
            written[name] = archive.candidate(best.candidate_id).source_hash
    assert written["a.db"] != written["b.db"]
    for name, source_hash in written.items():
        folder = tmp_path / "hipevolve_best" / Path(name).stem / f"{TASK_NAME}-run1"
        assert load_candidate(folder).source_hash == source_hash  # neither replaced the other
