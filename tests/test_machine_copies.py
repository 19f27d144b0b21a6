"""A machine-code copy never reaches the GPU (issue 33): the run loop (evolution/run.py through
the Recorder) asks the evaluator for each candidate's build-stage digest and answers a candidate
whose machine code and model.py match an evaluated one's from that evaluation.

The evaluator is the run-loop tests' stand-in for the GPU worker (it scores by the tunables and
logs what it was sent), except that its digests are real: pipeline.machine_digest digests each
candidate with nvcc for sm_90, as the cuda backend does, and reads the library's device and host
code. The seed declares BLOCK (read on every platform) and AMD_WAVES (read only under
__HIP_PLATFORM_AMD__): four configurations, two machine codes on sm_90.

On a GPU (marked): the same search through the production evaluator (the verifier pipeline,
judges and all), on the stand-in task y = 2x that the kernel computes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from standin import MODEL, TASK_NAME, StandIn, logged, write_task_folder

from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.offline.tunables import current_configuration, parse_tunables
from hipevolve.evolution.recorder import copy_of
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import BUILTIN_DIR, load_task_folder
from hipevolve.verifier.build.compile import Compiler, build
from hipevolve.verifier.pipeline import machine_digest
from hipevolve.verifier.prepared import Prepared

KERNEL = """\
#include <hip/hip_runtime.h>

// @tunable BLOCK: 128, 256
#define BLOCK 128
// @tunable AMD_WAVES: 1, 2
#define AMD_WAVES 1

__global__ void __launch_bounds__(BLOCK)
scale_kernel(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
#if defined(__HIP_PLATFORM_AMD__)
    for (int w = 0; w < AMD_WAVES; ++w, i += n / AMD_WAVES)
#endif
    if (i < n) y[i] = 2.0f * x[i];
}

