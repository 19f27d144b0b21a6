"""Evaluation on a Ray cluster (verifier/ray.py) and on several local worker slots
(verifier/slots.py).

On this machine a real local Ray cluster runs CPU workers:
- the verifier pipeline's own stages on the static backend (compiles for gfx942 as Ray tasks)
  and on the cpu backend (KernelBench candidates run in the workers' judges and sandboxes)
  give the evaluations a local evaluate_many gives;
- a whole offline run over Ray workers leaves the archive a local run with the same seed leaves,
  also when a worker process dies in the middle of an evaluation (re-queued, run completes);
- a candidate that keeps killing its worker is recorded as a crash, not retried forever.
The stand-in scores (tests/standin.py) make runs deterministic, so two archives can be compared;
the workers import it through the PYTHONPATH the cluster is started with.
With GPUs (marked): two local slots on two GPUs, and Ray GPU workers, one per GPU.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from standin import JudgedOnCpu, StandIn, StandInStages, make_task, score

from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import load_candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import Status
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import get_task
from hipevolve.verifier.pipeline import evaluate_many
from hipevolve.verifier.slots import Slots, visible_gpus

ray = pytest.importorskip("ray")

from hipevolve.verifier.ray import LOST_LIMIT, RayEvaluator  # noqa: E402

TESTS = Path(__file__).resolve().parent
HOSTILE = TESTS / "hostile"
CANDIDATES = TESTS / "data" / "candidates"


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 4 logical CPUs; workers import tests/ modules (the stand-in)."""
    ray.init(
        num_cpus=4, num_gpus=0, include_dashboard=False, object_store_memory=100 << 20,
        log_to_driver=False, logging_level="ERROR",
        runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}},
    )  # fmt: skip
    yield
    ray.shutdown()


def small_softmax():
    """softmax with one small case, so a CPU judge evaluates it in seconds."""
    task = get_task("softmax")
    case = task.cases[0].model_copy(
        update={"name": "small", "inputs": {"rows": 64, "cols": 1024, "dtype": "float32"}}
    )
    return task.model_copy(update={"cases": (case,)})


def cpu_settings(tmp_path: Path) -> VerifierSettings:
    return VerifierSettings(cache_dir=tmp_path / "cache", trials=5, warmup=1, check_seeds=2)


def summary(evaluation) -> tuple:
    """What must agree between two evaluations of one candidate (timings aside)."""
    return (
        evaluation.status,
        evaluation.message if evaluation.status is not Status.ok else "",
        tuple((c.case, c.correct) for c in evaluation.cases),
        evaluation.static,
    )


# ------------------------------------------------------------------ the pipeline through Ray


def test_static_backend_over_ray_tasks_gives_the_local_pipelines_evaluations(cluster, tmp_path):
    from hipevolve.verifier.build.amd_static import find_toolchain

    if find_toolchain() is None:
        pytest.skip("no AMD static toolchain: run scripts/install_amd_toolchain.sh")
    task = get_task("softmax")
    seed = load_candidate(task.seeds[0])
    broken = seed.model_copy(update={"hip_source": seed.hip_source + "\nthis is not C++;\n"})
    candidates = [seed, broken]
    settings = VerifierSettings(cache_dir=tmp_path / "cache")
    local = evaluate_many(candidates, task, settings, "static")
    evaluator = RayEvaluator(task, VerifierSettings(cache_dir=tmp_path / "ray-cache"), "static")
    try:
        remote = evaluator(candidates)
    finally:
        evaluator.close()
    assert [e.status for e in remote] == [Status.compiled, Status.compile_error]
    assert [summary(e) for e in remote] == [summary(e) for e in local]
    assert remote[0].static and remote[0].static[0].target == "gfx942"


