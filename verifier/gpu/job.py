"""The judge's job: one evaluation of one candidate, defined once for both ends of the pipe.

The controller (isolate.py) builds a `WorkerJob` and writes it as one JSON line on the judge's
stdin (`to_json`); the judge (worker.py) reads it back (`from_json`) and never changes it. What the
judge derives per case from the reference's outputs (`CaseSizes`) lives beside the job, in the
judge, and reaches the candidate's process only inside the `SandboxJob` the judge hands its
sandbox (sandbox.py): a subset of the job, so the candidate never learns the tolerance, the gates
or the timeouts it is judged by.

Standard library only (no pydantic): the judge and the sandbox import this module. Defaults
that come from the settings (the stage timeouts) are the controller's to fill in
(isolate.timeouts_of); every instance here is frozen, and its dict fields are never mutated.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from hipevolve.core.hardware import by_device_name

STARTUP_S = 60.0  # a judge or a sandbox imports torch and creates its device context (s)
MARGIN_S = 30.0  # the controller's deadline beyond the sum of the stage timeouts (s)
FORMATS = ("native", "kernelbench")
DEVICES = ("cuda", "cpu")
TIMINGS = ("eager", "graph")  # what a timed trial is: one eager call, or one CUDA graph replay


def _set(obj: object, name: str, value: Any) -> None:
    """Normalises a field of a frozen instance in __post_init__ (a list to a tuple, ...)."""
    object.__setattr__(obj, name, value)


def _path(value: str | Path | None) -> Path | None:
    return None if value is None else Path(value)


def _resolved(value: Path | None) -> str | None:
    """An absolute path for the judge, which runs in a folder of its own."""
    return str(Path(value).resolve()) if value else None


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True, kw_only=True)
class CaseJob:
    """One case of the task, as the reference and the candidate are built for it."""

    name: str
    init: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    timed: bool = True
    roofline: dict[str, float] | None = None  # {bytes, flops}
    # The fastest time (us) this case is believed to take on this card: the strongest baseline
    # timed in this run over the run's margin (pipeline.Bounds). Faster is suspect; None: the
    # roofline alone, or where there is none, the reference bound (WorkerJob.suspect_speedup).
    fastest_us: float | None = None
    fastest_why: str = ""  # what fastest_us comes from, for the verdict's one line


@dataclass(frozen=True, kw_only=True)
class CandidateJob:
    """The candidate's files: model.py (native) or the KernelBench .py file, and for a native
    candidate its compiled .so and kernel.hip; for a KernelBench one, `library` is the folder
    of its prebuilt load_inline extensions (verifier/gpu/sandbox/prebuilt.py), when built."""

    format: str  # one of FORMATS
    model: Path
    library: Path | None = None
    source: Path | None = None

    def __post_init__(self) -> None:
        _require(
            self.format in FORMATS, f"candidate format {self.format!r} is not one of {FORMATS}"
        )
        _set(self, "model", Path(self.model))
        _set(self, "library", _path(self.library))
        _set(self, "source", _path(self.source))

    def may_start_processes(self) -> bool:
        """Only a load_inline candidate built nowhere else needs to run compilers inside its
        sandbox."""
        if self.format != "kernelbench" or self.library is not None:
            return False
        text = self.model.read_text(errors="replace")
        return "load_inline" in text or "cpp_extension" in text

    def resolved(self) -> dict[str, str | None]:
        """Its wire form: every path absolute."""
        return {
            "format": self.format,
            "model": _resolved(self.model),
            "library": _resolved(self.library),
            "source": _resolved(self.source),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CandidateJob:
        return cls(**data)


BASELINE_KINDS = ("module", "torch_compile")


@dataclass(frozen=True, kw_only=True)
class BaselineJob:
    """A strong baseline a reference-only job times after the reference (TaskSpec.baselines):
    trusted code shipped with the task, run in the judge like the reference."""

    name: str
    kind: str = "module"  # one of BASELINE_KINDS
    module: Path | None = None  # kind "module": its file, a Model like the reference's
    # Where its JIT compilers keep their kernels (Triton's and Inductor's caches), shared by
    # every judge and run of this machine and by the compiles made beside a run's first
    # evaluations (verifier/baseline_warm.py); None: the judge's own folder, gone with it.
    compiles: Path | None = None

    def __post_init__(self) -> None:
        _require(
            self.kind in BASELINE_KINDS,
            f"baseline kind {self.kind!r} is not one of {BASELINE_KINDS}",
        )
        _set(self, "module", _path(self.module))
        _set(self, "compiles", _path(self.compiles))

    def resolved(self) -> dict[str, str | None]:
        return {
            "name": self.name,
            "kind": self.kind,
            "module": _resolved(self.module),
            "compiles": _resolved(self.compiles),
        }


@dataclass(frozen=True, kw_only=True)
class Timeouts:
    """Seconds each stage may take. load, check and timing come from the verifier settings
    (isolate.timeouts_of); a process's start-up is not a setting."""

    load: float  # import/compile the candidate
    check: float  # every correctness call
    timing: float  # every timed trial
    startup: float = STARTUP_S  # a process imports torch

    def __post_init__(self) -> None:
        for name in ("startup", "load", "check", "timing"):
            _set(self, name, float(getattr(self, name)))
            _require(getattr(self, name) > 0, f"timeout {name} must be positive")


