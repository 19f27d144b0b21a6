"""Generations in flight (EvolutionSettings.lag, evolution/run.py) against a real SQLite archive.

With lag 1, generation g is planned from the islands after generation g-2, so it evaluates
while generation g-1 finishes. What must hold: the evaluations do overlap; the run is the same
whatever order they finish in; the budget holds; the search still finds the optimum and stops
on an exhausted space; a run stopped or killed mid-flight resumes into the run an
uninterrupted search makes. The evaluator is the stand-in of tests/standin.py with a delay per
candidate drawn from its source hash, so two runs finish their evaluations in different orders.
"""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import threading
import time
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
from hipevolve.archive.store import Archive
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import Progress, run_evolution
from hipevolve.problems import load_task_folder

TESTS = Path(__file__).resolve().parent
LAGGED = EvolutionSettings(lag=1)


class Jittered(StandIn):
    """The stand-in, sleeping up to `most_s` per candidate (a function of `salt` and the source
    hash), and recording when each call ran."""

    def __init__(self, log: Path, salt: str, most_s: float = 0.02) -> None:
        super().__init__(log)
        self.salt, self.most_s = salt, most_s
        self.calls: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def __call__(self, candidates):  # noqa: ANN001, ANN204
        began = time.monotonic()
        for c in candidates:
            digest = hashlib.sha256(f"{self.salt}:{c.source_hash}".encode()).digest()
            time.sleep(self.most_s * digest[0] / 255)
        results = super().__call__(candidates)
        with self._lock:
            self.calls.append((began, time.monotonic()))
        return results


def lagged_search(root: Path, name: str, budget: int, evaluator=None, seed: int = 7, **kwargs):
    path = root / f"{name}.db"
    evaluator = evaluator or Jittered(root / f"{name}.log", salt=name)
    with Archive.open(path) as archive:
        task = make_task(root)
        summary = run_evolution(task, archive, LAGGED, evaluator, first=first_candidates(task),
                                budget=budget, seed=seed, **kwargs)  # fmt: skip
    return summary, path, evaluator


def shape(path: Path, run: int = 1) -> dict:
    """What a run made, ids aside: each candidate's hash, generation, island, parents and
    status, and each checkpoint's elites (island, cell, candidate hash, fitness)."""
    with sqlite3.connect(path) as conn:
        hashes = dict(conn.execute("SELECT id, source_hash FROM candidates WHERE run = ?", [run]))
        rows = conn.execute(
            "SELECT c.id, c.generation, c.island, e.status FROM candidates c"
            " LEFT JOIN evaluations e ON e.id = c.evaluation_id WHERE c.run = ? ORDER BY c.id",
            [run],
        ).fetchall()
        parents = conn.execute("SELECT child, parent FROM lineage").fetchall()
    with Archive.open(path) as archive:
        checkpoints = [
            (
                event.data["generation"],
                sorted(
                    (island["id"], str(elite["cell"]), elite["source_hash"], elite["fitness"])
                    for island in event.data["islands"]
                    for elite in island["grid"]
                ),
            )  # fmt: skip
            for event in archive.events(run, "generation")
        ]
    return {
        "candidates": [
            (
                hashes[cid],
                generation,
                island,
                status,
                sorted(hashes[p] for c, p in parents if c == cid),
            )  # fmt: skip
            for cid, generation, island, status in rows
        ],
        "checkpoints": checkpoints,
    }


