"""Fitness users can trust (DESIGN.md "Fitness", evolution/referee.py): speedups over a baseline
timed once per run, close calls decided head to head, the run's best confirmed against the seed.

The search tests run on `NoisyDevice`, a stand-in for a GPU whose numbers behave like the ones
measured in issue 33: the reference timed inside each evaluation swings up to 1.8x (a host-bound
PyTorch loop), a candidate's level moves 1.5% from one evaluation to the next and its trials
scatter 0.5% around it. The true time of every kernel is known (a table over its tunables), so
what the run crowns can be held against the truth.
"""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest

from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.core.baseline import CaseBaseline, RunBaseline
from hipevolve.core.candidate import Candidate
from hipevolve.core.config import FitnessSettings, VerifierSettings
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.core.noise import median_interval
from hipevolve.evolution.duel import compare, decide
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.offline.tunables import current_configuration, parse_tunables
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import load_task_folder
from hipevolve.verifier.evaluators import BaseEvaluator, duel_order
from hipevolve.verifier.isolate import StandbyPool
from hipevolve.verifier.pipeline import time_baseline
from tests.standin import TASK_NAME, make_task, write_task_folder

REF_US = 1000.0
CASES = ("a", "b")
# The seed (BLOCK=128, UNROLL=1, VEC=1) is the fastest kernel of this space; some others are
# within 1-2% of it (close calls), most clearly slower.
SEED_IS_BEST = {
    "BLOCK": {"32": 0.90, "64": 0.99, "128": 1.0, "256": 0.985, "512": 0.95},
    "UNROLL": {"1": 1.0, "2": 0.995, "4": 0.97, "8": 0.90},
    "VEC": {"1": 1.0, "2": 0.99, "4": 0.985},
}
# The same with one kernel 20% faster than the seed (BLOCK=256 UNROLL=2) to be found.
ONE_BETTER = {**SEED_IS_BEST, "BLOCK": {**SEED_IS_BEST["BLOCK"], "256": 1.2}}


def true_speed(candidate: Candidate, table: dict) -> float:
    config = current_configuration(parse_tunables(candidate.hip_source or ""))
    return math.prod(table[name][value] for name, value in config.items())


class NoisyDevice(BaseEvaluator):
    """A stand-in GPU with issue 33's noise (module docstring); seeded, so runs repeat."""

    settings_key = "noisy-device"
    toolchain = "stand-in"
    device = "stand-in GPU with a noisy host"

    def __init__(self, table: dict, seed: int) -> None:
        self.table, self.rng = table, random.Random(seed)

    def _trials(self, level: float, n: int = 30) -> list[float]:
        return [level * (1 + self.rng.gauss(0, 0.005)) for _ in range(n)]

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        out = []
        for candidate in candidates:
            level = 1 + self.rng.gauss(0, 0.015)  # this evaluation's judge, clocks, host
            cases = []
            for case in CASES:
                trials = self._trials(100.0 / true_speed(candidate, self.table) * level)
                median, ci = median_interval(trials)
                reference = REF_US * self.rng.uniform(1.0, 1.8)  # the host-bound reference
                cases.append(CaseResult(case=case, correct=True, time_us=median, ci=ci,
                                        ref_time_us=reference))  # fmt: skip
            out.append(Evaluation(status=Status.ok, task="noisy", backend="cuda",
                                  cases=tuple(cases)))  # fmt: skip
        return out

    def baseline(self, trials: int, target: float = 0.0) -> RunBaseline:
        cases = {}
        for case in CASES:
            median, ci = median_interval(
                [REF_US * self.rng.uniform(1.0, 1.8) for _ in range(trials)]
            )
            cases[case] = CaseBaseline(case=case, time_us=median, ci=ci, trials=trials)
        return RunBaseline(task="noisy", device=self.device, toolchain=self.toolchain, cases=cases)


def noisy_run(tmp_path: Path, table: dict, seed: int, budget: int = 60):
    task = make_task(tmp_path)
    with Archive.open(tmp_path / f"run{seed}.db") as archive:
        summary = run_evolution(task, archive, EvolutionSettings(islands=2), NoisyDevice(table, seed),
                                first=first_candidates(task), budget=budget, seed=seed)  # fmt: skip
        best = archive.best(summary.run)
        ids = archive.candidate_ids(summary.run)
        kernels = {cid: archive.candidate(cid).candidate for cid in ids}
        evaluations = {cid: archive.evaluation_of(cid) for cid in ids}
    return summary, best, kernels, kernels[min(ids)], evaluations


