"""bench/search_efficiency.py, the search phase, on tables built here for the real rmsnorm task.

The tables stand in for the GPU measurement only: every configuration of the real rmsnorm seed
gets an Evaluation constructed here (status, per-case times for the task's timed cases), and the
searches run for real: run_evolution with the offline policy and a temporary SQLite archive,
random search, exhaustive search. Two landscapes: a smooth one (a product of one factor per
tunable) and a trap where everything up to three edits from the seed fails and the optimum lies
four edits away, so our search reaches it only by its last-resort jump, too late: the goals must
be reported as not met.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.offline.tunables import (
    Configuration,
    configuration_key,
    current_configuration,
    parse_tunables,
)
from hipevolve.problems import get_task

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import search_efficiency as se  # noqa: E402  (bench/ is a folder of scripts, not a package)
import search_landscape as sl  # noqa: E402
import search_measure as sm  # noqa: E402


def narrowed(task: TaskSpec) -> TaskSpec:
    """The real rmsnorm task with its real seed, the seed's space narrowed to the 120
    configurations of its first four tunables (LOOPS held at 1): a whole-space search of the
    720 it declares would take minutes here. Written to a temporary folder, removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="hipevolve-rmsnorm-seed-"))
    atexit.register(shutil.rmtree, folder, True)
    source = (task.seeds[0] / "kernel.hip").read_text()
    for line, narrow in (("// @tunable LOOPS: 1, 2, 4", "// @tunable LOOPS: 1"),
                         ("// @tunable ROWS: 1, 2, 4, 8", "// @tunable ROWS: 1, 2, 4"),
                         ("// @tunable UNROLL: 1, 2, 4", "// @tunable UNROLL: 1, 2")):  # fmt: skip
        assert line in source, line
        source = source.replace(line, narrow)
    (folder / "kernel.hip").write_text(source)
    shutil.copy(task.seeds[0] / "model.py", folder / "model.py")
    return task.model_copy(update={"seeds": (folder,)})


TASK = narrowed(get_task("rmsnorm"))
SEED = se.seed_candidate(TASK)
SPACE = se.space_of(SEED)
OWN = current_configuration(parse_tunables(SEED.hip_source))

FACTORS = {
    "LOOPS": {"1": 1.0},
    "BLOCK": {"64": 0.5, "128": 0.8, "256": 1.0, "512": 1.2, "1024": 1.1},
    "VEC": {"1": 0.4, "2": 0.7, "4": 1.0, "8": 1.3},
    "ROWS": {"1": 1.0, "2": 1.1, "4": 0.9},
    "UNROLL": {"1": 1.0, "2": 1.15},
}


def evaluation(speedup: float | None, status: Status = Status.ok) -> Evaluation:
    """What the verifier returns: per-case reference and kernel times for every timed case."""
    ok = status is Status.ok
    cases = tuple(
        CaseResult(case=c.name, correct=ok, time_us=100.0 / speedup if ok else None,
                   ref_time_us=100.0 if ok else None)
        for c in TASK.timed_cases
    )  # fmt: skip
    return Evaluation(status=status, task=TASK.name, backend="cuda", cases=cases,
                      message="" if ok else "max abs error 3.1 on llama3_8b_16k_tokens")  # fmt: skip


def table(score) -> se.TaskTable:
    """A complete table: score(configuration) -> speedup, or None for an incorrect kernel."""
    rows = {}
    for config in SPACE:
        speedup = score(config)
        ev = evaluation(speedup) if speedup else evaluation(None, Status.incorrect)
        rows[configuration_key(config)] = se.Measured(
            configuration=config, fitness=ev.fitness, evaluation=ev
        )
    return se.TaskTable(task=TASK.name, seed_hash=SEED.source_hash, space=len(SPACE), rows=rows)


def smooth(config: Configuration) -> float:
    return math.prod(FACTORS[name][value] for name, value in config.items())


# Differs from OWN in every tunable that has a second value.
FAR = {"BLOCK": "1024", "VEC": "1", "ROWS": "4", "UNROLL": "2", "LOOPS": "1"}