def test_cpu_workers_run_candidates_in_their_own_judges_as_local_slots_do(cluster, tmp_path):
    task = small_softmax()
    candidates = [
        load_candidate(CANDIDATES / "softmax_ok.py"),
        load_candidate(HOSTILE / "dyn_wrong_shape.py"),
        load_candidate(HOSTILE / "dyn_segfault.py"),
    ]
    stages = JudgedOnCpu(task, cpu_settings(tmp_path))
    with Slots("cpu", (), standby=1) as slots:
        local = [stages.run(stages.prepare(c), slots) for c in candidates]
    evaluator = RayEvaluator(task, cpu_settings(tmp_path), "cpu", stages=stages, workers=2)
    try:
        remote = evaluator(candidates)
    finally:
        evaluator.close()
    statuses = [Status.ok, Status.incorrect, Status.runtime_error]
    assert [e.status for e in local] == statuses, [e.message for e in local]
    assert [summary(e) for e in remote] == [summary(e) for e in local]
    assert sum(evaluator.served.values()) == 3 and len(evaluator.served) == 2


# ------------------------------------------------------------------ a run over Ray workers


def archive_rows(path: Path) -> dict[str, list]:
    """The archive's content without timestamps, evaluation keys and session records."""
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        candidates = [
            dict(r) for r in db.execute(
                "SELECT id, source_hash, island, generation, agent, fitness, evaluation_id,"
                " hip_source FROM candidates ORDER BY id")
        ]  # fmt: skip
        evaluations = []
        for r in db.execute("SELECT candidate, status, fitness, evaluation FROM evaluations"
                            " ORDER BY id"):  # fmt: skip
            evaluation = json.loads(r["evaluation"])
            evaluation.pop("seconds", None)
            evaluations.append((r["candidate"], r["status"], r["fitness"], evaluation))
        return {
            "candidates": candidates,
            "evaluations": evaluations,
            "lineage": db.execute("SELECT * FROM lineage ORDER BY child, parent").fetchall(),
            "elites": db.execute("SELECT * FROM elites ORDER BY run, island, cell").fetchall(),
            "generations": db.execute(
                "SELECT data FROM events WHERE kind = 'generation' ORDER BY id"
            ).fetchall(),
            "runs": db.execute("SELECT task, settings, seed, budget, status FROM runs").fetchall(),
        }


def run_with(evaluator, root: Path, budget: int = 30, seed: int = 5, lag: int = 0):
    with Archive.open(root / "run.db") as archive:
        task = make_task(root)
        summary = run_evolution(task, archive, EvolutionSettings(lag=lag), evaluator,
                                first=first_candidates(task), budget=budget, seed=seed)  # fmt: skip
    return summary, archive_rows(root / "run.db")


def local_run(root: Path, lag: int = 0):
    root.mkdir()
    return run_with(StandIn(root / "log"), root, lag=lag)


def ray_run(root: Path, stages: StandInStages, workers: int = 2, lag: int = 0):
    root.mkdir(exist_ok=True)
    evaluator = RayEvaluator(make_task(root), VerifierSettings(), "stand-in",
                             stages=stages, workers=workers)  # fmt: skip
    evaluator.settings_key = StandIn.settings_key  # the key a local stand-in run records
    try:
        summary, rows = run_with(evaluator, root, lag=lag)
    finally:
        evaluator.close()
    return summary, rows, evaluator


@pytest.mark.parametrize("lag", [0, 1])  # 1: two generations' batches share the workers
def test_ray_run_leaves_the_archive_a_local_run_with_the_same_seed_leaves(cluster, tmp_path, lag):
    local_summary, local = local_run(tmp_path / "local", lag)
    summary, rows, evaluator = ray_run(tmp_path / "ray", StandInStages(tmp_path), lag=lag)
    assert summary.reason == local_summary.reason == "budget"
    assert len(rows["evaluations"]) == 30
    assert rows == local
    assert len(evaluator.served) == 2 and evaluator.lost == 0


@pytest.mark.parametrize("lag", [0, 1])
def test_an_evaluation_lost_with_its_worker_is_queued_again_and_the_run_completes(
    cluster, tmp_path, lag
):
    _, local = local_run(tmp_path / "local", lag)
    # BLOCK=256 is one edit from the seed (BLOCK=128): the search asks for it early.
    stages = StandInStages(tmp_path, die_on={"BLOCK": "256", "UNROLL": "1", "VEC": "1"})
    summary, rows, evaluator = ray_run(tmp_path / "ray", stages, lag=lag)
    assert len(list(tmp_path.glob("death-*"))) == 1, "the worker was meant to die once"
    assert evaluator.lost == 1
    assert summary.reason == "budget"
    assert rows == local


