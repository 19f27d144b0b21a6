"""An honest ETA (issue 47): the time left comes from how long evaluations hold a slot as they
complete (evolution/clock.py) and the slots running side by side, with the units left from the
run's one budget; before an evaluation completes it says so, and start-up never counts."""

from __future__ import annotations

import re
import time
from pathlib import Path

from standin import StandIn, make_task

from hipevolve.app.display import NO_ETA, progress_line, time_left
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.evolution.clock import EvaluationClock
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import Progress, run_evolution


class Ticks:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nothing_is_measured_before_an_evaluation_completes():
    ticks = Ticks()
    clock = EvaluationClock(2, now=ticks)
    assert clock.seconds_per_evaluation() is None
    with clock.timing(4):
        ticks.now += 30  # the first batch is out: still nothing has completed
        assert clock.seconds_per_evaluation() is None
    assert clock.seconds_per_evaluation() == 30 * 2 / 4  # two slots for 30 s, four evaluations


def test_start_up_and_idle_time_between_calls_are_not_counted():
    ticks = Ticks()
    clock = EvaluationClock(1, now=ticks)
    ticks.now += 400  # the run's baseline, the first judges
    with clock.timing(1):
        ticks.now += 12
    ticks.now += 60  # the controller plans the next generation
    with clock.timing(1):
        ticks.now += 12
    assert clock.seconds_per_evaluation() == 12


def test_calls_that_queue_on_the_same_slots_are_counted_once():
    """Two generations in flight on one GPU: their calls overlap, but the slot serves them in
    turn, so each evaluation took its own 10 s, not the 20 s each call waited."""
    ticks = Ticks()
    clock = EvaluationClock(1, now=ticks)
    first, second = clock.timing(1), clock.timing(1)
    first.__enter__()
    second.__enter__()
    ticks.now += 10
    first.__exit__(None, None, None)
    ticks.now += 10
    second.__exit__(None, None, None)
    assert clock.seconds_per_evaluation() == 10


def test_a_head_to_head_holds_one_slot_of_many():
    ticks = Ticks()
    clock = EvaluationClock(8, now=ticks)
    with clock.timing(6, width=1):  # three rounds, one after the other on one GPU
        ticks.now += 60
    assert clock.seconds_per_evaluation() == 10


def test_a_failed_call_completes_nothing():
    ticks = Ticks()
    clock = EvaluationClock(1, now=ticks)
    try:
        with clock.timing(3):
            ticks.now += 5
            raise RuntimeError("the worker died")
    except RuntimeError:
        pass
    assert clock.seconds_per_evaluation() is None


def _progress(**fields) -> Progress:
    base = dict(run=1, generation=1, evaluations=1, spent=1, left=199, budget=200, valid_rate=1.0,
                best_fitness=1.0, best_candidate=1, evaluations_per_minute=0.2)  # fmt: skip
    return Progress(**(base | fields))


def test_time_left_says_so_before_the_first_evaluation_rather_than_guess():
    waiting = _progress(evaluations=0, spent=0, left=200, seconds_per_evaluation=None)
    assert time_left(waiting) == NO_ETA == "ETA after the first evaluation"
    assert progress_line(waiting).endswith(NO_ETA)


def test_time_left_is_the_units_left_at_the_measured_seconds_over_the_slots():
    """Issue 47's flagship on one H200: start-up took 6.5 minutes, an evaluation 12 s. The rate
    since the start said 21h13m; the units left at 12 s a slot say 40 minutes, 20 on two GPUs."""
    one = _progress(seconds_per_evaluation=12.0, slots=1)
    assert time_left(one) == "about 39m48s left"
    assert time_left(one.model_copy(update={"slots": 2})) == "about 19m54s left"
    assert time_left(one.model_copy(update={"left": 0})) == "0m00s left"


class SlowStart(StandIn):
    """The stand-in with a start-up (its baseline) far longer than its evaluations."""

    def baseline(self, trials: int, target: float = 0.0) -> None:
        time.sleep(3.0)
        return None


def _seconds(text: str) -> int:
    minutes, seconds = re.search(r"(\d+)m(\d+)s", text).groups()
    return 60 * int(minutes) + int(seconds)


def test_the_first_eta_of_a_run_leaves_its_start_up_out(tmp_path: Path):
    seen: list[Progress] = []
    with Archive.open(tmp_path / "run.db") as archive:
        task = make_task(tmp_path)
        run_evolution(task, archive, EvolutionSettings(), SlowStart(tmp_path / "log", delay_s=0.05),
                      first=first_candidates(task), budget=10, seed=0,
                      on_progress=seen.append)  # fmt: skip
    first = seen[0]
    assert first.spent == 1 and first.left == 9  # the seed, from the run's one budget
    assert first.seconds_per_evaluation is not None and first.seconds_per_evaluation < 1.0
    # The rate since the start (one evaluation in over 3 s) would say 27 s or more.
    assert _seconds(time_left(first)) < 9
    assert seen[-1].left == 0 and time_left(seen[-1]) == "0m00s left"
