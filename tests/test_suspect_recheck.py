"""What `suspect` means (issue 47): a time past a physical bound, re-checked before it is refused,
and never a reason to refuse a task's own seed kernel."""

from __future__ import annotations

from pathlib import Path

from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.core.baseline import RunBounds
from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.core.taskspec import Case
from hipevolve.evolution.generations import SEED_ADMITTED, admitted_seed
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import get_task
from hipevolve.verifier.isolate import StandbyPool
from hipevolve.verifier.pipeline import RECHECKED, Prepared, run_prepared
from tests.standin import make_task
from tests.test_fitness import SEED_IS_BEST, NoisyDevice

HEALTHY = Path(__file__).parent / "data" / "candidates" / "softmax_ok.py"


def _suspect(cases: tuple[CaseResult, ...]) -> Evaluation:
    return Evaluation(status=Status.suspect, task="t", backend="cuda", cases=cases,
                      message="c: 1.0 us beats the roofline bound 2.0 us")  # fmt: skip


def test_a_correct_seed_is_admitted_with_its_suspect_reason_as_a_flag() -> None:
    admitted = admitted_seed(_suspect((CaseResult(case="c", correct=True, time_us=1.0),)))
    assert admitted.status is Status.ok and admitted.message == ""
    assert admitted.flags == (f"{SEED_ADMITTED} c: 1.0 us beats the roofline bound 2.0 us",)


def test_a_seed_with_a_wrong_case_is_not_admitted() -> None:
    evaluation = _suspect((CaseResult(case="c", correct=False, time_us=1.0),))
    assert admitted_seed(evaluation) is evaluation


class SuspectSeed(NoisyDevice):
    """NoisyDevice that calls its first evaluation (the seed) suspect, as the GDN seed was."""

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        out = super().__call__(candidates)
        if not getattr(self, "_seen_seed", False):
            self._seen_seed = True
            out[0] = out[0].model_copy(
                update={"status": Status.suspect, "message": "qwen: speedup 203.8x above 200x"}
            )
        return out


def test_a_run_whose_seed_is_suspect_still_evolves_from_it(tmp_path: Path) -> None:
    task = make_task(tmp_path)
    with Archive.open(tmp_path / "run.db") as archive:
        summary = run_evolution(task, archive, EvolutionSettings(islands=2),
                                SuspectSeed(SEED_IS_BEST, 0), first=first_candidates(task),
                                budget=12, seed=0)  # fmt: skip
        seed = archive.evaluation_of(1)
    assert summary.reason != "no_seed", summary.message
    assert seed is not None and seed.ok
    assert any(f.startswith(SEED_ADMITTED) for f in seed.flags)


def test_a_suspect_past_a_run_bound_is_rechecked_and_admitted_with_its_flag(tmp_path: Path):
    """The whole GPU stage on the CPU: a bound no real call can meet makes the first run
    suspect; the re-check (fresh hidden seed and inputs, no margin) admits it, flagged."""
    task = get_task("softmax")
    case = Case(name="small", inputs={"rows": 64, "cols": 1024, "dtype": "float32"})
    settings = VerifierSettings(cache_dir=tmp_path / "cache", trials=5, warmup=1)
    prepared = Prepared(candidate=load_candidate(HEALTHY))
    bounds = RunBounds(fastest={"small": (1e9, "a bound no call meets")}, time_reference=False)
    told: list[dict] = []
    with StandbyPool(size=1, device="cpu") as pool:
        evaluation = run_prepared(prepared, task, settings, "cpu", pool, cases=(case,),
                                  bounds=bounds, side_by_side=told.append)  # fmt: skip
    assert evaluation.status is Status.ok, evaluation.message
    flag = next(f for f in evaluation.flags if f.startswith(RECHECKED))
    assert "faster than a bound no call meets" in flag and "fresh hidden seed" in flag
    assert evaluation.cases[0].ref_time_us is None  # the reference was not timed inside
    # softmax's strong baseline (torch.compile) timed side by side, told to the run's evaluator
    assert "over torch.compile" in flag, flag
    assert [list(t) for t in told] == [["torch.compile"]]
    assert told[0]["torch.compile"]["small"].time_us > 0


def test_a_judge_that_fails_is_run_again_on_a_fresh_judge_and_never_passes(tmp_path: Path):
    """A judge whose own code raises (its task's reference.py gone, as when a run's files were
    re-copied under it) answers a runtime_error flagged judge-error: the evaluation is run
    once more on a fresh judge, says so, and a second failure stays a runtime_error."""
    from hipevolve.core.evaluation import JUDGE_ERROR

    task = get_task("softmax").model_copy(update={"reference": tmp_path / "gone" / "ref.py"})
    case = Case(name="small", inputs={"rows": 64, "cols": 1024, "dtype": "float32"})
    settings = VerifierSettings(cache_dir=tmp_path / "cache", trials=5, warmup=1)
    with StandbyPool(size=1, device="cpu") as pool:
        evaluation = run_prepared(Prepared(candidate=load_candidate(HEALTHY)), task, settings,
                                  "cpu", pool, cases=(case,), bounds=RunBounds())  # fmt: skip
    assert evaluation.status is Status.runtime_error and JUDGE_ERROR in evaluation.flags
    assert "judge error" in evaluation.message and "ref.py" in evaluation.message
    again = [f for f in evaluation.flags if f.startswith("run again: the first judge failed")]
    assert len(again) == 1 and "ref.py" in again[0], evaluation.flags