def with_block(candidate, block: int):
    return candidate.model_copy(update={"hip_source": candidate.hip_source.replace(
        "#define BLOCK 128", f"#define BLOCK {block}")})  # fmt: skip


def test_batches_called_at_once_share_the_workers_and_each_gets_its_own_evaluations(
    cluster, tmp_path
):
    task = make_task(tmp_path)
    seed = load_candidate(task.seeds[0])
    first, second = [seed, with_block(seed, 64)], [with_block(seed, 256)]
    stages = StandInStages(tmp_path, delay_s=1.5)
    evaluator = RayEvaluator(task, VerifierSettings(), "stand-in", stages=stages, workers=3)
    try:
        with ThreadPoolExecutor(2) as pool:  # as a run's generations in flight call it
            older = pool.submit(evaluator, first)
            time.sleep(0.3)
            newer = pool.submit(evaluator, second)
            got = older.result(), newer.result()
    finally:
        evaluator.close()

    def times(evaluation):
        return tuple(c.time_us for c in evaluation.cases)

    assert [[times(e) for e in batch] for batch in got] == [
        [times(score(c)) for c in batch] for batch in (first, second)
    ]
    assert len({times(e) for batch in got for e in batch}) == 3  # three different answers
    spans = {c.source_hash: (tmp_path / f"span-{c.source_hash}").read_text().split()
             for c in first + second}  # fmt: skip
    began_second = float(spans[second[0].source_hash][0])
    assert all(began_second < float(end) for _, end in (spans[c.source_hash] for c in first))
    assert sum(evaluator.served.values()) == 3


def test_a_full_disk_in_a_cpu_task_reaches_its_caller_and_the_next_batch_is_served(
    cluster, tmp_path
):
    task = make_task(tmp_path)
    seed = load_candidate(task.seeds[0])
    stages = StandInStages(tmp_path, full_disk_on={"BLOCK": "64"})
    evaluator = RayEvaluator(task, VerifierSettings(), "stand-in", stages=stages, workers=2)
    try:
        with pytest.raises(OSError, match="No space left on device"):
            evaluator([seed, with_block(seed, 64)])
        [after] = evaluator([with_block(seed, 256)])
    finally:
        evaluator.close()
    assert after.status is Status.ok


def test_a_candidate_that_keeps_killing_its_worker_is_recorded_as_a_crash(cluster, tmp_path):
    task = make_task(tmp_path)
    seed = load_candidate(task.seeds[0])
    stages = StandInStages(tmp_path, die_on={"BLOCK": "128"}, deaths=LOST_LIMIT + 5)
    evaluator = RayEvaluator(task, VerifierSettings(), "stand-in", stages=stages, workers=2)
    try:
        [evaluation] = evaluator([seed])
        [after] = evaluator([with_block(seed, 64)])  # the replacement workers serve it
    finally:
        evaluator.close()
    assert evaluation.status is Status.runtime_error
    assert f"died {LOST_LIMIT} times" in evaluation.message
    assert evaluator.lost == LOST_LIMIT
    assert after.status is Status.ok