def trap(config: Configuration) -> float | None:
    """The seed is fine, the optimum is four edits away, and everything else fails."""
    if config == OWN:
        return 1.0
    return 3.0 if config == FAR else None


def test_trap_optimum_differs_from_the_seed_in_every_tunable():
    assert all(FAR[name] != OWN[name] for name in OWN if name != "LOOPS")
    assert FAR in SPACE


def test_search_reports_every_budget_for_all_three_searches_on_a_smooth_table():
    report = se.search_task(TASK, table(smooth))
    assert report.space == len(SPACE) == 120
    assert report.budgets == {5: 6, 10: 12, 15: 18, 20: 24, 25: 30, 50: 60, 100: 120}
    assert report.optimum == pytest.approx(max(smooth(c) for c in SPACE))
    assert report.optimum_configuration == "BLOCK=512;LOOPS=1;ROWS=2;UNROLL=2;VEC=8"
    assert report.seed_fitness == pytest.approx(1.0) and report.not_ok == {}
    for method in se.METHODS:
        curve = report.curves[method]
        values = [curve.median[p] for p in se.BUDGETS]
        assert values == sorted(values) and values[0] > 0 and values[-1] <= 1.0
    assert report.curves["random"].median[100] == report.curves["exhaustive"].median[100] == 1.0
    assert report.curves["random"].evaluations == [120, 120, 120]
    fitness = [smooth(c) for c in SPACE]  # exhaustive search: enumeration order
    for pct, n in report.budgets.items():
        want = max(fitness[:n]) / max(fitness)
        assert report.curves["exhaustive"].median[pct] == pytest.approx(want)
    assert len(report.curves["ours"].per_seed) == 3
    # A search that climbs a separable landscape from the seed finds its top within 25%.
    assert report.goal_95_at_25 and report.curves["ours"].median[25] >= 0.95


def test_goals_are_reported_not_met_when_the_search_cannot_reach_the_optimum():
    report = se.search_task(TASK, table(trap))
    ours = report.curves["ours"]
    assert report.optimum == pytest.approx(3.0)
    assert report.optimum_configuration == configuration_key(FAR)
    # Nothing within three tunable steps of the seed verifies, so only the policy's last resort
    # (a jump anywhere in the declared space) finds the optimum, after the 95 kernels of that
    # neighbourhood: too late for the goals, but the budget is spent, not called exhausted.
    assert all(stop == "budget" for stop in ours.stops)
    assert ours.evaluations == [len(SPACE)] * 3
    assert ours.median[50] == pytest.approx(1.0 / 3.0) and ours.median[100] == pytest.approx(1.0)
    assert report.curves["random"].median[50] == pytest.approx(1.0)
    assert not report.goal_95_at_25
    assert not report.ahead_of_random and 50 in report.behind_at
    text = se.format_report([report])
    assert "NOT met" in text and "behind at" in text


def test_configurations_that_are_not_ok_count_as_zero_and_are_listed():
    report = se.search_task(TASK, table(trap), seeds=(0,))
    assert len(report.not_ok) == len(SPACE) - 2
    assert set(report.not_ok.values()) == {"incorrect"}
    assert configuration_key(OWN) not in report.not_ok
    assert f"{len(SPACE) - 2} configurations not ok" in se.format_report([report])


def test_evaluator_refuses_a_kernel_outside_the_table():
    partial = table(smooth)
    del partial.rows[configuration_key(OWN)]
    evaluator = se.TableEvaluator(TASK, partial, "t")
    with pytest.raises(KeyError, match="not in the table"):
        evaluator([SEED])


def test_table_file_round_trips_and_the_cli_searches_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(se, "get_task", lambda name: TASK)  # the narrowed seed, as measured
    saved = se.Table(backend="cuda", toolchain="cuda | nvcc sm_90", device="NVIDIA H200",
                     trials=30, suspect_speedup=10.0, tasks={TASK.name: table(trap)},
                     wall_s=600.0)  # fmt: skip
    path = tmp_path / "table.json"
    se.save_table(saved, path)
    assert se.load_table(path) == saved
    report = tmp_path / "report.json"
    se.main(["--table", str(path), "--tasks", TASK.name, "--seeds", "0", "--report", str(report)])
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "ours" in out and "random" in out and "exhaustive" in out
    assert "goal ahead of random search at every budget:" in out
    assert json.loads(report.read_text())[0]["task"] == TASK.name


