"""One budget (evolution/budget.py RunBudget): one object counts admissions, machine-code copies,
hidden-seed re-checks and head-to-heads with one formula, and the run's final line, the archive
and `evolve report` give the same count.

The run tests use tests/standin.py's InertVec: the stand-in on a target where VEC builds to the
same machine code whatever its value, so a third of the kernel's configurations are copies of
the rest (20 machine codes among 60 configurations), as AMD-only tunables are on NVIDIA. The
offline mutator's copies are screened out before they are stored (`screened_copy` events).
"""

from __future__ import annotations

import re
import sqlite3
import sys
from pathlib import Path

import pytest
from standin import InertVec, evaluated_hashes, logged, make_task, sigkill_when
from test_generation_lag import LAGGED, in_flight_generations, lagged_child, shape

from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.evolution.budget import SCREENED, TUNER, Admission, RunBudget, Shares
from hipevolve.evolution.recorder import copy_of
from hipevolve.evolution.run import run_evolution
from hipevolve.export.report import write_report
from hipevolve.export.runs import describe_runs

# ------------------------------------------------------------------------------ the ledger


def test_spent_is_new_code_less_copies_plus_rechecks_and_head_to_heads():
    budget = RunBudget(10, reserve=2)
    assert [budget.admit(h) for h in ("a", "b", "c", "a")] == [Admission.evaluate] * 3 + [
        Admission.duplicate]  # fmt: skip
    budget.copied("b")
    assert budget.recheck()
    assert budget.duel(2, generation=1)
    assert (budget.spent, budget.copies, budget.rechecks, budget.duels) == (3 - 1 + 1 + 2, 1, 1, 2)
    assert (budget.left, budget.remaining) == (5, 3)  # the reserve is left, not for the search


def test_the_reserve_is_only_for_the_final_head_to_head():
    budget = RunBudget(6, reserve=4)
    assert budget.admit("a") is Admission.evaluate and budget.admit("b") is Admission.evaluate
    assert budget.exhausted and budget.admit("c") is Admission.exhausted
    assert not budget.duel(2, generation=1)  # a search's head-to-head may not touch it
    assert not budget.recheck()
    assert budget.duel(4, generation=1, reserved=True) and budget.left == 0
    assert not budget.duel(2, generation=1, reserved=True)  # nothing left: nothing spent
    assert budget.spent == 6


def test_a_copy_gives_its_unit_back_once_and_only_for_admitted_code():
    budget = RunBudget(3)
    budget.admit("a"), budget.admit("b")
    budget.copied("b"), budget.copied("b"), budget.copied("never admitted")
    assert (budget.spent, budget.copies, budget.remaining) == (1, 1, 2)
    assert budget.admit("b") is Admission.duplicate  # a copy is still code the run has seen


def test_shares_bound_the_tuner_head_to_heads_and_rechecks_and_leave_the_rest_to_the_writers():
    budget = RunBudget(200, reserve=6)
    budget.shares = Shares(tuner=0.1, duels=0.08, rechecks=0.05)
    tuned = [budget.admit(f"t{i}", by=TUNER) for i in range(25)]
    assert tuned.count(Admission.evaluate) == 20 and budget.tuner_room == 0  # 10% of 200
    assert budget.admit("t0", by=TUNER) is Admission.duplicate  # a duplicate stays free
    budget.copied("t3")  # a copy gives its unit back to the tuner's share too
    assert budget.tuned == 19 and budget.admit("t21", by=TUNER) is Admission.evaluate
    assert [budget.duel(4, generation=1) for _ in range(3)] == [True, True, False]  # 16 - 6 reserve
    assert sum(budget.recheck() for _ in range(12)) == 10  # 5% of 200
    written = [budget.admit(f"m{i}") for i in range(200)]
    assert written.count(Admission.evaluate) == 200 - 20 - (8 + 6) - 10  # 156 for the writers
    assert budget.duel(6, generation=2, reserved=True) and budget.left == 0  # the final one


def test_a_resumed_budget_counts_what_the_tuner_spent():
    budget = RunBudget(20)
    budget.shares = Shares(tuner=0.1)
    budget.restore(admitted=[("a", 1), ("b", 1), ("c", 1)], tuned=["a", "b", "never admitted"])
    assert budget.tuned == 2 and budget.tuner_room == 0
    assert budget.admit("d", by=TUNER) is Admission.exhausted
    assert budget.admit("d") is Admission.evaluate


def _admit(allowance, hashes: list[str]) -> list[Admission]:
    return [allowance.admit(h) for h in hashes]


