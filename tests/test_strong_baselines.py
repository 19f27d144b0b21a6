"""Strong baselines (issue 33): a task names them in task.toml, the run's reference-only judge job
times them beside the reference, and the run's final lines give the best kernel's speedup over
each with its uncertainty (hipevolve/core/baseline.py)."""

from __future__ import annotations

import pytest

from hipevolve.app.run_job import _message, first_candidates
from hipevolve.archive.store import Archive
from hipevolve.core.baseline import CaseBaseline, RunBaseline, speedup_over
from hipevolve.core.config import VerifierSettings
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import CaseResult
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import load_task_folder
from hipevolve.verifier.isolate import StandbyPool
from hipevolve.verifier.pipeline import time_baseline
from tests.standin import TASK_NAME, make_task, write_task_folder
from tests.test_fitness import CASES, SEED_IS_BEST, NoisyDevice

TWICE = """\
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x + x
"""
NOT_INSTALLED = """\
try:
    import hipevolve_no_such_library  # noqa: F401
except ImportError:
    raise ImportError("demo library not installed (pip install demo)") from None
"""
WRONG = """\
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return 3.0 * x
"""


def task_with_baselines(tmp_path, tables: str):
    folder = write_task_folder(tmp_path) / TASK_NAME
    (folder / "baselines").mkdir()
    (folder / "baselines" / "twice.py").write_text(TWICE)
    (folder / "baselines" / "missing.py").write_text(NOT_INSTALLED)
    (folder / "baselines" / "wrong.py").write_text(WRONG)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text() + tables)
    return folder


GOOD_AND_BROKEN = """
[[baselines]]
name = "x + x"
module = "baselines/twice.py"

[[baselines]]
name = "demo"
module = "baselines/missing.py"

[[baselines]]
name = "three x"
module = "baselines/wrong.py"
"""


def test_baselines_parse_with_paths_relative_to_the_task_folder(tmp_path):
    task = load_task_folder(task_with_baselines(tmp_path, GOOD_AND_BROKEN), "user")
    assert [b.name for b in task.baselines] == ["x + x", "demo", "three x"]
    assert task.baselines[0].module == tmp_path / "tasks" / TASK_NAME / "baselines" / "twice.py"
    assert task.baselines[0].kind == "module"


@pytest.mark.parametrize(("table", "says"), [
    ('[[baselines]]\nname = "a"\nkind = "magic"\n', "baselines.0.kind"),
    ('[[baselines]]\nname = "a"\n', "needs module"),
    ('[[baselines]]\nname = "a"\nkind = "torch_compile"\nmodule = "b.py"\n', "takes no module"),
    ('[[baselines]]\nname = "a"\nkind = "torch_compile"\n'
     '[[baselines]]\nname = "a"\nkind = "torch_compile"\n', "must be distinct"),
    ('[[baselines]]\nname = "reference"\nkind = "torch_compile"\n', "not 'reference'"),
])  # fmt: skip
def test_a_nonsense_baseline_table_is_refused_in_one_line(tmp_path, table, says):
    folder = task_with_baselines(tmp_path, "\n" + table)
    with pytest.raises(UserError) as refused:
        load_task_folder(folder, "user")
    message = str(refused.value)
    assert says in message and "\n" not in message, message


def test_a_judge_times_a_module_baseline_says_why_the_others_were_not_and_how_long_each_took(tmp_path):
    """A real reference-only judge job on the CPU: the good baseline is timed on every timed
    case with the reference's trials; the one whose library is missing and the one outside the
    tolerance each come back with one line why, and the run's baseline is still there."""
    task = load_task_folder(task_with_baselines(tmp_path, GOOD_AND_BROKEN), "user")
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    with StandbyPool(size=1, device="cpu") as pool:
        found = time_baseline(task, settings, "cpu", pool, trials=12, device="cpu",
                              toolchain="test")  # fmt: skip
    assert isinstance(found, RunBaseline), found
    timed = sorted(c.name for c in task.cases if c.timed)
    assert sorted(found.cases) == timed
    assert list(found.others) == ["x + x"]
    for case in found.others["x + x"].values():
        assert case.trials == 12 and case.time_us > 0 and case.ci >= 0  # a busy shared CPU
    assert sorted(found.others["x + x"]) == timed
    assert found.unavailable["demo"] == "demo library not installed (pip install demo)"
    assert found.unavailable["three x"].startswith("outside the task's tolerance on a: output 0: ")
    assert "\n" not in found.unavailable["three x"]
    # how long each held the judge (a cold FLA: minutes of Triton compiles), said in one line
    assert set(found.held_s) == {"x + x", "demo", "three x"} and found.held_s["x + x"] > 0
    line = found.strong_line()
    assert f"x + x timed on {len(timed)} cases, " in line and " s on the GPU slot" in line
    assert "demo not timed (demo library not installed (pip install demo), " in line
    assert "\n" not in line