def test_an_incomplete_table_is_not_searched(tmp_path, capsys):
    partial = table(smooth)
    partial.rows = dict(list(partial.rows.items())[:8])
    saved = se.Table(
        backend="cuda", toolchain="t", trials=30, suspect_speedup=10.0, tasks={TASK.name: partial}
    )
    assert se.search_table(saved, [TASK.name], (0,)) == []
    assert "8 of 120 configurations measured; not searched" in capsys.readouterr().out


def test_measure_saves_each_batch_and_a_second_run_measures_only_the_rest(tmp_path, capsys):
    # The measure phase's evaluator is the GPU pipeline in production (the gpu test below);
    # here a table's evaluator answers, and logs what it was asked.
    device = se.TableEvaluator(TASK, table(smooth), "t")
    out = tmp_path / "table.json"
    saved = se.Table(backend="cuda", toolchain="t", trials=30, suspect_speedup=10.0)
    sm.measure_task(saved, TASK, device, out, batch=3, stop_at=time.monotonic() - 1)
    assert device.order == [] and "time box reached" in capsys.readouterr().out
    sm.measure_task(saved, TASK, device, out, batch=3, limit=8)
    first = se.load_table(out).tasks[TASK.name]
    assert len(first.rows) == 8 and not first.complete and len(device.order) == 8
    resumed = se.load_table(out)
    sm.measure_task(resumed, TASK, device, out, batch=50, limit=None)
    whole = se.load_table(out).tasks[TASK.name]
    assert whole.complete and len(device.order) == len(set(device.order)) == len(SPACE)
    assert all(r.fitness == pytest.approx(smooth(r.configuration)) for r in whole.rows.values())


@pytest.mark.gpu
def test_measure_phase_scores_configurations_through_the_verifier_pipeline(tmp_path, capsys):
    out = tmp_path / "table.json"
    se.main(["--measure", "--tasks", TASK.name, "--limit", "3", "--trials", "5",
             "--out", str(out)])  # fmt: skip
    measured = se.load_table(out)
    rows = measured.tasks[TASK.name].rows
    assert len(rows) == 3 and measured.device and measured.wall_s > 0
    for key, row in rows.items():
        assert row.evaluation.ok, (key, row.evaluation.status, row.evaluation.message)
        assert row.fitness == pytest.approx(row.evaluation.fitness) and row.fitness > 0
    assert "not searched" in capsys.readouterr().out


# ----------------------------------------------------------------------------- landscapes


def test_landscape_table_covers_the_declared_space_with_a_few_failures():
    landscape = sl.landscape_table(TASK)
    assert landscape.complete and landscape.space == len(SPACE)
    failed = [r for r in landscape.rows.values() if not r.evaluation.ok]
    assert 0 < len(failed) < 0.1 * len(SPACE)
    assert landscape.rows[configuration_key(OWN)].evaluation.ok
    assert sl.landscape_table(TASK) == landscape  # the same landscape every run


def test_landscape_compares_every_search_at_one_budget_and_names_a_winner():
    report = sl.compare_on_landscape(TASK, sl.landscape_table(TASK), budget=40, seeds=(0, 1))
    installed = importlib.util.find_spec("optuna") is not None
    methods = {"ours", "random"} | ({"optuna-tpe"} if installed else set())
    assert set(report.median) == methods
    assert report.missing == ([] if installed else ["optuna-tpe"])
    for method in methods:
        assert report.evaluations[method] == [40, 40], method
        curve = list(report.median[method].values())
        assert curve == sorted(curve) and 0 < curve[-1] <= 1.0
    assert report.winner in methods
    text = sl.format_landscape([report])
    assert f"best (mean of the row): {report.winner}" in text
    assert ("not installed here" in text) == (not installed)