def test_lagged_generations_evaluate_while_the_one_before_finishes(tmp_path):
    # Evaluations up to 0.1 s each (a GPU's take seconds): longer than writing a generation,
    # whose tunable sampler (Optuna's TPE) takes up to a few hundred ms on a loaded 2-core host.
    slow = Jittered(tmp_path / "a.log", salt="a", most_s=0.1)
    _, _, evaluator = lagged_search(tmp_path, "a", budget=24, evaluator=slow)
    calls = sorted(evaluator.calls)
    overlaps = sum(b0 < a1 for (_, a1), (b0, _) in zip(calls, calls[1:], strict=False))
    assert overlaps >= 3, calls
    # Without the lag, each generation waits for the one before.
    plain = tmp_path / "plain"
    plain.mkdir()
    evaluator = Jittered(plain / "log", salt="a")
    with Archive.open(plain / "run.db") as archive:
        task = make_task(plain)
        run_evolution(task, archive, EvolutionSettings(), evaluator, first=first_candidates(task),
                      budget=24, seed=7)  # fmt: skip
    calls = sorted(evaluator.calls)
    assert not any(b0 < a1 for (_, a1), (b0, _) in zip(calls, calls[1:], strict=False))


def test_a_lagged_run_is_the_same_whatever_order_its_evaluations_finish_in(tmp_path):
    first = lagged_search(tmp_path, "a", budget=30)[1]
    second = lagged_search(tmp_path, "b", budget=30)[1]  # other delays: another finishing order
    assert shape(first) == shape(second)
    assert evaluated_hashes(first) == evaluated_hashes(second)
    other_seed = lagged_search(tmp_path, "c", budget=30, seed=8)[1]
    assert evaluated_hashes(first) != evaluated_hashes(other_seed)


def test_lag_changes_which_islands_a_generation_is_planned_from(tmp_path):
    lagged = lagged_search(tmp_path, "lagged", budget=30)[1]
    plain = tmp_path / "plain.db"
    with Archive.open(plain) as archive:
        task = make_task(tmp_path)
        run_evolution(task, archive, EvolutionSettings(), StandIn(tmp_path / "plain.log"),
                      first=first_candidates(task), budget=30, seed=7)  # fmt: skip
    # Generations 0 and 1 are planned from the same islands either way; later ones are not.
    early = [c for c in shape(lagged)["candidates"] if c[1] <= 1]
    assert early == [c for c in shape(plain)["candidates"] if c[1] <= 1]
    assert shape(lagged) != shape(plain)


@pytest.mark.parametrize("seed", range(4))
def test_a_lagged_search_keeps_the_budget_and_reaches_the_known_optimum(tmp_path, seed):
    progress: list[Progress] = []
    summary, path, evaluator = lagged_search(tmp_path, "a", budget=40, seed=seed,
                                             on_progress=progress.append)  # fmt: skip
    assert summary.reason == "budget" and summary.progress.evaluations == 40
    assert all(p.evaluations <= 40 for p in progress)
    bests = [p.best_fitness for p in progress]
    assert bests == sorted(bests)
    assert summary.progress.best_fitness == pytest.approx(OPTIMUM)
    sent = logged(evaluator.log)
    assert len(sent) == len(set(sent)) == 40
    with Archive.open(path) as archive:
        assert archive.queued(1) == archive.queued(1, "in_flight") == []
        generations = [e.data["generation"] for e in archive.events(1, "generation")]
    assert generations == list(range(len(generations)))  # checkpointed once each, in order


def test_a_lagged_search_of_an_exhausted_space_evaluates_all_of_it_and_says_so(tmp_path):
    # The GDN decode seed's space is 96 kernels (test_run_loop.py): a lagged plan that finds
    # nothing new is made again from the latest islands before the search stops.
    task = load_task_folder(GDN_DECODE, "builtin")
    with Archive.open(tmp_path / "gdn.db") as archive:
        summary = run_evolution(task, archive, LAGGED, Jittered(tmp_path / "gdn.log", "g"),
                                first=first_candidates(task), budget=150, seed=1)  # fmt: skip
    assert summary.reason == "exhausted" and summary.progress.evaluations == 96
    assert summary.progress.best_fitness == pytest.approx(1.3 * 1.1 * 1.05)