def test_unreachable_ray_address_is_a_one_line_error(tmp_path):
    """No cluster fixture: the command must not find one already joined."""
    proc = subprocess.run(
        [sys.executable, "-m", "hipevolve", "--task", "softmax", "--budget", "2",
         "--archive", str(tmp_path / "a.db"), "--ray", "127.0.0.1:9"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert any("--ray 127.0.0.1:9: no Ray cluster there" in line for line in lines), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "a.db").exists()


def test_ray_option_without_ray_installed_is_a_one_line_error(tmp_path):
    blocked = tmp_path / "blocked" / "ray"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text('raise ImportError("no module named ray")\n')
    env = os.environ | {"PYTHONPATH": str(blocked.parent)}
    proc = subprocess.run(
        [sys.executable, "-m", "hipevolve", "--task", "softmax", "--budget", "2",
         "--archive", str(tmp_path / "a.db"), "--ray", "auto"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr and not (tmp_path / "a.db").exists()
    # Ray's metadata is still installed here, so on a machine without a GPU driver the cheaper
    # GPU check may answer first; the evaluator itself names Ray whatever the machine.
    from hipevolve.app.evaluator_choice import GPU_DEVICE_NODES

    if any(Path(n).exists() for n in GPU_DEVICE_NODES):
        assert "--ray needs Ray, which is not installed here" in proc.stderr, proc.stderr
    else:
        assert proc.stderr.strip().count("\n") == 0 and "no usable GPU here" in proc.stderr
    code = ("from hipevolve.app.run_job import ray_evaluator\n"
            "from hipevolve.core.config import load_settings\n"
            "from hipevolve.core.errors import UserError\n"
            "from hipevolve.problems import get_task\n"
            "try:\n    ray_evaluator(get_task('softmax'), load_settings({}), 'cuda')\n"
            "except UserError as e:\n    print(e.line())\n")  # fmt: skip
    direct = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path, env=env)  # fmt: skip
    assert direct.stdout.startswith("--ray needs Ray, which is not installed here"), direct


# ------------------------------------------------------------------ local worker slots


def test_visible_gpus_follow_the_backends_visibility_variable(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    assert visible_gpus("cuda") == ("2", "3")
    assert visible_gpus("rocm") == ("1",)
    assert visible_gpus("static") == visible_gpus("cpu") == ()


def test_two_slots_run_evaluations_concurrently_and_both_serve(tmp_path):
    from hipevolve.verifier.pipeline import Prepared, run_prepared

    task = small_softmax()
    healthy = load_candidate(CANDIDATES / "softmax_ok.py")
    settings = cpu_settings(tmp_path)
    with Slots("cpu", ("0", "1"), standby=1) as slots:
        running = [
            slots.submit(
                lambda slot: run_prepared(
                    Prepared(candidate=healthy), task, settings, "cpu", slot.judges
                )
            )  # fmt: skip
            for _ in range(4)
        ]
        results = [r.result() for r in running]
    assert [e.status for e in results] == [Status.ok] * 4, [e.message for e in results]
    assert set(slots.served) == {"0", "1"} and sum(slots.served.values()) == 4


# ------------------------------------------------------------------ GPUs (marked)


def two_gpus() -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")


@pytest.mark.gpu
def test_two_gpu_slots_evaluate_a_batch_on_both_gpus(tmp_path):
    from hipevolve.verifier.evaluators import pipeline_evaluator

    two_gpus()
    task = get_task("softmax")
    evaluator = pipeline_evaluator(task, VerifierSettings(cache_dir=tmp_path / "cache"), "auto")
    seed = load_candidate(task.seeds[0])
    candidates = [
        seed.model_copy(update={"hip_source": seed.hip_source + f"\n// variant {i}\n"})
        for i in range(4)
    ]
    try:
        results = evaluator(candidates)
        served = evaluator._slots.served
    finally:
        evaluator.close()
    assert [e.status for e in results] == [Status.ok] * 4, [e.message for e in results]
    assert len(evaluator.gpus) >= 2 and len([d for d, n in served.items() if n]) >= 2


@pytest.mark.gpu
def test_ray_gpu_workers_one_per_gpu_run_a_search_and_survive_a_lost_worker(tmp_path):
    """A real Ray cluster on this machine's GPUs (not the CPU fixture): a short softmax search,
    with one GPU worker's process killed mid-run; the run completes on the budget."""
    import os
    import signal
    import threading
    import time

    two_gpus()
    if ray.is_initialized():
        ray.shutdown()
    task = get_task("softmax")
    evaluator = RayEvaluator(task, VerifierSettings(cache_dir=tmp_path / "cache"), "cuda", "auto")
    killed = []

    def kill_a_worker_mid_run():
        while sum(evaluator.served.values()) < 4:  # the seeds are in; a generation is running
            time.sleep(0.05)
        pid = int(evaluator.workers[0]["pid"])
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    threading.Thread(target=kill_a_worker_mid_run, daemon=True).start()
    try:
        with Archive.open(tmp_path / "run.db") as archive:
            summary = run_evolution(task, archive, EvolutionSettings(), evaluator,
                                    first=first_candidates(task), budget=24, seed=0)  # fmt: skip
            evaluations = archive.count_evaluations(summary.run)
    finally:
        evaluator.close()
    assert killed and evaluator.lost >= 1  # the evaluation on (or next sent to) the dead worker
    assert summary.reason == "budget" and evaluations == 24
    assert len([w for w in evaluator.served if w.startswith("gpu")]) >= 2