def test_strong_baselines_take_the_slot_a_case_at_a_time_with_the_runs_evaluations_between(
    tmp_path, monkeypatch
):
    """A cold FLA held the only GPU slot for about 5 minutes in one job: now each timed case is
    a job of its own, and an evaluation queued while one runs goes before the next. A baseline
    unavailable in the first case (not installed, outside the tolerance) is not asked again."""
    from hipevolve.verifier import pipeline
    from hipevolve.verifier.evaluators import PipelineEvaluator

    asked, timing = [], pipeline.time_baseline
    monkeypatch.setattr(pipeline, "time_baseline", lambda *a, **k: asked.append(k["baselines"])
                        or timing(*a, **k))  # fmt: skip
    task = load_task_folder(task_with_baselines(tmp_path, GOOD_AND_BROKEN), "user")
    evaluator = PipelineEvaluator(task, VerifierSettings(cache_dir=tmp_path / "cache"), "cpu")
    slots, ran = evaluator._started(), []
    submit = slots.submit

    def piece_then_an_evaluation(work):
        def piece(slot):
            ran.append("piece")
            return work(slot)

        future = submit(piece)
        submit(lambda slot: ran.append("evaluation"))  # the run's, queued while the piece waits
        return future

    slots.submit = piece_then_an_evaluation
    try:
        found = evaluator.strong_baselines(trials=5)
    finally:
        evaluator.close()
    timed = sorted(c.name for c in task.cases if c.timed)
    assert len(timed) >= 2 and ran == ["piece", "evaluation"] * len(timed)
    assert isinstance(found, RunBaseline) and sorted(found.others) == ["x + x"]
    assert sorted(found.others["x + x"]) == timed and sorted(found.cases) == timed
    assert found.unavailable["demo"] == "demo library not installed (pip install demo)"
    assert found.unavailable["three x"].startswith("outside the task's tolerance on ")
    assert asked == [("x + x", "demo", "three x")] + [("x + x",)] * (len(timed) - 1)


def test_a_judge_that_ran_strong_baselines_judges_no_candidate_afterwards(tmp_path):
    """Their libraries (Triton, FLA, TileLang) and torch.compile leave caches and threads in the
    judge: it exits after answering instead of going back to the pool."""
    from dataclasses import replace

    from hipevolve.verifier.isolate import baseline_jobs, job_for_task, run_worker

    task = load_task_folder(task_with_baselines(tmp_path, GOOD_AND_BROKEN), "user")
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    job = replace(job_for_task(task, None, settings, device="cpu", seeds=(0,),
                               reference_only=True), trials=5)  # fmt: skip
    with StandbyPool(size=1, device="cpu") as pool:
        plain = run_worker(job, pool.take(), pool=pool)
        strong = run_worker(replace(job, baselines=baseline_jobs(task, settings)[:1]), pool.take(),
                            pool=pool)  # fmt: skip
    assert plain.reusable and not plain.baselines
    assert not strong.reusable and list(strong.baselines) == ["x + x"]


def test_pieces_join_as_one_job_would_have_timed_them():
    """A baseline timed on one case and outside the tolerance on the next is unavailable, as a
    single job would have left it; held times add up; the first piece's device stands."""

    def piece(case: str, others: dict, unavailable: dict, held: dict) -> RunBaseline:
        one = CaseBaseline(case=case, time_us=10.0, ci=0.01, trials=5)
        return RunBaseline(task="t", device="gpu0", toolchain="tc", cases={case: one},
                           others={n: {case: one} for n in others}, unavailable=unavailable,
                           held_s=held)  # fmt: skip

    joined = RunBaseline.joined([
        piece("a", {"fla", "flaky"}, {"qla": "not installed"}, {"fla": 60.0, "flaky": 2.0, "qla": 0.5}),
        piece("b", {"fla"}, {"flaky": "outside the task's tolerance on b"}, {"fla": 40.0, "flaky": 1.0}),
    ])  # fmt: skip
    assert sorted(joined.cases) == ["a", "b"] and sorted(joined.others) == ["fla"]
    assert sorted(joined.others["fla"]) == ["a", "b"]
    assert joined.unavailable == {"qla": "not installed",
                                  "flaky": "outside the task's tolerance on b"}  # fmt: skip
    assert joined.held_s == {"fla": 100.0, "flaky": 3.0, "qla": 0.5} and joined.pending == ()


