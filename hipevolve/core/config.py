"""Settings: one frozen pydantic tree. Defaults < ./hipevolve.toml < command-line flags.

`load_settings(flags)` builds it: the defaults below, then ./hipevolve.toml of the working folder
if there is one, then the flags given (a flag not given leaves the file's value). The command
line only maps its flags onto this tree (hipevolve/app); every section, flag or not, can be
set in the file, and every value is checked here, once: an unknown key or a bad value is refused
in one line naming the setting and where it came from. A section's table in the file sets only
the keys it names.

    [tasks]       where tasks are found
      dirs                 extra task folders or KernelBench files, searched after problems/
                           (--tasks-dir replaces this list)
    [verifier]    how a candidate is compiled, checked and timed
      backend              auto, cuda, rocm or static (--backend); auto: the GPU here
      amd_targets          gfx targets of the static AMD analysis
      cache_dir            compile cache (content-addressed)
      compile_timeout_s, compile_jobs, max_object_bytes    compiling
      load_timeout_s, check_timeout_s, timing_timeout_s    the judge's time limits
      check_seeds, trials, warmup                           correctness seeds and timing trials
      reference_trials     the reference's trials inside an evaluation (0: as many)
      suspect_margin       faster than a run's strongest baseline by more than this: suspect
      suspect_speedup      over the reference, suspect where a case has no physical bound
      quiet_judge, cpu_work_nice, judge_cores_per_slot
                           CPU work niced and kept off the judges' cores (hipevolve/core/cpu_share.py)
      ray                  a Ray cluster's address, or auto (--ray); unset: this machine's GPUs
    [evolution]   how the search spends its proposals; stored with each run (archive runs.settings)
      islands              independent MAP-Elites grids (--islands)
      migration_every, migrants                  ring migration between islands
      reseed_every, reseed_from                  resetting the weaker half of the islands
      elite_fraction, fitness_weighted_fraction, uniform_fraction, elite_top_k
                           how parents are drawn (the three fractions sum to 1)
      inspirations         other elites shown in a prompt
      proposals_per_island parents planned per island per generation
      lag                  generations a plan may lag behind (generations in flight)
    [agents]      hard limits on the agents' graph (used only with a model)
      repair_turns, audit_rechecks, surprising_speedup, proposals_per_generation, concurrency,
      sweep_configurations, stall_generations, raw_reply_chars
      tuner_share, duel_share, recheck_share   the most of the budget each spends beside the
                           models' children (evolution/budget.py Shares)
      scratchpad_every, scratchpad_tokens, scratchpad_writer   the run's notes every K generations
    [models]      which LLMs serve which agent role, and the run's LLM budgets
      model                litellm models behind every writing role (--model, repeatable; several:
                           a bandit picks per call); none and no roles: the offline policies
      roles                role -> models for that role (several: a bandit picks per call)
      api_base             a local OpenAI-compatible server (--api-base)
      token_budget, cost_budget_usd               per run (--token-budget, --cost-budget)
      timeout_s, max_retries, backoff_s, max_reply_tokens, temperature, exploration
      stream, max_concurrent  replies as server-sent events; requests in flight per model
    [fitness]     how a run's fitness is measured and compared (hipevolve/core/baseline.py)
      baseline_trials      trials of the reference timed once at the run's start
      noise_floor          what evaluations in fresh judges cannot tell apart
      duel_rounds, confirm_rounds, min_gain    head-to-heads of close calls and the final best
      baseline_target      the baseline's trials stop once each case's median is this tight
      check_drift, check_trials, check_every   the reference inside every Nth evaluation: a
                           check of the machine's noise, never the fitness
    [run]         defaults of the main job, `evolve --task T --budget N`
      archive              the SQLite archive runs are written to (--archive)
      seed                 the random seed of a new run (--seed)

What `evolve` decides itself, unless set: a new run plans with evolution.lag 1 (the library
default, for run_evolution's callers, is 0; with a model, each generation's lag up to 4 and
agents.concurrency are paced by measured latencies, evolution/pace.py), and evolution.proposals_per_island is enough
proposals per generation to keep every GPU of the evaluator busy. A resumed run (--resume) keeps
the seed, evolution settings and budget it recorded: the file's [evolution] and run.seed apply to
new runs only, and a --seed or --islands that differs from the run's is refused.

Environment. No environment variable overrides a setting. Two are documented inputs:
HIPEVOLVE_MODEL is models.model when neither the flags nor the file name one, and
HIPEVOLVE_TASKS (folders separated by `:`) adds task folders after tasks.dirs (read by
hipevolve.problems). Provider keys (OPENAI_API_KEY, ...) are litellm's, read when a model is
called.

The run's task, its budget and --resume are what one invocation asks for, not settings: they
stay on the command line.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import Field, ValidationError, field_validator, model_validator

from hipevolve.core.base import Frozen
from hipevolve.core.cpu_share import CpuPolicy
from hipevolve.core.errors import UserError

CONFIG_FILE = "hipevolve.toml"
MODEL_ENV = "HIPEVOLVE_MODEL"  # models.model when neither the flags nor the file set it
Backend = Literal["auto", "cuda", "rocm", "static"]
BACKENDS: tuple[str, ...] = get_args(Backend)

# The agents' roles, and those `--model M` (models.model) puts a model behind. The auditor's model
# review of surprising winners is opt-in (its static screen and hidden-seed re-check run either
# way): name it in models.roles.
Role = Literal[
    "task_generator", "translator", "profiler_reader", "optimizer", "mutator", "repairer", "auditor"
]
WRITING_ROLES: tuple[Role, ...] = (
    "translator",
    "profiler_reader",
    "optimizer",
    "mutator",
    "repairer",
    "task_generator",
)


class Section(Frozen):
    """A section of the settings tree."""


class TaskSettings(Section):
    dirs: tuple[Path, ...] = Field(
        default=(), description="extra task folders, searched after the built-in problems/"
    )


class VerifierSettings(Section):
    backend: Backend = Field(
        default="auto", description="where candidates run: auto picks rocm or cuda by the GPU"
    )
    amd_targets: tuple[str, ...] = Field(
        default=("gfx942",), description="gfx targets of the static AMD analysis"
    )
    cache_dir: Path = Field(
        default=Path.home() / ".cache" / "hipevolve",
        description="compile cache (content-addressed)",
    )
    compile_timeout_s: float = Field(default=120.0, gt=0, description="per compile, seconds")
    compile_jobs: int = Field(default=0, ge=0, description="parallel compiles; 0 = all CPU cores")
    max_object_bytes: int = Field(default=64 << 20, gt=0, description="largest compiled library")
    load_timeout_s: float = Field(default=120.0, gt=0, description="import and build ModelNew")
    check_timeout_s: float = Field(default=120.0, gt=0, description="all correctness runs")
    timing_timeout_s: float = Field(default=300.0, gt=0, description="all timing runs")
    check_seeds: int = Field(default=0, ge=0, description="0 = the task's own number of seeds")
    trials: int = Field(default=30, ge=5, description="timed trials per case (median reported)")
    warmup: int = Field(default=5, ge=1, description="untimed calls before the trials")
    suspect_margin: float = Field(
        default=3.0,
        gt=1,
        description="a case this many times faster than the strongest "
        "baseline a run timed on it (FlashQLA, FLA, torch.compile, torch.matmul) is suspect and "
        "re-checked (a fresh hidden seed, fresh inputs, the baseline timed side by side)",
    )
    suspect_speedup: float = Field(
        default=10.0,
        gt=1,
        description="speedups over the reference above this are suspect, "
        "only on a case with no roofline and no strong baseline (nothing physical is known)",
    )
    reference_trials: int = Field(
        default=0,
        ge=0,
        description="trials of the reference inside each evaluation; 0: as "
        "many as the candidate's (a run sets fitness.check_trials: there it is only a check)",
    )
    # Where and how nicely CPU work runs changes no result, only its noise: not in settings_key.
    quiet_judge: bool = Field(
        default=True,
        description="compiles and CPU stages run niced and, where the host has cores "
        "to spare, off the judges' cores; false: everything shares every core as before",
    )
    cpu_work_nice: int = Field(
        default=10, ge=0, le=19, description="niceness of compiles and the CPU-stage threads"
    )
    judge_cores_per_slot: int = Field(
        default=2,
        ge=0,
        le=8,
        description="cores reserved for each GPU slot's judges when the host "
        "has more than slots * this + 2; 0: never pin",
    )
    ray: str | None = Field(
        default=None,
        description="run on a Ray cluster: its address, or auto; unset: this machine's GPUs",
    )

    def cpu_policy(self) -> CpuPolicy:
        """The CPU-sharing policy these settings ask for."""
        return CpuPolicy(
            enabled=self.quiet_judge,
            nice=self.cpu_work_nice,
            cores_per_slot=self.judge_cores_per_slot,
        )

    @field_validator("backend", mode="before")
    @classmethod
    def _known_backend(cls, value: Any) -> Any:
        if value not in BACKENDS:
            raise ValueError(f"unknown backend {value!r}: use auto, cuda, rocm or static")
        return value


class EvolutionSettings(Section):
    """How the search spends its proposals: islands, selection mix, migration and reseeding.

    Stored with each run as canonical JSON (archive runs.settings) and compared on resume: a
    field added here changes what every run stores, and old runs would no longer resume.
    """

    islands: int = Field(default=4, ge=1, description="independent MAP-Elites grids")
    migration_every: int = Field(
        default=5, ge=0, description="generations between ring migrations; 0 = never"
    )
    migrants: int = Field(
        default=1, ge=0, description="top elites each island sends to the next in the ring"
    )
    reseed_every: int = Field(
        default=20,
        ge=0,
        description="generations between resets of the weaker half of the islands; 0 = never",
    )
    reseed_from: Literal["elites", "best"] = Field(
        default="elites",
        description="a reset island takes the best island's best elite and a "
        "share of its other elites, dealt in turn among the reset islands; or its best alone",
    )
    elite_fraction: float = Field(
        default=0.5, ge=0, le=1, description="parents drawn uniformly from the top-k elites"
    )
    fitness_weighted_fraction: float = Field(
        default=0.3, ge=0, le=1, description="parents drawn rank-weighted over the whole grid"
    )
    uniform_fraction: float = Field(
        default=0.2, ge=0, le=1, description="parents drawn uniformly over the whole grid"
    )
    elite_top_k: int = Field(default=3, ge=1, description="k of the elite draw")
    inspirations: int = Field(
        default=3, ge=0, description="other elites shown in a prompt: best, grid neighbours, random"
    )
    proposals_per_island: int = Field(
        default=1, ge=1, description="parents planned per island per generation"
    )
    lag: int = Field(
        default=0,
        ge=0,
        le=4,
        description="generations a plan may lag behind: generation g is planned from the islands "
        "after generation g-1-lag, so up to lag+1 generations evaluate at once (0: each waits "
        "for the one before)",
    )

    @model_validator(mode="after")
    def _fractions_sum_to_one(self) -> EvolutionSettings:
        total = self.elite_fraction + self.fitness_weighted_fraction + self.uniform_fraction
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise ValueError(f"parent-selection fractions sum to {total:g}, not 1")
        return self


class AgentLimits(Section):
    """Hard limits on every loop of the agents' graph."""

    repair_turns: int = Field(default=2, ge=0, le=6, description="repairer turns per proposal")
    audit_rechecks: int = Field(
        default=1, ge=0, le=1, description="hidden-seed re-checks of a surprising winner"
    )
    surprising_speedup: float = Field(
        default=10.0,
        gt=1,
        description="fitness above which a winner is re-checked on a fresh hidden seed, where the "
        "task sets no suspect_speedup (a new island best is re-checked too; each re-check "
        "spends one evaluation of the budget)",
    )
    proposals_per_generation: int = Field(default=8, ge=1, description="graph runs per generation")
    concurrency: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="graph runs at once; unset: from the evaluator slots and the measured model "
        "and evaluation latencies (Little's law, evolution/pace.py)",
    )
    sweep_configurations: int = Field(
        default=6,
        ge=0,
        le=64,
        description="configurations of each new island best a model wrote, and of each seed (with "
        "@tunables), that the offline tuner proposes in the generations after, 2 a generation "
        "(0: none)",
    )
    tuner_share: float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="most of the budget the offline tuner's configurations (of the seeds and of "
        "the model-written island bests) may spend, a fraction (1: no bound of its own)",
    )
    duel_share: float = Field(
        default=0.08,
        gt=0,
        le=1,
        description="most of the budget head-to-heads may spend, the final confirmation's reserve "
        "included, a fraction; past it a close call keeps the incumbent (1: no bound of its own)",
    )
    recheck_share: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="most of the budget hidden-seed re-checks of winners may spend, a fraction; "
        "past it a winner stands unconfirmed (1: no bound of its own)",
    )
    stall_generations: int = Field(
        default=4,
        ge=0,
        description="stop after this many generations in a row with no new evaluation (0: never)",
    )
    raw_reply_chars: int = Field(
        default=16384, ge=0, description="characters kept of a malformed reply, in its event"
    )
    scratchpad_every: int = Field(
        default=5,
        ge=0,
        description="generations between the run's scratchpad notes (a "
        "summary of what was tried and learned, shown to the optimizer and mutator; 0: none)",
    )
    scratchpad_tokens: int = Field(
        default=400, ge=50, le=4000, description="longest scratchpad note, tokens"
    )
    scratchpad_writer: Literal["archive", "model"] = Field(
        default="archive",
        description="who writes the note: `archive` builds it from the "
        "archive, the same every time; `model` has the profiler_reader's model condense that "
        "(one call per note; the archive's note when the call fails)",
    )

    def recursion_limit(self) -> int:
        """langgraph steps one run may take: the longest path with every loop at its limit."""
        return 8 + 3 * (self.repair_turns + 1) + 2 * self.audit_rechecks


