"""A judge keeps its reference inputs and outputs for its next job of the same task only."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from hipevolve.core.evaluation import Status
from hipevolve.verifier.gpu.job import CaseJob, WorkerJob
from hipevolve.verifier.gpu.judge import references
from hipevolve.verifier.isolate import StandbyPool, run_worker

sys.path.insert(0, str(Path(__file__).parent / "hostile"))
from test_hostile import HEALTHY, HERE, cpu_job  # noqa: E402

SOFTMAX = (Path(__file__).parents[1] / "problems" / "softmax" / "reference.py").read_text()


def _job(path: Path, seeds=(0, 1), device: str = "cpu") -> WorkerJob:
    case = CaseJob(name="c", inputs={"rows": 4, "cols": 64, "dtype": "float32"})
    return replace(cpu_job(HEALTHY, device=device, seeds=seeds, cases=(case,)), reference=path)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_next_job_of_the_same_task_builds_only_the_seeds_it_adds(
    tmp_path: Path, device: str
) -> None:
    path = tmp_path / "reference.py"
    path.write_text(SOFTMAX)
    kept = references.Kept()
    _, first = references.build(_job(path, (0, 1, 7), device), kept)
    _, second = references.build(_job(path, (0, 1, 8), device), kept)
    assert second[("c", 0)] is first[("c", 0)] and second[("c", 1)] is first[("c", 1)]
    assert second[("c", 8)] is not first[("c", 7)]
    assert set(kept.refs) == {("c", 0), ("c", 1), ("c", 8)}  # the last job's, no more
    for (_, seed), (inputs, outputs) in second.items():
        fresh = references.build(_job(path, (seed,), device), references.Kept())[1][("c", seed)]
        assert torch.equal(inputs[0], fresh[0][0]) and torch.equal(outputs[0], fresh[1][0])
        assert torch.allclose(outputs[0], torch.softmax(inputs[0], dim=-1))


@pytest.mark.parametrize(
    "change",
    [
        lambda job: replace(job, cases=(replace(job.cases[0], inputs={"rows": 4, "cols": 32}),)),
        lambda job: replace(job, cases=(replace(job.cases[0], name="d"),)),
        lambda job: replace(job, device="cuda"),
    ],
    ids=["inputs", "case name", "device"],
)
def test_a_job_built_differently_gets_new_references(tmp_path: Path, change) -> None:
    path = tmp_path / "reference.py"
    path.write_text(SOFTMAX)
    kept = references.Kept()
    _, first = references.build(_job(path), kept)
    assert references.job_key(change(_job(path))) != references.job_key(_job(path))
    if change(_job(path)).device == "cpu":
        _, other = references.build(change(_job(path)), kept)
        assert not {id(v) for v in other.values()} & {id(v) for v in first.values()}
        assert kept.refs == other


def test_an_edited_reference_file_is_built_again(tmp_path: Path) -> None:
    path = tmp_path / "reference.py"
    path.write_text(SOFTMAX)
    kept = references.Kept()
    references.build(_job(path), kept)
    key = kept.key
    path.write_text(SOFTMAX + "\n# edited\n")
    assert references.job_key(_job(path)) != key


def test_references_are_kept_in_order_up_to_the_limit_and_the_rest_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "reference.py"
    path.write_text(SOFTMAX)
    one_seed = 4 * 64 * 4 * 2  # a 4 x 64 fp32 input and its output
    monkeypatch.setattr(references, "KEEP_BYTES", 2 * one_seed - 1)  # room for one seed of two
    kept = references.Kept()
    _, first = references.build(_job(path), kept)
    assert set(kept.refs) == {("c", 0)} and kept.device_bytes() == one_seed
    _, again = references.build(_job(path), kept)
    assert again[("c", 0)] is first[("c", 0)]  # kept
    assert again[("c", 1)] is not first[("c", 1)]  # built again, to the same values
    assert all(
        torch.equal(a, b) for a, b in zip(first[("c", 1)][1], again[("c", 1)][1], strict=True)
    )
    monkeypatch.setattr(references, "KEEP_BYTES", one_seed - 1)
    references.build(_job(path), kept)
    assert kept.refs == {} and kept.device_bytes() == 0


def test_timed_outputs_are_kept_for_the_next_job_only_while_its_model_seed_is_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "reference.py"
    path.write_text(SOFTMAX)
    kept = references.Kept()
    job = _job(path, (0, 1, 7))
    references.build(job, kept)
    timed = ("c", job.timing_seed)
    assert references.timed_seed(job, timed[1]) and not references.timed_seed(job, 7)
    outs = ([], [torch.zeros(4, 64)])
    kept.offer(job, timed, outs)
    _, again = references.build(job, kept)  # the same run: the same hidden seed
    assert again[timed] is outs and kept.refs[timed] is outs
    _, other = references.build(_job(path, (0, 1, 8)), kept)  # another model seed
    assert timed not in other and timed not in kept.refs
    monkeypatch.setattr(references, "KEEP_BYTES", kept.device_bytes())  # full: nothing more
    kept.offer(_job(path, (0, 1, 8)), timed, outs)
    assert timed not in kept.refs


def test_a_runs_evaluations_share_its_hidden_seed_and_a_lone_one_draws_its_own() -> None:
    from hipevolve.core.config import VerifierSettings
    from hipevolve.problems import get_task
    from hipevolve.verifier.evaluators import PipelineEvaluator
    from hipevolve.verifier.pipeline import check_seeds

    task, settings = get_task("softmax"), VerifierSettings()
    run = PipelineEvaluator(task, settings, "cpu")
    seeds = [check_seeds(task, settings, run.bounds().hidden_seed) for _ in range(3)]
    assert seeds[0] == seeds[1] == seeds[2] and seeds[0][:-1] == (0, 1)
    assert seeds[0][-1] >= 1 << 20  # never a public seed
    other = PipelineEvaluator(task, settings, "cpu")  # another run, another hidden seed
    assert other.bounds().hidden_seed != run.bounds().hidden_seed
    assert len({check_seeds(task, settings)[-1] for _ in range(3)}) == 3


def test_a_bad_reference_is_reported_and_drops_what_was_kept(tmp_path: Path) -> None:
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(SOFTMAX)
    bad.write_text(SOFTMAX.replace("return torch.softmax", "return float('nan') * torch.softmax"))
    kept = references.Kept()
    references.build(_job(good), kept)
    assert "NaN" in references.build(_job(bad), kept)
    assert kept.key is None and kept.refs == {}


def test_a_pooled_judge_checks_each_job_against_the_kept_references() -> None:
    nan = HERE / "dyn_nan_output.py"
    jobs = [HEALTHY, HEALTHY, nan, HEALTHY, nan, HEALTHY]
    with StandbyPool(size=1, device="cpu") as pool:  # judges take turns: A, B, A, B, A, B
        results = [run_worker(cpu_job(j), standby=pool.take(), pool=pool) for j in jobs]
    statuses = [r.status for r in results]
    assert statuses == [Status.ok, Status.ok, Status.incorrect, Status.ok, Status.incorrect,
                        Status.ok], [r.message for r in results]  # fmt: skip
    assert results[4].judge_pid == results[2].judge_pid == results[0].judge_pid