@dataclass(frozen=True, kw_only=True)
class PeakRates:
    bytes_per_s: float  # HBM bandwidth, H200: 4.8e12
    flops_per_s: float  # dense matrix rate, H200 bf16: 990e12

    def __post_init__(self) -> None:
        _set(self, "bytes_per_s", float(self.bytes_per_s))
        _set(self, "flops_per_s", float(self.flops_per_s))
        _require(self.bytes_per_s > 0 and self.flops_per_s > 0, "peak rates must be positive")


@dataclass(frozen=True, kw_only=True)
class WorkerJob:
    """One evaluation of one candidate, as the judge reads it (see `to_json`)."""

    task: str
    reference: Path
    cases: tuple[CaseJob, ...]
    tolerance: dict[str, Any]  # {kind, atol, rtol, max_rel_rms}
    seeds: tuple[int, ...]  # the last is hidden from agents
    candidate: CandidateJob | None  # None: a reference-only job (reference_only)
    timeouts: Timeouts
    device: str = "cuda"  # one of DEVICES
    do_timing: bool = True
    trials: int = 30
    warmup: int = 5
    workdir: Path | None = None  # set by run_worker: the judge's folder
    peak: PeakRates | None = None  # roofline gate; None: no gate
    # Speedups over the reference timed in this job above this are suspect, only on a case
    # with no physical bound (no roofline and no fastest_us): a slow reference is no evidence.
    suspect_speedup: float = 10.0
    flush_bytes: int = 512 << 20  # L2 + Infinity Cache flush
    timing_budget_bytes: int = 1 << 30  # memory for timing inputs
    timing_seed: int = 1_000_003  # first seed of the timing inputs
    min_trial_us: float = 0.5  # no real call is faster
    max_processes: int = 64  # watchdog, load_inline candidates only
    deadline_s: float | None = None  # overall; None: from timeouts
    allow_processes: bool = False  # set by run_worker: CandidateJob.may_start_processes
    reference_only: bool = False  # time the reference alone (a run's baseline); no candidate
    reference_trials: int = 0  # the reference's trials; 0: `trials` (a run's check: a few)
    # False: the reference is not timed (a run's evaluation between its periodic noise checks:
    # the run's stored baseline is the denominator). Reference-only jobs always time it.
    time_reference: bool = True
    # A run's baseline: each case (reference and strong baselines) is timed in rounds until its
    # median's relative ~95% interval is this tight or `trials` are spent (0: `trials` exactly).
    trial_target: float = 0.0
    # A re-check of a suspect candidate: the job's strong baselines are timed after the
    # candidate in this judge, side by side, on the same inputs and clock.
    side_by_side: bool = False
    timing: str = "eager"  # one of TIMINGS: the task's (TaskSpec.timing)
    baselines: tuple[BaselineJob, ...] = ()  # reference-only jobs: timed after the reference
    # Device memory the judge plans this evaluation for (memplan.py); None: what the device has
    # free when the judge starts the job (a CPU job: no plan). Set lower for a shared GPU.
    device_memory_bytes: int | None = None
    # A KernelBench candidate whose forward (or extension) computes with PyTorch is hacked: the
    # screen's rule (verifier/screen/compute.py) on what its plan and extension really ran. Set
    # by the pipeline; worker-level jobs leave it off (their pure-torch files test the harness).
    kernels_only: bool = False

    def __post_init__(self) -> None:
        _set(self, "reference", Path(self.reference))
        _set(self, "cases", tuple(self.cases))
        _set(self, "baselines", tuple(self.baselines))
        _set(self, "seeds", tuple(self.seeds))
        _set(self, "workdir", _path(self.workdir))
        # float fields are floats, as the pydantic model made them (200 is written 200.0)
        _set(self, "suspect_speedup", float(self.suspect_speedup))
        _set(self, "min_trial_us", float(self.min_trial_us))
        if self.deadline_s is not None:
            _set(self, "deadline_s", float(self.deadline_s))
        _require(len(self.cases) >= 1, "a job needs at least one case")
        _require(len(self.seeds) >= 1, "a job needs at least one seed")
        _require(self.device in DEVICES, f"device {self.device!r} is not one of {DEVICES}")
        _require(self.timing in TIMINGS, f"timing {self.timing!r} is not one of {TIMINGS}")
        _require(self.trials >= 1 and self.warmup >= 0, "trials >= 1 and warmup >= 0")
        _require(self.suspect_speedup > 1, "suspect_speedup must be above 1")
        _require(
            (self.candidate is None) == self.reference_only,
            "a job has a candidate unless it is reference-only",
        )
        _require(
            self.reference_only or self.side_by_side or not self.baselines,
            "only a reference-only or side-by-side job times strong baselines",
        )
        _require(self.flush_bytes >= 0 and self.min_trial_us >= 0, "negative flush or floor")
        _require(
            self.device_memory_bytes is None or self.device_memory_bytes > 0,
            "device_memory_bytes must be positive",
        )

    def case(self, name: str) -> CaseJob:
        return next(c for c in self.cases if c.name == name)

    def deadline(self) -> float:
        if self.deadline_s is not None:
            return self.deadline_s
        t = self.timeouts
        # judge and sandbox start-ups, reference computed and timed like the candidate
        return 2 * t.startup + t.load + 2 * t.check + 2 * t.timing + MARGIN_S

    def to_json(self) -> str:
        data = asdict(self)
        data["reference"] = _resolved(self.reference)
        data["candidate"] = self.candidate.resolved() if self.candidate else None
        data["workdir"] = str(self.workdir) if self.workdir is not None else None
        data["baselines"] = [b.resolved() for b in self.baselines]
        return json.dumps(data)

    @classmethod
    def from_json(cls, line: str | bytes) -> WorkerJob:
        data = json.loads(line)
        peak = data.get("peak")
        return cls(
            **data
            | {
                "cases": tuple(CaseJob(**c) for c in data["cases"]),
                "candidate": _candidate(data["candidate"]),
                "timeouts": Timeouts(**data["timeouts"]),
                "peak": PeakRates(**peak) if peak else None,
                "baselines": tuple(BaselineJob(**b) for b in data.get("baselines", ())),
            }
        )