def test_a_replayed_generation_admits_what_it_admitted_before_whatever_the_archive_holds_after_it():
    """Generation 1 and 2 are planned from generation 0's islands (lag 1): copies found in a
    generation give their unit back from the next one on, head-to-heads of generation 1 land
    after generation 2 is admitted. A resumed run whose ledger already holds all of it (the
    archive of a run killed with generations 1 and 2 in flight) admits the same children."""
    children = {0: ["a", "b"], 1: ["c", "d", "x"], 2: ["e", "f", "g", "h"]}

    def uninterrupted() -> tuple[dict[int, list[Admission]], RunBudget]:
        budget, made = RunBudget(8), {}
        made[0] = _admit(budget.as_of(0, 0), children[0])
        budget.copied("b")  # found when generation 0 was staged
        assert budget.duel(2, generation=0)  # generation 0 landed: a head-to-head
        made[1] = _admit(budget.as_of(1, 0), children[1])
        budget.copied("d")
        made[2] = _admit(budget.as_of(2, 0), children[2])
        budget.copied("f")
        assert budget.duel(1, generation=1)  # generation 1 landed after 2 was admitted
        return made, budget

    made, whole = uninterrupted()
    # the ledger the archive gives after a kill with generations 1 and 2 staged
    resumed = RunBudget(8)
    resumed.restore(admitted=[(h, g) for g, hs in made.items() for h, a in zip(children[g], hs,
                                                                              strict=True)
                              if a is Admission.evaluate],
                    copies=["b", "d", "f"], duels=[(0, 2), (1, 1)])  # fmt: skip
    replayed = {g: _admit(resumed.as_of(g, 0), children[g]) for g in (1, 2)}
    admitted = {g: [h for h, a in zip(children[g], made[g], strict=True) if a is Admission.evaluate]
                for g in (1, 2)}  # fmt: skip
    again = {g: [h for h, a in zip(children[g], replayed[g], strict=True) if a is not Admission.exhausted]
             for g in (1, 2)}  # fmt: skip
    assert again == admitted
    assert made[2][-1] is Admission.exhausted  # the test reaches the edge of the budget
    assert resumed.spent == whole.spent


# ------------------------------------------------------------------------------ whole runs


def _inert_run(root: Path, budget: int, seed: int = 11, evaluator=None):
    path = root / "run.db"
    evaluator = evaluator or InertVec(root / "sent.log")
    with Archive.open(path) as archive:
        task = make_task(root)
        summary = run_evolution(task, archive, LAGGED, evaluator, first=first_candidates(task),
                                budget=budget, seed=seed)  # fmt: skip
    return summary, path, evaluator


def _copies(path: Path) -> dict[int, int]:
    with Archive.open(path, create=False, read_only=True) as archive:
        found = {cid: copy_of(archive.evaluation_of(cid)) for cid in archive.candidate_ids(1)}
    return {cid: original for cid, original in found.items() if original is not None}


def _screened(path: Path) -> list[tuple[int, str, str]]:
    """(generation, source hash, twin) of each child screened out as a copy, in log order."""
    with Archive.open(path, create=False, read_only=True) as archive:
        events = archive.events(1, SCREENED)
    return [(e.data["generation"], e.data["source_hash"], e.data["twin"]) for e in events]


def test_a_machine_code_copy_costs_no_unit_and_the_budget_buys_distinct_machine_code(tmp_path):
    summary, path, evaluator = _inert_run(tmp_path, budget=14)
    sent = logged(evaluator.log)
    copies, screened = _copies(path), _screened(path)
    assert summary.reason == "budget"
    assert len(sent) == len(set(sent)) == 14  # 14 units: 14 machine codes on the GPU
    assert screened, "the test needs copies"
    assert {h for _, h, _ in screened}.isdisjoint(sent)
    with Archive.open(path, create=False, read_only=True) as archive:
        assert len(archive.candidate_ids(1)) == 14 + len(copies)
    assert summary.progress.spent == 14 and summary.progress.left == 0
    assert summary.message.startswith("budget spent: 14 of 14 evaluations (")
    assert f"{len(screened)} children screened out before a unit was spent" in summary.message


def test_report_counts_the_same_units_as_the_run(tmp_path):
    summary, path, _ = _inert_run(tmp_path, budget=14)
    said = int(re.search(r"(\d+) of 14 evaluations", summary.message).group(1))
    done = write_report(path, 1, tmp_path / "report.html")
    with Archive.open(path, create=False, read_only=True) as archive:
        ledger = RunBudget.from_archive(archive, 1)
        runs = describe_runs(archive)
    assert said == summary.progress.spent == ledger.spent == done.evaluations == 14
    assert ledger.limit == 14 and ledger.copies == len(_copies(path))
    assert f"{said} evaluations" in runs
    page = done.out.read_text()
    assert f"<b>{said}</b><span>evaluations</span>" in page
    assert f"evaluations: {said} of the budget of 14" in page