def _run_baseline(fla_us: dict[str, float]):
    from hipevolve.core.baseline import CaseBaseline, RunBaseline

    def cases(times: dict[str, float]) -> dict[str, CaseBaseline]:
        return {c: CaseBaseline(case=c, time_us=us, ci=0.01, trials=10) for c, us in times.items()}

    return RunBaseline(task="gdn", device="H200", toolchain="t",
                       cases=cases({"short": 5000.0, "long": 36000.0, "bare": 100.0}),
                       others={"FLA chunk": cases(fla_us)})  # fmt: skip


def test_a_baseline_timed_faster_side_by_side_lowers_its_cases_bound_and_never_raises_one(
    tmp_path: Path,
):
    """The run's strong baselines are timed while the run starts, beside its compiles (FLA's
    host-bound launches on an H200: 860 us there, 360-440 us side by side): a re-check's
    faster side-by-side time is the case's bound from then on, also after the run's baseline
    is set again; a slower one changes nothing, nor does a case no baseline timed."""
    from hipevolve.core.baseline import CaseBaseline
    from hipevolve.verifier.evaluators import PipelineEvaluator

    settings = VerifierSettings(cache_dir=tmp_path, suspect_margin=3.0)
    evaluator = PipelineEvaluator(get_task("softmax"), settings, "static")
    evaluator.use_baseline(_run_baseline({"short": 860.4, "long": 2209.0}), check_every=0)
    assert evaluator.bounds().fastest["short"][0] == 860.4 / 3

    def timed(short: float, long: float) -> dict[str, dict[str, CaseBaseline]]:
        return {"FLA chunk": {c: CaseBaseline(case=c, time_us=us, ci=0.02, trials=20)
                              for c, us in {"short": short, "long": long}.items()}}  # fmt: skip

    evaluator.timed_side_by_side(timed(short=345.0, long=2500.0))
    fastest = evaluator.bounds().fastest
    assert fastest["short"] == (115.0, "3x FLA chunk's 345.0 us side by side in this run")
    assert fastest["long"][0] == 2209.0 / 3  # slower side by side: the bound stays
    assert fastest["bare"][0] == 100.0 / settings.suspect_speedup  # no strong baseline here
    evaluator.timed_side_by_side(timed(short=441.0, long=2209.0))
    assert evaluator.bounds().fastest["short"][0] == 115.0  # the lowest holds
    evaluator.use_baseline(_run_baseline({"short": 860.4, "long": 2209.0}), check_every=0)
    assert evaluator.bounds().fastest["short"][0] == 115.0  # and outlives a new run baseline


# ------------------------------------------------------------------ the run's baseline, cached


def test_a_stored_baseline_starts_the_next_run_without_timing_anything(tmp_path: Path) -> None:
    from hipevolve.core.baseline import CaseBaseline, RunBaseline
    from hipevolve.verifier import baseline_cache
    from hipevolve.verifier.evaluators import PipelineEvaluator

    task = get_task("softmax")
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    evaluator = PipelineEvaluator(task, settings, "cpu")
    key = baseline_cache.cache_key(task, settings, evaluator.device or "", evaluator.toolchain)
    stored = RunBaseline(task="softmax", device="d", toolchain="t", cases={
        "c": CaseBaseline(case="c", time_us=10.0, ci=0.01, trials=10)})  # fmt: skip
    baseline_cache.store(settings, key, stored)
    assert evaluator.baseline(100, 0.02) == stored  # read, not timed (no reference runs here)
    evaluator.close()


def test_the_cache_key_follows_the_reference_the_card_and_the_toolchain(tmp_path: Path) -> None:
    from hipevolve.verifier.baseline_cache import cache_key

    task = make_task(tmp_path)
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    key = cache_key(task, settings, "NVIDIA H200", "nvcc 13")
    assert key == cache_key(task, settings, "NVIDIA H200", "nvcc 13")
    assert key != cache_key(task, settings, "NVIDIA H100", "nvcc 13")
    assert key != cache_key(task, settings, "NVIDIA H200", "nvcc 12")
    edited = tmp_path / "edited_reference.py"
    edited.write_text(task.reference.read_text() + "\n# edited\n")
    task = task.model_copy(update={"reference": edited})
    assert key != cache_key(task, settings, "NVIDIA H200", "nvcc 13")