def _candidate(data: dict[str, Any] | None) -> CandidateJob | None:
    """A job's candidate read back from JSON (None: a reference-only job)."""
    return CandidateJob.from_dict(data) if data else None


def on_card(job: WorkerJob, card: str) -> WorkerJob:
    """The job with its roofline gate at the peaks of the GPU named `card`
    (torch.cuda.get_device_name), where hipevolve knows that GPU; else as it came."""
    gpu = by_device_name(card)
    if job.peak is None or gpu is None:
        return job
    peak = PeakRates(bytes_per_s=gpu.hbm_bytes_per_s, flops_per_s=gpu.bf16_flops_per_s)
    return replace(job, peak=peak)


@dataclass(frozen=True, kw_only=True)
class CaseSizes:
    """What the judge derives for one case from the reference's first seed, beside the job."""

    poison_sizes: tuple[int, ...]  # bytes of each output: the allocator is poisoned with them
    input_bytes: int  # one input set
    timing_sets: int  # distinct input sets the timed trials cycle through


@dataclass(frozen=True, kw_only=True)
class SandboxCase:
    name: str
    init: dict[str, Any]
    inputs: dict[str, Any]
    timed: bool
    poison_sizes: tuple[int, ...]
    timing_sets: int

    def __post_init__(self) -> None:
        _set(self, "poison_sizes", tuple(self.poison_sizes))