class ModelSettings(Section):
    """Which models serve which role, and the run's LLM budgets."""

    model: tuple[str, ...] = Field(
        default=(),
        description="litellm model strings behind every writing role (--model, repeatable: "
        "with several the bandit picks per call; a string is one model; HIPEVOLVE_MODEL when "
        "neither the flags nor the file set it); none: offline",
    )
    roles: dict[Role, tuple[str, ...]] = Field(
        default_factory=dict,
        description="role -> litellm model strings, instead of `model` for that role (several: "
        "the bandit picks per call; an empty list: that role runs offline); the auditor's model "
        "review is on only when listed here",
    )
    api_base: str | None = Field(default=None, description="a local OpenAI-compatible server")
    token_budget: int | None = Field(default=None, ge=1, description="tokens in+out per run")
    cost_budget_usd: float | None = Field(
        default=25.0,
        gt=0,
        description="dollars per run; the run stops there (a model with no known price costs "
        "nothing here); raise it with --cost-budget",
    )
    timeout_s: float = Field(default=120.0, gt=0, description="per request, seconds")
    stream: bool = Field(
        default=False,
        description="receive replies as a stream (long replies never sit idle "
        "past timeout_s; usage asked for with include_usage)",
    )
    max_concurrent: int | None = Field(
        default=None, ge=1, description="requests in flight to one model at once; unset: no bound"
    )
    max_retries: int = Field(default=4, ge=0, description="retries of a failed request")
    backoff_s: float = Field(default=1.0, gt=0, description="first wait between retries, seconds")
    exploration: float = Field(default=1.0, ge=0, description="UCB exploration weight")
    max_reply_tokens: int = Field(default=8192, ge=256, description="longest reply, tokens")
    temperature: float | None = Field(
        default=None, ge=0, description="sampling temperature; unset: the provider's default"
    )

    @field_validator("model", mode="before")
    @classmethod
    def _models_listed(cls, value: Any) -> Any:
        """One string is one model; a list keeps its first mention of each, in order."""
        if value is None:
            return ()
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list | tuple):
            return tuple(dict.fromkeys(value))
        return value

    @classmethod
    def for_model(cls, *models: str, **kw: Any) -> ModelSettings:
        """These models behind every writing role (what `--model M [--model N]` means)."""
        return cls(model=models, **kw)

    def role_models(self) -> dict[str, tuple[str, ...]]:
        """role -> the models behind it; a role not here (or with none) runs offline."""
        every = {r: self.model for r in WRITING_ROLES} if self.model else {}
        return {**every, **self.roles}

    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for ms in self.role_models().values() for m in ms))


