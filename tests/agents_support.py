"""Shared by the agent tests: the replayed transcript, a compiling stand-in evaluator, a run."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
from llm_server import Step

from hipevolve.agents.llm.ensemble import Ensemble, ModelSettings
from hipevolve.agents.policy import AgentPolicy
from hipevolve.agents.state import AgentLimits
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive, canonical_json
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.offline.tunables import current_configuration, parse_tunables
from hipevolve.evolution.run import RunSummary, run_evolution
from hipevolve.verifier.build.compile import Compiler, build_many
from hipevolve.verifier.evaluators import BaseEvaluator

TRANSCRIPTS = Path(__file__).resolve().parent / "transcripts"
TRANSCRIPT = TRANSCRIPTS / "softmax_run.json"
MODEL = "openai/test-model"
# The transcript's run: one island, two proposals a generation, one graph run at a time (so the
# requests come in the transcript's order), 8 evaluations (the seed and 7 children).
SETTINGS = EvolutionSettings(islands=1, proposals_per_island=2)
BUDGET = 8


def transcript(name: str = "softmax_run") -> list[dict[str, str]]:
    return json.loads((TRANSCRIPTS / f"{name}.json").read_text())


def replay_steps(name: str = "softmax_run", delay_s: float = 0.0) -> list[Step]:
    return [Step.ok(s["reply"], prompt_tokens=900, completion_tokens=300,
                    expect=f"# Role: {s['role']}", delay_s=delay_s)
            for s in transcript(name)]  # fmt: skip


def nvcc_compiler() -> Compiler:
    from hipevolve.verifier.build.nvidia import find_nvcc, nvcc_command, nvcc_version

    nvcc = find_nvcc()
    assert nvcc is not None, "nvcc not found"
    argv = nvcc_command(nvcc, Path("kernel.hip"), Path("lib.so"), arch="sm_90")
    return Compiler(name="cuda", argv=tuple(argv), toolchain=nvcc_version(nvcc))


# Stand-in speedups per tunable value of the softmax seed (the StandIn idea of tests/standin.py,
# for the softmax kernel's own tunables): the best setting scores 1.2 * 1.3 * 1.1.
FACTORS = {
    "BLOCK": {"64": 0.6, "128": 0.9, "256": 1.0, "512": 1.2, "1024": 1.1},
    "VEC": {"1": 0.5, "2": 0.7, "4": 1.0, "8": 1.3},
    "UNROLL": {"1": 1.0, "2": 1.1, "4": 1.05},
    "ROWS": {"1": 1.0, "2": 0.95, "4": 0.9, "8": 0.85},
    "LOOPS": {"1": 1.0, "2": 0.98, "4": 0.96},
    "FAST_EXP": {"0": 0.97, "1": 1.0},
}


WRONG_MARK = "0.5f / s"  # the halved normaliser of the one wrong-result kernel


def halved_softmax_mismatch() -> tuple[str, CaseResult]:
    """What the verifier reports for the wrong-result kernel: its bug (every output halved)
    replayed in torch on the small case, compared by the verifier's own compare_values."""
    from hipevolve.problems import get_task
    from hipevolve.verifier.gpu.judge.compare import compare_values

    x = torch.linspace(-4.0, 4.0, 64 * 1024).reshape(64, 1024)
    ref = torch.softmax(x, dim=-1)
    tolerance = get_task("softmax").tolerance.model_dump()
    ok, max_abs, rel_rms, summary = compare_values(0, ref * 0.5, ref, tolerance)
    assert not ok
    case = CaseResult(case="small", correct=False, max_abs_err=max_abs, rel_rms_err=rel_rms,
                      message="wrong values (seed 0 run 0)")  # fmt: skip
    return f"case small seed 0 run 0: {summary}", case