@dataclass(frozen=True, kw_only=True)
class SandboxJob:
    """What the judge tells the candidate's process (sandbox.py): how to build and run the
    candidate on each case and seed, and nothing it is judged by."""

    reference: Path
    seeds: tuple[int, ...]
    candidate: CandidateJob
    device: str
    trials: int
    warmup: int
    flush_bytes: int
    timing_seed: int
    allow_processes: bool
    reserve_bytes: int  # device memory taken in one block before the candidate loads
    cases: tuple[SandboxCase, ...]
    plan: dict[str, Any] | None = None  # a native candidate's launch plan (plan.py)
    timing: str = "eager"  # one of TIMINGS (timing.py)
    # Under a lean memory plan (memplan.py): check calls whose outputs stay alive at once; 0:
    # every one of a case's, as always (the judge's plan says which).
    kept_calls: int = 0
    kernels_only: bool = False  # WorkerJob.kernels_only: the executor watches extension calls

    def __post_init__(self) -> None:
        _set(self, "reference", Path(self.reference))
        _set(self, "seeds", tuple(self.seeds))
        _set(self, "cases", tuple(self.cases))
        _require(self.timing in TIMINGS, f"timing {self.timing!r} is not one of {TIMINGS}")

    @classmethod
    def of(
        cls,
        job: WorkerJob,
        sizes: dict[str, CaseSizes],
        reserve_bytes: int,
        plan: dict[str, Any] | None = None,
        kept_calls: int = 0,
    ) -> SandboxJob:
        return cls(
            plan=plan,
            kept_calls=kept_calls,
            kernels_only=job.kernels_only,
            reference=job.reference,
            seeds=job.seeds,
            candidate=job.candidate,
            device=job.device,
            trials=job.trials,
            warmup=job.warmup,
            flush_bytes=job.flush_bytes,
            timing_seed=job.timing_seed,
            timing=job.timing,
            allow_processes=job.allow_processes,
            reserve_bytes=reserve_bytes,
            cases=tuple(
                SandboxCase(
                    name=c.name,
                    init=c.init,
                    inputs=c.inputs,
                    timed=c.timed,
                    poison_sizes=sizes[c.name].poison_sizes,
                    timing_sets=sizes[c.name].timing_sets,
                )
                for c in job.cases
            ),
        )

    def to_json(self) -> str:
        data = asdict(self)
        data["reference"] = _resolved(self.reference)
        data["candidate"] = self.candidate.resolved() if self.candidate else None
        return json.dumps(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SandboxJob:
        return cls(
            **data
            | {
                "cases": tuple(SandboxCase(**c) for c in data["cases"]),
                "candidate": _candidate(data["candidate"]),
            }
        )


@dataclass(frozen=True, kw_only=True)
class RecordJob:
    """What the judge tells the recorder (record.py) of a native candidate: per case, its init
    arguments and the forward's arguments as stand-in specs (plan.input_specs), no data, no seed."""

    reference: Path
    candidate: CandidateJob
    cases: dict[str, dict[str, Any]]  # name -> {"init": {...}, "inputs": [spec | value]}

    def to_json(self) -> str:
        return json.dumps(
            {
                "record": True,
                "reference": _resolved(self.reference),
                "candidate": self.candidate.resolved(),
                "cases": self.cases,
            }
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordJob:
        return cls(
            reference=Path(data["reference"]),
            candidate=CandidateJob.from_dict(data["candidate"]),
            cases=data["cases"],
        )