extern "C" hipError_t scale(const float* x, float* y, int n, hipStream_t stream) {
    hipLaunchKernelGGL(scale_kernel, dim3((n + BLOCK - 1) / BLOCK), dim3(BLOCK), 0, stream,
                       x, y, n);
    return hipGetLastError();
}
"""


def _nvcc() -> Compiler:
    from hipevolve.verifier.build import nvidia

    nvcc = nvidia.find_nvcc()
    if nvcc is None or not (nvidia.include_dir() / "hip" / "hip_runtime.h").exists():
        pytest.skip("nvcc or the HIP-to-CUDA layer is missing")
    argv = nvidia.nvcc_command(nvcc, Path("kernel.hip"), Path("lib.so"), arch="sm_90")
    return Compiler(name="cuda", argv=tuple(argv), toolchain=nvidia.nvcc_version(nvcc))


class BuildingStandIn(StandIn):
    """The stand-in with real sm_90 digests. Its score is noisy on purpose: every evaluation
    of AMD_WAVES=2 would time 20% faster, which a copy run on the GPU could be crowned for."""

    def __init__(self, log: Path, cache: Path) -> None:
        super().__init__(log)
        self.compiler, self.settings = _nvcc(), VerifierSettings(cache_dir=cache)

    def prepare(self, candidates: list[Candidate]) -> list[Prepared]:
        return [Prepared(candidate=c, digest=self._digest(c)) for c in candidates]

    def _digest(self, candidate: Candidate) -> str | None:
        built = build(candidate.hip_source, self.compiler, self.settings.cache_dir, timeout_s=600)
        return machine_digest(candidate, built, self.compiler)

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        results = []
        for candidate in candidates:
            config = current_configuration(parse_tunables(candidate.hip_source or ""))
            speedup = (1.5 if config["BLOCK"] == "256" else 1.0) * (
                1.2 if config["AMD_WAVES"] == "2" else 1.0
            )
            case = CaseResult(case="a", correct=True, time_us=100.0 / speedup, ref_time_us=100.0)
            results.append(Evaluation(status=Status.ok, task="stand-in", cases=(case,)))
            with self.log.open("a") as f:
                f.write(candidate.source_hash + "\n")
        return results


def _task(root: Path):
    seed = root / "seed"
    seed.mkdir(parents=True, exist_ok=True)
    (seed / "kernel.hip").write_text(KERNEL)
    (seed / "model.py").write_text(MODEL)
    task = load_task_folder(BUILTIN_DIR / "gated_delta_net_decode", "builtin")
    return task.model_copy(update={"seeds": (seed,)})


def test_an_offline_child_that_builds_to_machine_code_the_run_has_is_screened_out_unstored(
    tmp_path,
):
    """The offline mutator's children are built before they are stored: one whose machine code
    the run has already sent is never stored, spends no unit and is logged (`screened_copy`);
    its proposal is made again, so the evaluator gets new machine code only."""
    from hipevolve.app.run_job import first_candidates
    from hipevolve.evolution.budget import SCREENED

    task = _task(tmp_path)
    log = tmp_path / "sent.log"
    with Archive.open(tmp_path / "run.db") as archive:
        summary = run_evolution(task, archive, EvolutionSettings(),
                                BuildingStandIn(log, tmp_path / "cache"),
                                first=first_candidates(task), budget=10, seed=0)  # fmt: skip
        ids = archive.candidate_ids(1)
        records = {cid: archive.candidate(cid) for cid in ids}
        evaluations = {cid: archive.evaluation_of(cid) for cid in ids}
        screened = [e.data for e in archive.events(1, SCREENED)]
    configs = {cid: current_configuration(parse_tunables(r.candidate.hip_source or ""))
               for cid, r in records.items()}  # fmt: skip
    # two machine codes (BLOCK), each stored and sent once; the AMD_WAVES twins screened out
    assert sorted(c["BLOCK"] for c in configs.values()) == ["128", "256"]
    sent = logged(log)
    assert sorted(sent) == sorted(r.source_hash for r in records.values())
    assert all(copy_of(e) is None for e in evaluations.values())
    assert len(screened) == 2 and {d["source_hash"] for d in screened}.isdisjoint(sent)
    stored = {r.source_hash: configs[cid] for cid, r in records.items()}
    for data in screened:
        twin = stored[data["twin"]]  # the stored candidate with its machine code
        assert twin["AMD_WAVES"] == "1"
    assert summary.reason == "exhausted", summary.message
    assert "2 children screened out before a unit was spent" in summary.message
    assert "2 of 10 evaluations" in summary.message


def test_a_policy_child_that_copies_evaluated_machine_code_is_not_sent_to_the_evaluator(tmp_path):
    from hipevolve.core.candidate import load_candidate
    from hipevolve.evolution.budget import RunBudget
    from hipevolve.evolution.child import Child
    from hipevolve.evolution.recorder import Recorder
    from hipevolve.evolution.workshop import Workshop

    task = _task(tmp_path)
    seed = load_candidate(task.seeds[0])
    inert = seed.model_copy(update={"hip_source": KERNEL.replace(
        "#define AMD_WAVES 1", "#define AMD_WAVES 2")})  # fmt: skip
    log = tmp_path / "sent.log"
    evaluator = BuildingStandIn(log, tmp_path / "cache")
    with Archive.open(tmp_path / "run.db") as archive:
        run = archive.start_run(task, EvolutionSettings(), 0, 10)
        budget = RunBudget(10)
        workshop = Workshop(task, Recorder(archive, run, evaluator), 1, budget)
        first, original = workshop.evaluate(Child(candidate=seed, island=0))
        second, copied = workshop.evaluate(Child(candidate=inert, island=0, parents=(first,)))
        # a fresh Recorder (a resumed run) knows the digests from the archive's events
        assert Recorder(archive, run, evaluator).twins == {evaluator._digest(seed): first}
    assert second != first and copy_of(copied) == first and copy_of(original) is None
    assert copied.fitness == original.fitness
    assert logged(log) == [seed.source_hash]
    # the copy ran on no GPU and spent no unit of the budget
    assert workshop.evaluations == 1 and budget.spent == 1 and budget.copies == 1


@pytest.mark.gpu
def test_on_the_gpu_the_pipeline_sends_one_candidate_per_machine_code_to_the_judges(tmp_path):
    from hipevolve.app.run_job import first_candidates
    from hipevolve.verifier.evaluators import pipeline_evaluator

    folder = write_task_folder(tmp_path) / TASK_NAME
    (folder / "seeds" / "scale" / "kernel.hip").write_text(KERNEL)
    task = load_task_folder(folder, "user")
    evaluator = pipeline_evaluator(
        task, VerifierSettings(cache_dir=tmp_path / "cache", trials=10), "auto"
    )
    with Archive.open(tmp_path / "gpu.db") as archive:
        summary = run_evolution(task, archive, EvolutionSettings(islands=2, lag=1), evaluator,
                                first=first_candidates(task), budget=10, seed=0)  # fmt: skip
        evaluator.close()
        evaluations = {c: archive.evaluation_of(c) for c in archive.candidate_ids(summary.run)}
    assert len(evaluations) == 4, evaluations
    assert all(e is not None and e.ok for e in evaluations.values()), evaluations
    copies = {cid for cid, e in evaluations.items() if copy_of(e) is not None}
    # on NVIDIA AMD_WAVES is inert: two machine codes; on an AMD GPU all four differ
    assert len(copies) == (2 if evaluator.backend == "cuda" else 0), summary.message
    assert summary.progress.best_candidate not in copies


def test_a_search_that_writes_only_copies_for_twelve_generations_stops_and_says_why(tmp_path):
    """Copies spend no unit, so a search whose new sources only build to evaluated machine code
    (another target's tunables on this card) must stop by itself (Search.barren): with one
    island of one proposal, once 12 children in a row were copies (screened out before they
    were stored, or stored as copies), long before its 32 sources run out."""
    from hipevolve.app.run_job import first_candidates

    task = _task(tmp_path)
    seed = task.seeds[0] / "kernel.hip"
    waves = ", ".join(str(w) for w in range(1, 17))
    seed.write_text(
        KERNEL.replace("// @tunable AMD_WAVES: 1, 2", f"// @tunable AMD_WAVES: {waves}")
    )
    log = tmp_path / "sent.log"
    with Archive.open(tmp_path / "run.db") as archive:
        summary = run_evolution(task, archive, EvolutionSettings(islands=1, lag=0),
                                BuildingStandIn(log, tmp_path / "cache"),
                                first=first_candidates(task), budget=200, seed=0)  # fmt: skip
        stored = len(archive.candidate_ids(1))
        screened = len(archive.events(1, "screened_copy"))
        evaluations = {cid: archive.evaluation_of(cid) for cid in archive.candidate_ids(1)}
        elites = {e.candidate_id for e in archive.elites(1)}
    # the rescue's children are stored as copies, answered from their originals: never elites
    copies = {cid: copy_of(e) for cid, e in evaluations.items() if copy_of(e) is not None}
    assert copies and elites and copies.keys().isdisjoint(elites)
    for cid, original in copies.items():
        assert evaluations[cid].fitness == evaluations[original].fitness
    assert summary.reason == "copies", summary.message
    assert len(logged(log)) == 2  # one evaluation per machine code: BLOCK 128 and 256
    assert stored + screened < 32  # it stopped before every configuration was written
    assert "kernels it wrote built to machine code it had already evaluated" in summary.message


def test_the_copy_streak_counts_whole_generations_of_copies_before_the_one_planned() -> None:
    from hipevolve.evolution.budget import RunBudget

    budget = RunBudget(100)
    budget.restore(admitted=[("seed", 0), ("a", 1), ("b", 2), ("c", 2), ("d", 3), ("e", 4)],
                   copies=["b", "c", "d"])  # fmt: skip
    assert budget.barren(3) == 2  # generation 2: two copies; generation 1 wrote new code
    assert budget.barren(4) == 3  # and generation 3's one copy
    assert budget.barren(5) == 0  # generation 4 wrote new code: the streak is broken
    assert budget.barren(1) == 0  # generation 0 (the seeds) never counts