class CompilingStandIn(BaseEvaluator):
    """Compiles each candidate with the real nvcc (cuda backend, sm_90, cached in cache_dir) and,
    when it builds, scores it by its tunables times `boost`; a failed build is a compile_error
    with nvcc's trimmed log, as the pipeline reports it. A kernel carrying WRONG_MARK (it halves
    every output) is `incorrect` with the mismatch summary the verifier's comparison writes for
    that bug. `build=False` skips nvcc (every kernel builds); `seconds` holds each evaluation
    that long (a GPU's time), and `on_evaluate` is called as each starts and as it ends. Counts
    evaluations."""

    settings_key = canonical_json({"task": "softmax", "stand-in": "compiling"})
    toolchain = "stand-in nvcc"

    def __init__(
        self,
        cache_dir: Path,
        boost: float = 1.0,
        *,
        task: str = "softmax",
        build: bool = True,
        seconds: float = 0.0,
        on_evaluate: Callable[[Candidate], None] | None = None,
    ) -> None:
        self.cache_dir, self.boost, self.task = cache_dir, boost, task
        self.build, self.seconds, self.on_evaluate = build, seconds, on_evaluate
        self.calls: list[str] = []

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        sources = [c.hip_source for c in candidates]
        built = build_many(sources, nvcc_compiler(), self.cache_dir) if self.build else None
        out = []
        for i, candidate in enumerate(candidates):
            self.calls.append(candidate.source_hash)
            if self.on_evaluate is not None:
                self.on_evaluate(candidate)
            time.sleep(self.seconds)
            if self.on_evaluate is not None:
                self.on_evaluate(candidate)
            if built is not None and not built[i].ok:
                out.append(Evaluation(status=Status.compile_error, task=self.task,
                                      message="does not compile", compile_log=built[i].log))  # fmt: skip
                continue
            if WRONG_MARK in (candidate.hip_source or ""):
                mismatch, case = halved_softmax_mismatch()
                out.append(Evaluation(status=Status.incorrect, task=self.task, backend="stand-in",
                                      cases=(case,), message=f"case small: {case.message}",
                                      mismatch=mismatch))  # fmt: skip
                continue
            fitness = self.boost
            for name, value in current_configuration(parse_tunables(candidate.hip_source)).items():
                fitness *= FACTORS[name][value]
            cases = (CaseResult(case="attn_scores_4k", correct=True, time_us=100 / fitness,
                                ref_time_us=100.0),)  # fmt: skip
            out.append(Evaluation(status=Status.ok, task=self.task, backend="stand-in",
                                  cases=cases))  # fmt: skip
        return out


def replayed_run(
    archive: Archive,
    evaluate,
    api_base: str,
    *,
    budget: int = BUDGET,
    task: TaskSpec | None = None,
    settings: EvolutionSettings = SETTINGS,
    concurrency: int = 1,
    limits: dict | None = None,
    model_names: tuple[str, ...] = (MODEL,),
    **models,
) -> RunSummary:
    from hipevolve.problems import get_task

    models_settings = ModelSettings.for_model(*model_names, api_base=api_base, max_retries=0,
                                              timeout_s=30, **models)  # fmt: skip
    # The transcript scripts every reply of the run: the offline tuner's sweep of new model
    # elites (tests/test_agents_sweep.py) would spend budget the script's children expect, and
    # the shares of the budget (tests/test_agents_budget_split.py) would hand the children
    # units the script's re-checks and head-to-heads spent.
    unbounded = {"tuner_share": 1.0, "duel_share": 1.0, "recheck_share": 1.0}
    limits = {"sweep_configurations": 0} | unbounded | (limits or {})
    policy = AgentPolicy(Ensemble(models_settings),
                         AgentLimits(concurrency=concurrency, **limits))  # fmt: skip
    task = task or get_task("softmax")
    return run_evolution(task, archive, settings, evaluate, first=first_candidates(task, translates=True),
                         budget=budget, seed=0, policy=policy)  # fmt: skip


BROKEN_MARK = "undeclared_scale"  # the identifier that breaks the one broken kernel