def test_a_noisy_reference_cannot_crown_a_slower_kernel(tmp_path):
    for seed in (0, 1, 2):
        summary, best, kernels, seed_kernel, evaluations = noisy_run(tmp_path, SEED_IS_BEST, seed)
        crowned = true_speed(kernels[best.candidate_id], SEED_IS_BEST)
        assert crowned >= 0.99, (seed, crowned, summary.confirmation)  # at most 1% slower
        assert "faster than the seed" not in summary.confirmation.replace("no confirmed", ""), (
            summary.confirmation
        )
        # The test has teeth: ranked by the reference timed inside each evaluation (the old
        # fitness), the run's top kernel is a slower one than the run crowned.
        old = max(evaluations, key=lambda cid: statistics.fmean(
            [c.ref_check_us / c.time_us for c in evaluations[cid].cases]))  # fmt: skip
        assert true_speed(kernels[old], SEED_IS_BEST) < min(crowned, 1.0), seed


def test_a_real_gain_is_found_confirmed_and_claimed_within_two_points(tmp_path):
    summary, best, kernels, seed_kernel, _ = noisy_run(tmp_path, ONE_BETTER, seed=3, budget=80)
    crowned = true_speed(kernels[best.candidate_id], ONE_BETTER)
    assert crowned >= 0.99 * ONE_BETTER["BLOCK"]["256"]  # the 20% kernel, or within 1% of it
    assert summary.confirmation.startswith("confirmed "), summary.confirmation
    claimed = float(summary.confirmation.split()[1].rstrip("%"))
    true_gain = (crowned / true_speed(seed_kernel, ONE_BETTER) - 1) * 100
    assert abs(claimed - true_gain) <= 2.0, (summary.confirmation, true_gain)
    assert summary.baseline.startswith("speedups over the reference timed once for this run")


def test_the_budget_counts_head_to_heads_and_keeps_the_confirmation_back(tmp_path):
    summary, *_ = noisy_run(tmp_path, SEED_IS_BEST, seed=4, budget=40)
    assert summary.progress.evaluations + summary.progress.head_to_head <= 40
    assert summary.progress.head_to_head > 0


def test_report_counts_the_head_to_heads_the_run_spent(tmp_path):
    """Issue 47: `evolve report` said 174 evaluations where the run said 200 of 200 (it counted
    scored candidates, not the head-to-heads' evaluations)."""
    from hipevolve.evolution.budget import RunBudget
    from hipevolve.export.report import write_report

    summary, *_ = noisy_run(tmp_path, ONE_BETTER, seed=3, budget=80)
    said = int(summary.message.split(" of 80 evaluations")[0].split()[-1])
    report = write_report(tmp_path / "run3.db", summary.run, tmp_path / "report.html")
    with Archive.open(tmp_path / "run3.db", create=False, read_only=True) as archive:
        ledger = RunBudget.from_archive(archive, summary.run)
    assert summary.progress.head_to_head > 0 and said > summary.progress.evaluations
    assert said == summary.progress.spent == ledger.spent == report.evaluations
    assert ledger.duels == summary.progress.head_to_head


# ------------------------------------------------------------------------------ the pieces


def test_median_interval_holds_the_median_and_widens_with_scatter():
    tight = [100.0 + 0.01 * i for i in range(31)]
    loose = [100.0 + 1.0 * i for i in range(31)]
    assert median_interval(tight)[0] == 100.15
    assert median_interval(tight)[1] < median_interval(loose)[1]
    assert 0.03 < median_interval(loose)[1] < 0.1


def evaluation(times: dict[str, float], ref: float = 500.0, ci: float = 0.002) -> Evaluation:
    cases = tuple(CaseResult(case=c, correct=True, time_us=t, ref_time_us=ref, ci=ci)
                  for c, t in times.items())  # fmt: skip
    return Evaluation(status=Status.ok, task="t", cases=cases)


def test_rebasing_puts_the_baseline_under_every_speedup_and_flags_a_stray_reference():
    base = RunBaseline(
        task="t",
        device="d",
        toolchain="x",
        cases={"a": CaseBaseline(case="a", time_us=400.0, ci=0.01, trials=100)},
    )
    rebased = base.rebase(evaluation({"a": 100.0}, ref=900.0))
    assert rebased.cases[0].ref_time_us == 400.0 and rebased.cases[0].ref_check_us == 900.0
    assert rebased.fitness == 4.0
    assert any(f.startswith("noise:") and "2.25x its run baseline" in f for f in rebased.flags)
    assert base.rebase(rebased) == rebased  # idempotent: the check is kept, not replaced


def test_a_gain_inside_the_noise_is_a_close_call_and_a_large_one_is_clear():
    incumbent = evaluation({"a": 100.0, "b": 200.0})
    assert compare(evaluation({"a": 98.0, "b": 196.0}), incumbent, 0.03)[0] == "close"
    assert compare(evaluation({"a": 90.0, "b": 180.0}), incumbent, 0.03)[0] == "clear"
    assert compare(evaluation({"a": 101.0, "b": 202.0}), incumbent, 0.03)[0] == "behind"