class FitnessSettings(Section):
    """How a run turns timings into a fitness it can trust (DESIGN.md "Fitness")."""

    baseline_trials: int = Field(
        default=100,
        ge=10,
        description="most trials of the run's baseline timing of the "
        "reference (and of each strong baseline) on a case",
    )
    baseline_target: float = Field(
        default=0.02,
        ge=0,
        lt=1,
        description="the baseline's trials stop once a case's median "
        "is known to this relative ~95% half-width (at least 10 trials, rounds of 10, at most "
        "3 s of rounds a case); 0: baseline_trials exactly",
    )
    noise_floor: float = Field(
        default=0.03,
        ge=0,
        lt=1,
        description="relative difference two evaluations in fresh "
        "judges cannot tell apart; closer calls go head to head",
    )
    duel_rounds: int = Field(
        default=2,
        ge=0,
        le=8,
        description="rounds (each candidate once) of a head-to-head; "
        "0: no head-to-heads, a close call keeps the incumbent",
    )
    confirm_rounds: int = Field(
        default=3,
        ge=0,
        le=8,
        description="rounds of the final head-to-head of the run's best "
        "against the seed (reserved from the budget); 0: not confirmed",
    )
    min_gain: float = Field(
        default=0.01, ge=0, lt=1, description="smallest gain a head-to-head calls a win"
    )
    check_drift: float = Field(
        default=1.5,
        gt=1,
        description="a reference timed inside an evaluation this many times "
        "off the run's baseline is flagged as machine noise",
    )
    check_trials: int = Field(
        default=5,
        ge=0,
        description="trials of that check in the evaluations that make it; "
        "0: as many as the candidate's",
    )
    check_every: int = Field(
        default=10,
        ge=0,
        description="the reference is timed inside every this-many-th "
        "evaluation of a run, as that check (GDN's took 3.2 s of a 12 s evaluation on an "
        "H200, and it is never the fitness); 0: never",
    )


