"""bench/main_job.py reads a run's figures from its archive: when the first evaluation came, how
many were recorded and copied, and how the run's baseline was timed."""

from __future__ import annotations

import datetime
from pathlib import Path

from bench_module import load_bench

from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import run_evolution
from tests.standin import make_task
from tests.test_fitness import SEED_IS_BEST, NoisyDevice

main_job = load_bench("main_job")


def test_the_summary_times_the_first_evaluation_from_the_commands_start(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    started = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=30)
    with Archive.open(tmp_path / "run.db") as archive:
        run_evolution(task, archive, EvolutionSettings(islands=2), NoisyDevice(SEED_IS_BEST, 0),
                      first=first_candidates(task), budget=8, seed=0)  # fmt: skip
    lines = main_job.summary(tmp_path / "run.db", started)
    first = float(lines[0].split("first evaluation ")[1].split(" s")[0])
    assert 30 <= first < 120, lines
    assert lines[1].startswith("evaluations recorded 8 "), lines
    assert any(line.startswith("baseline: trials {") for line in lines), lines