def test_stopping_finishes_the_generations_in_flight_and_the_run_resumes(tmp_path):
    progress: list[Progress] = []
    summary, path, evaluator = lagged_search(
        tmp_path, "stop", budget=30, on_progress=progress.append,
        should_stop=lambda: len(progress) >= 3,
    )  # fmt: skip
    assert summary.status == "interrupted" and summary.reason == "stopped"
    with Archive.open(path) as archive:
        assert archive.queued(summary.run) == archive.queued(summary.run, "in_flight") == []
        # Both generations in flight at the stop were finished and checkpointed.
        assert len(archive.events(summary.run, "generation")) == len(progress) == 4
        task = make_task(tmp_path)
        resumed = run_evolution(task, archive, LAGGED, evaluator, first=first_candidates(task),
                                budget=30, seed=7, run_id=summary.run)  # fmt: skip
        assert resumed.reason == "budget" and archive.count_evaluations(summary.run) == 30
    sent = logged(evaluator.log)
    assert len(sent) == len(set(sent)) == 30
    whole = lagged_search(tmp_path, "whole", budget=30)[1]
    assert shape(path) == shape(whole)
    assert evaluated_hashes(path) == evaluated_hashes(whole)


CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import standin
from standin import make_task
from hipevolve.archive.store import Archive
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.app.run_job import first_candidates
from hipevolve.evolution.run import run_evolution

root = Path(sys.argv[2])
evaluator = getattr(standin, sys.argv[4])(root / "child.log", delay_s=0.1)
with Archive.open(root / "run.db") as archive:
    task = make_task(root)
    run_evolution(task, archive, EvolutionSettings(lag=1), evaluator,
                  first=first_candidates(task), budget=int(sys.argv[3]), seed=11)
"""


def lagged_child(root: Path, budget: int, evaluator: str = "StandIn") -> subprocess.Popen:
    """A lagged search (seed 11) in a child process writing root/run.db, for a test to kill;
    `evaluator`: a stand-in of tests/standin.py, 0.1 s a candidate."""
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(TESTS), str(root), str(budget), evaluator],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def in_flight_generations(path: Path) -> set[int]:
    if not path.exists():
        return set()
    with sqlite3.connect(path) as conn:
        try:
            rows = conn.execute(
                "SELECT DISTINCT c.generation FROM queue q JOIN candidates c ON c.id = q.candidate"
                " WHERE q.state = 'in_flight'"
            ).fetchall()
        except sqlite3.OperationalError:  # the child has not made its tables yet
            return set()
    return {r[0] for r in rows}


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_sigkill_with_generations_in_flight_then_resume_makes_the_uninterrupted_run(tmp_path):
    budget = 24
    proc = lagged_child(tmp_path, budget)
    db = tmp_path / "run.db"
    # One seed, then generations of 4; generations 1 and 2 are both planned from generation 0's
    # islands and evaluate side by side. Kill once later generations are recorded and two are
    # in flight.
    sigkill_when(
        proc, lambda: len(in_flight_generations(db)) == 2 and len(evaluated_hashes(db)) >= 5
    )

    recorded = set(evaluated_hashes(db))
    assert len(in_flight_generations(db)) == 2

    log = tmp_path / "resume.log"
    with Archive.open(db) as archive:
        task = make_task(tmp_path)
        summary = run_evolution(task, archive, LAGGED, StandIn(log), first=first_candidates(task),
                                budget=budget, seed=11, run_id=1)  # fmt: skip
        assert summary.reason == "budget" and archive.count_evaluations(1) == budget
    assert not recorded & set(logged(log)), "an evaluation completed before the kill was redone"
    whole = tmp_path / "whole"
    whole.mkdir()
    with Archive.open(whole / "run.db") as archive:
        task = make_task(whole)
        run_evolution(task, archive, LAGGED, StandIn(whole / "log"),
                      first=first_candidates(task), budget=budget, seed=11)  # fmt: skip
    assert shape(db) == shape(whole / "run.db")
    assert evaluated_hashes(db) == evaluated_hashes(whole / "run.db")