class RunSettings(Section):
    archive: Path = Field(
        default=Path("hipevolve.db"),
        description="the SQLite archive runs are written to (created if missing)",
    )
    seed: int = Field(
        default=0, description="random seed of a new run: the same seed makes the same search"
    )


class Settings(Section):
    tasks: TaskSettings = Field(default_factory=TaskSettings, description="where tasks are found")
    verifier: VerifierSettings = Field(
        default_factory=VerifierSettings, description="compiling, checking and timing candidates"
    )
    evolution: EvolutionSettings = Field(
        default_factory=EvolutionSettings, description="islands, selection, migration, reseeding"
    )
    agents: AgentLimits = Field(
        default_factory=AgentLimits, description="hard limits on the agents' graph"
    )
    models: ModelSettings = Field(
        default_factory=ModelSettings, description="the LLMs behind the agents, and LLM budgets"
    )
    fitness: FitnessSettings = Field(
        default_factory=FitnessSettings, description="run baselines, noise and head-to-heads"
    )
    run: RunSettings = Field(default_factory=RunSettings, description="the main job's defaults")


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """base with override's values over it, table by table; None in override means not given."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping):
            below = merged.get(key)
            value = _merge(below if isinstance(below, Mapping) else {}, value)
            if value or key in merged:
                merged[key] = value
        elif value is not None:
            merged[key] = value
    return merged


def _holds(data: Mapping[str, Any], loc: tuple[Any, ...]) -> bool:
    """Whether data sets the setting at loc (or something under it)."""
    node: Any = data
    for part in loc:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def load_settings(flags: Mapping[str, Any] | None = None, cwd: Path | None = None) -> Settings:
    """Defaults, then ./hipevolve.toml if present, then the flags given (None means not given).

    flags is a partial tree ({"verifier": {"backend": "cuda"}}); HIPEVOLVE_MODEL fills
    models.model when neither sets it. Raises a one-line UserError naming the bad setting.
    """
    path = (cwd or Path.cwd()) / CONFIG_FILE
    written: dict[str, Any] = {}
    if path.is_file():
        try:
            written = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise UserError(f"{path}: not valid TOML: {e}", "fix or remove the file") from None
    given = _merge({}, flags or {})
    data = _merge(written, given)
    if os.environ.get(MODEL_ENV) and not _holds(data, ("models", "model")):
        data = _merge(data, {"models": {"model": os.environ[MODEL_ENV]}})
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = tuple(p for p in first["loc"] if p != "[key]")
        where = ".".join(str(p) for p in loc) or "settings"
        if first["type"] == "extra_forbidden":
            message = "unknown setting"
        elif first["type"] == "value_error":
            message = str(first["ctx"]["error"])
        else:
            message = first["msg"]
        raise UserError(
            f"setting {where}: {message} (from {_source(loc, given, written, path)})",
            "see the settings in hipevolve/core/config.py",
        ) from None


def _source(
    loc: tuple[Any, ...], given: Mapping[str, Any], written: Mapping[str, Any], path: Path
) -> str:
    """Where the bad setting at loc came from: the flags, the file, or (a section's rule over
    values from both) either."""
    in_flags, in_file = _holds(given, loc), _holds(written, loc)
    if in_flags and (not in_file or not isinstance(_at(given, loc), Mapping)):
        return "the flags"  # a flag's value wins over the file's
    if in_file and not in_flags:
        return str(path)
    return f"{path} or the flags" if path.is_file() else "the flags"


def _at(data: Mapping[str, Any], loc: tuple[Any, ...]) -> Any:
    for part in loc:
        data = data[part]
    return data
