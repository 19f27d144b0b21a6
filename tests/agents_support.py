"""Shared by the agent tests: the replayed transcript, a compiling stand-in evaluator, a run."""

from __future__ import annotations

import json
from pathlib import Path

from llm_server import Step

from hipevolve.agents.ensemble import Ensemble, ModelSettings
from hipevolve.agents.policy import AgentPolicy
from hipevolve.agents.state import AgentLimits
from hipevolve.archive.store import Archive, canonical_json
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import RunSummary, run_evolution
from hipevolve.evolution.tunables import current_configuration, parse_tunables
from hipevolve.verifier.build import Compiler, build_many
from hipevolve.verifier.candidate import Candidate
from hipevolve.verifier.evaluation import CaseResult, Evaluation, Status

TRANSCRIPT = Path(__file__).resolve().parent / "transcripts" / "softmax_run.json"
MODEL = "openai/test-model"
# The transcript's run: one island, two proposals a generation, one graph run at a time (so the
# requests come in the transcript's order), 8 evaluations (the seed and 7 children).
SETTINGS = EvolutionSettings(islands=1, proposals_per_island=2)
BUDGET = 8


def transcript() -> list[dict[str, str]]:
    return json.loads(TRANSCRIPT.read_text())


def replay_steps() -> list[Step]:
    return [Step.ok(s["reply"], prompt_tokens=900, completion_tokens=300,
                    expect=f"# Role: {s['role']}") for s in transcript()]  # fmt: skip


def nvcc_compiler() -> Compiler:
    from hipevolve.verifier.nvidia_layer import find_nvcc, nvcc_command, nvcc_version

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
    "ROWS": {"1": 1.0, "2": 0.95},
}


class CompilingStandIn:
    """Compiles each candidate with the real nvcc (cuda backend, sm_90, cached in cache_dir) and,
    when it builds, scores it by its tunables times `boost`; a failed build is a compile_error
    with nvcc's trimmed log, as the pipeline reports it. Counts its evaluations."""

    settings_key = canonical_json({"task": "softmax", "stand-in": "compiling"})
    toolchain = "stand-in nvcc"

    def __init__(self, cache_dir: Path, boost: float = 1.0) -> None:
        self.cache_dir, self.boost = cache_dir, boost
        self.calls: list[str] = []

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        built = build_many([c.hip_source for c in candidates], nvcc_compiler(), self.cache_dir)
        out = []
        for candidate, build in zip(candidates, built, strict=True):
            self.calls.append(candidate.source_hash)
            if not build.ok:
                out.append(Evaluation(status=Status.compile_error, task="softmax",
                                      message="does not compile", compile_log=build.log))  # fmt: skip
                continue
            fitness = self.boost
            for name, value in current_configuration(parse_tunables(candidate.hip_source)).items():
                fitness *= FACTORS[name][value]
            cases = (CaseResult(case="attn_scores_4k", correct=True, time_us=100 / fitness,
                                ref_time_us=100.0),)  # fmt: skip
            out.append(Evaluation(status=Status.ok, task="softmax", backend="stand-in",
                                  cases=cases))  # fmt: skip
        return out


def replayed_run(
    archive: Archive, evaluate, api_base: str, *, budget: int = BUDGET, **models
) -> RunSummary:
    from hipevolve.problems import get_task

    settings = ModelSettings.for_model(MODEL, api_base=api_base, max_retries=0, timeout_s=30,
                                       **models)  # fmt: skip
    policy = AgentPolicy(Ensemble(settings), AgentLimits(concurrency=1))
    return run_evolution(get_task("softmax"), archive, SETTINGS, evaluate, budget=budget, seed=0,
                         policy=policy)  # fmt: skip


BROKEN_MARK = "undeclared_scale"  # the identifier that breaks the one broken kernel