def _copy_in_flight(db: Path) -> bool:
    """Two generations in flight and a child of one of them screened out as a copy: the resumed
    run replays them, builds the same children and finds the same copies."""
    flying = in_flight_generations(db)
    if len(flying) != 2:
        return False
    with sqlite3.connect(db) as conn:
        screened = {
            g for (g,) in conn.execute(
                "SELECT json_extract(data, '$.generation') FROM events WHERE kind = ?", [SCREENED]
            )
        }  # fmt: skip
    return bool(screened & flying)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_a_resumed_run_counts_copies_exactly_as_the_uninterrupted_run(tmp_path):
    budget = 14
    proc = lagged_child(tmp_path, budget, "InertVec")
    db = tmp_path / "run.db"
    sigkill_when(proc, lambda: db.exists() and _copy_in_flight(db), within_s=60)
    recorded = set(evaluated_hashes(db))

    log = tmp_path / "resume.log"
    with Archive.open(db) as archive:
        task = make_task(tmp_path)
        resumed = run_evolution(task, archive, LAGGED, InertVec(log), first=first_candidates(task),
                                budget=budget, seed=11, run_id=1)  # fmt: skip
    assert not recorded & set(logged(log)), "an evaluation completed before the kill was redone"
    whole = tmp_path / "whole"
    whole.mkdir()
    uninterrupted, whole_db, _ = _inert_run(whole, budget=budget)
    assert shape(db) == shape(whole_db)
    assert evaluated_hashes(db) == evaluated_hashes(whole_db)
    assert _copies(db) == _copies(whole_db)
    assert _screened(db) == _screened(whole_db)  # the same copies, each logged once
    assert resumed.progress.spent == uninterrupted.progress.spent == budget
    with Archive.open(db, create=False, read_only=True) as archive:
        assert len(archive.events(1, "machine_copy")) == len(_copies(db))  # each found once


def test_every_generation_sends_a_full_batch_of_new_machine_code_while_the_space_has_it(tmp_path):
    """A third of the configurations are copies, yet every generation before the budget's last
    sends one new machine code per proposal: copies are screened out and their proposals made
    again, so the GPU is not left waiting on a generation of copies."""
    summary, path, evaluator = _inert_run(tmp_path, budget=18)
    per_generation = LAGGED.islands * LAGGED.proposals_per_island
    with Archive.open(path, create=False, read_only=True) as archive:
        stored = [archive.candidate(cid) for cid in archive.candidate_ids(1)]
    by_generation: dict[int, list[str]] = {}
    for record in stored:
        by_generation.setdefault(record.generation, []).append(record.candidate.source_hash)
    sent = logged(evaluator.log)
    last = max(by_generation)
    assert _screened(path), "the test needs copies"
    assert not _copies(path)
    for generation, hashes in by_generation.items():
        assert set(hashes) <= set(sent)  # every stored child ran: none was a copy
        if 0 < generation < last:
            assert len(hashes) == per_generation, (generation, len(hashes))
    assert summary.reason == "budget" and len(sent) == len(set(sent)) == 18


def test_a_screened_child_copies_new_code_screened_earlier_in_its_generation_never_itself(
    tmp_path,
):
    """Recorder.screen across rounds of one generation: a child whose machine code an earlier
    round's child already has (not yet sent) is a copy of it; a child is never its own copy."""
    from hipevolve.core.candidate import load_candidate
    from hipevolve.evolution.islands import EvolutionSettings
    from hipevolve.evolution.offline.tunables import with_values
    from hipevolve.evolution.recorder import Recorder

    task = make_task(tmp_path)
    seed = load_candidate(task.seeds[0])
    other_vec = seed.model_copy(
        update={"hip_source": with_values(seed.hip_source or "", {"VEC": "2"})}
    )
    with Archive.open(tmp_path / "run.db") as archive:
        run = archive.start_run(task, EvolutionSettings(), 0, 10)
        recorder = Recorder(archive, run, InertVec(tmp_path / "sent.log"))
        built: dict[str, str] = {}
        assert recorder.screen([seed], built) == [None]
        assert recorder.screen([other_vec], built) == [seed.source_hash]
        assert recorder.screen([seed], built) == [None]