def test_a_head_to_head_tie_keeps_the_incumbent_and_a_steady_win_takes_it():
    order = ["child", "incumbent", "incumbent", "child"]
    tie = [evaluation({"a": 100.0}), evaluation({"a": 100.4}), evaluation({"a": 99.8}),
           evaluation({"a": 100.1})]  # fmt: skip
    assert decide(1, 2, order, tie, min_gain=0.01).winner == "incumbent"
    win = [evaluation({"a": 97.0}), evaluation({"a": 100.0}), evaluation({"a": 100.2}),
           evaluation({"a": 97.1})]  # fmt: skip
    outcome = decide(1, 2, order, win, min_gain=0.01)
    assert outcome.winner == "child" and 0.025 < outcome.gain < 0.035
    broken = [evaluation({"a": 50.0}), evaluation({"a": 100.0}), evaluation({"a": 100.0}),
              Evaluation(status=Status.incorrect, task="t")]  # fmt: skip
    assert decide(1, 2, order, broken, min_gain=0.01).winner == "incumbent"


def test_a_head_to_head_whose_judge_failed_in_a_round_keeps_the_incumbent():
    """On an H200 a run's files were re-copied under it: the incumbent's round was a judge
    error (reference.py not found), and the child won by default. A round the harness failed
    measured neither kernel."""
    from hipevolve.core.evaluation import JUDGE_ERROR

    order = ["child", "incumbent", "incumbent", "child"]
    judge_failed = Evaluation(status=Status.runtime_error, task="t", flags=(JUDGE_ERROR,),
                              message="judge error: FileNotFoundError: reference.py")  # fmt: skip
    rounds = [evaluation({"a": 97.0}), judge_failed, evaluation({"a": 100.2}),
              evaluation({"a": 97.1})]  # fmt: skip
    outcome = decide(1, 2, order, rounds, min_gain=0.01)
    assert outcome.winner == "incumbent" and "a judge failed in a round" in outcome.why
    crashed = judge_failed.model_copy(update={"flags": ()})  # the kernel's own crash still loses
    assert decide(1, 2, order, [rounds[0], crashed, *rounds[2:]], 0.01).winner == "child"


def test_duel_order_alternates_who_goes_first():
    a, b = "a", "b"
    assert duel_order(a, b, 3) == ["a", "b", "b", "a", "a", "b"]  # type: ignore[arg-type]


def test_a_judge_times_the_reference_alone_for_the_run_baseline(tmp_path):
    """A reference-only job in a real judge process (on the CPU): trials, median and interval
    for every timed case, and no candidate anywhere."""
    task = load_task_folder(write_task_folder(tmp_path) / TASK_NAME, "user")
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    with StandbyPool(size=1, device="cpu") as pool:
        found = time_baseline(task, settings, "cpu", pool, trials=15, device="cpu",
                              toolchain="test")  # fmt: skip
    assert isinstance(found, RunBaseline), found
    timed = [c.name for c in task.cases if c.timed and not c.globals]
    assert sorted(found.cases) == sorted(timed)
    for case in found.cases.values():
        assert case.trials == 15 and case.time_us > 0 and 0 <= case.ci < 1


def test_fitness_settings_refuse_nonsense():
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        FitnessSettings(noise_floor=-0.1)
    with pytest.raises(ValidationError):
        FitnessSettings(baseline_trials=3)


@pytest.mark.gpu
def test_a_gpu_run_measures_every_speedup_against_its_baseline_and_ends_with_a_verdict(tmp_path):
    """softmax on the GPU: the baseline is timed once and stored, every evaluation's speedups
    use it (the reference timed inside every tenth, as a check), and the run ends with the head-to-head
    against the seed or a line saying why there was none."""
    from hipevolve.problems import get_task
    from hipevolve.verifier.evaluators import pipeline_evaluator

    task = get_task("softmax")
    evaluator = pipeline_evaluator(task, VerifierSettings(cache_dir=tmp_path / "cache"), "auto")
    try:
        with Archive.open(tmp_path / "gpu.db") as archive:
            summary = run_evolution(task, archive, EvolutionSettings(islands=2), evaluator,
                                    first=first_candidates(task), budget=24, seed=0)  # fmt: skip
            stored = archive.events(summary.run, "baseline")
            evaluations = [archive.evaluation_of(c) for c in archive.candidate_ids(summary.run)]
    finally:
        evaluator.close()
    # The reference at the start, then the same reference with the strong baselines (torch.compile)
    # timed after the seeds' generation: the denominator never moves.
    first, last = (RunBaseline.model_validate(e.data) for e in (stored[0], stored[-1]))
    assert len(stored) <= 2 and first.cases == last.cases and not last.pending
    baseline = first
    assert baseline.device == evaluator.device and baseline.cases
    timed = [c for e in evaluations if e is not None and e.ok for c in e.cases if c.time_us]
    assert timed
    for case in timed:
        assert case.ref_time_us == baseline.cases[case.case].time_us
        assert case.ci is not None
    # the reference is timed inside every fitness.check_every-th evaluation only, as a check
    checked = [c for c in timed if c.ref_check_us]
    assert checked and len(checked) < len(timed)
    assert summary.baseline.startswith("speedups over the reference timed once")
    assert summary.confirmation, summary.message
    assert summary.progress.spent <= 24