def test_a_speedup_over_a_baseline_is_the_geometric_mean_over_shared_cases_with_its_spread():
    base = {"a": CaseBaseline(case="a", time_us=200.0, ci=0.03, trials=100),
            "b": CaseBaseline(case="b", time_us=50.0, ci=0.04, trials=100)}  # fmt: skip
    cases = (CaseResult(case="a", correct=True, time_us=100.0, ci=0.04),
             CaseResult(case="b", correct=True, time_us=100.0, ci=0.03),
             CaseResult(case="c", correct=True, time_us=1.0, ci=0.0))  # fmt: skip
    got = speedup_over("vendor", base, cases)
    assert got is not None and got.cases == 2
    assert got.speedup == pytest.approx(1.0)  # 2x on a, 0.5x on b
    assert got.uncertainty == pytest.approx(0.05 / 2**0.5)  # each case +-5%, two cases
    assert got.describe() == "1.00x over vendor (+-3.5%)"
    assert speedup_over("vendor", base, (cases[2],)) is None


class WithStrongBaselines(NoisyDevice):
    """NoisyDevice whose run baseline also timed a vendor library twice as fast as the seed,
    and could not time FLA."""

    def baseline(self, trials: int, target: float = 0.0) -> RunBaseline:
        base = super().baseline(trials, target)
        vendor = {c: CaseBaseline(case=c, time_us=50.0, ci=0.01, trials=trials) for c in CASES}
        return base.model_copy(update={"others": {"vendor": vendor},
                                       "unavailable": {"FLA": "FLA not installed"}})  # fmt: skip


def test_the_final_lines_give_the_best_kernels_speedup_over_each_strong_baseline(tmp_path):
    task = make_task(tmp_path)
    with Archive.open(tmp_path / "run.db") as archive:
        summary = run_evolution(task, archive, EvolutionSettings(islands=2),
                                WithStrongBaselines(SEED_IS_BEST, 0), first=first_candidates(task),
                                budget=24, seed=0)  # fmt: skip
        stored = archive.events(summary.run, "baseline")
    assert stored and stored[-1].data["unavailable"] == {"FLA": "FLA not installed"}
    assert "strong baselines timed once beside it: vendor" in summary.baseline
    line = summary.against
    assert line.startswith("the run's best (candidate "), line
    assert " over reference (+-" in line and "FLA not timed (FLA not installed)" in line
    vendor = float(line.split("x over vendor")[0].split()[-1])
    assert 0.45 < vendor < 0.55, line  # the seed's ~100 us against the vendor's 50 us
    assert line in _message(summary).splitlines()


class StrongLater(NoisyDevice):
    """NoisyDevice whose run baseline times the reference alone (the vendor pending), and the
    vendor when asked for it (RunBaseline.pending, Evaluator.strong_baselines)."""

    def __init__(self, table: dict, seed: int) -> None:
        super().__init__(table, seed)
        self.asked: list[str] = []
        self.bounds: list[dict] = []

    def baseline(self, trials: int, target: float = 0.0) -> RunBaseline:
        self.asked.append("reference")
        return super().baseline(trials, target).model_copy(update={"pending": ("vendor",)})

    def strong_baselines(self, trials: int, target: float = 0.0) -> RunBaseline:
        self.asked.append("strong")
        vendor = {c: CaseBaseline(case=c, time_us=50.0, ci=0.01, trials=trials) for c in CASES}
        # its own reference timing, which must not replace the run's denominator
        ref = {c: CaseBaseline(case=c, time_us=1e6, ci=0.01, trials=trials) for c in CASES}
        return RunBaseline(task="noisy", device=self.device, toolchain=self.toolchain,
                           cases=ref, others={"vendor": vendor})  # fmt: skip

    def use_baseline(self, baseline: RunBaseline, check_every: int) -> None:
        self.bounds.append(baseline.bounds(3.0, 10.0, frozenset()))


def test_strong_baselines_are_timed_after_the_seeds_and_never_move_the_denominator(tmp_path):
    task = make_task(tmp_path)
    evaluator = StrongLater(SEED_IS_BEST, 0)
    with Archive.open(tmp_path / "run.db") as archive:
        summary = run_evolution(task, archive, EvolutionSettings(islands=2), evaluator,
                                first=first_candidates(task), budget=24, seed=0)  # fmt: skip
        stored = archive.events(summary.run, "baseline")
    assert evaluator.asked == ["reference", "strong"]
    first, last = (RunBaseline.model_validate(e.data) for e in (stored[0], stored[-1]))
    assert first.pending == ("vendor",) and not first.others
    assert last.pending == () and sorted(last.others) == ["vendor"]
    assert last.cases == first.cases  # the reference the run started with stays its denominator
    # the bounds the evaluator was given: the reference's until the vendor came, then the vendor's
    assert all("the reference's" in why for _, why in evaluator.bounds[0].values())
    assert all(why.startswith("3x vendor's 50.0 us") for _, why in evaluator.bounds[-1].values())
    assert "x over vendor" in summary.against


def test_a_cases_bound_is_its_strongest_baseline_over_the_margin_else_the_reference_without_roofline():
    ref = {c: CaseBaseline(case=c, time_us=1000.0, ci=0.01, trials=10) for c in ("a", "b", "c")}
    fast = {"a": CaseBaseline(case="a", time_us=90.0, ci=0.01, trials=10)}
    slow = {"a": CaseBaseline(case="a", time_us=120.0, ci=0.01, trials=10)}
    base = RunBaseline(task="t", device="d", toolchain="x", cases=ref,
                       others={"FLA": slow, "FlashQLA": fast})  # fmt: skip
    bounds = base.bounds(3.0, 10.0, roofline_cases=frozenset({"b"}))
    assert bounds["a"] == (30.0, "3x FlashQLA's 90.0 us in this run")
    assert "b" not in bounds  # the roofline decides there
    assert bounds["c"][0] == 100.0 and "no roofline and no strong baseline" in bounds["c"][1]


def test_an_export_carries_the_best_kernels_speedups_over_the_runs_baselines(tmp_path):
    from hipevolve.export.manifest import ExportManifest
    from hipevolve.export.package import export_package

    task = make_task(tmp_path)
    with Archive.open(tmp_path / "run.db") as archive:
        run_evolution(task, archive, EvolutionSettings(islands=2),
                      WithStrongBaselines(SEED_IS_BEST, 1), first=first_candidates(task),
                      budget=24, seed=1)  # fmt: skip
    out = tmp_path / "out"
    export_package(tmp_path / "run.db", task.name, out, tasks_dirs=[tmp_path])
    manifest = ExportManifest.model_validate_json(
        next(out.glob("*/manifest.json")).read_text())  # fmt: skip
    assert [s.against for s in manifest.baselines] == ["reference", "vendor"]
    assert 0.45 < manifest.baselines[1].speedup < 0.55
    assert manifest.baselines_unavailable == {"FLA": "FLA not installed"}
    readme = (out / "README.md").read_text()
    assert f"- {manifest.baselines[1].describe()}" in readme
    assert "- FLA: not timed (FLA not installed)" in readme

    from hipevolve.export.dataset import DatasetRecord, export_dataset

    export_dataset(tmp_path / "run.db", tmp_path / "data")
    lines = (tmp_path / "data" / "evaluations.jsonl").read_text().splitlines()
    records = [DatasetRecord.model_validate_json(line) for line in lines]
    assert all([s.against for s in r.baselines] == ["reference", "vendor"]
               for r in records if r.correct)  # fmt: skip
    assert any(r.correct for r in records)
    assert all(not r.baselines for r in records if not r.correct)


# ------------------------------------------------------------------------------ on a GPU


def gpu_run_baseline(tmp_path, name: str) -> RunBaseline:
    from hipevolve.problems import get_task

    task = get_task(name)
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    with StandbyPool(size=1, device="cuda") as pool:
        found = time_baseline(task, settings, "cuda", pool, trials=30, device="gpu",
                              toolchain="test")  # fmt: skip
    assert isinstance(found, RunBaseline), found
    return found


@pytest.mark.gpu
def test_gemm_bf16s_torch_matmul_baseline_is_timed_beside_its_reference_on_a_gpu(tmp_path):
    """The reference is torch.matmul too: the two rows, timed in one job by one clock, agree."""
    found = gpu_run_baseline(tmp_path, "gemm_bf16")
    assert not found.unavailable, found.unavailable
    matmul = found.others["torch.matmul"]
    assert sorted(matmul) == sorted(found.cases)
    for case, base in found.cases.items():
        assert 0.9 < matmul[case].time_us / base.time_us < 1.1, (case, matmul[case], base)


@pytest.mark.gpu
def test_softmaxs_torch_compile_baseline_is_timed_within_the_tolerance_on_a_gpu(tmp_path):
    found = gpu_run_baseline(tmp_path, "softmax")
    assert "torch.compile" in found.others, found.unavailable
    assert sorted(found.others["torch.compile"]) == sorted(found.cases)
    line = found.against(tuple(CaseResult(case=c, correct=True, time_us=b.time_us, ci=b.ci)
                               for c, b in found.cases.items()))  # fmt: skip
    assert "1.00x over reference" in line and "x over torch.compile (+-" in line, line


@pytest.mark.gpu
def test_gdn_decodes_fla_baseline_is_timed_or_says_fla_is_missing_on_a_gpu(tmp_path):
    found = gpu_run_baseline(tmp_path, "gated_delta_net_decode")
    if "FLA fused_recurrent" in found.unavailable:
        assert found.unavailable["FLA fused_recurrent"].startswith("FLA not installed")
    else:
        assert sorted(found.others["FLA fused_recurrent"]) == sorted(found.cases)
    print(found.model_dump_json(indent=1))
