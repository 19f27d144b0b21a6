"""The Evaluation: what the verifier says about one candidate on one task. Crosses every layer."""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import Field

from hipevolve.core.base import Frozen


class Status(StrEnum):  # docs/STATUSES.md: what each means for a candidate, a dataset, a repair
    ok = "ok"
    parse_error = "parse_error"  # the candidate could not be read (format, missing file)
    rejected = "rejected"  # a rule refused it before it was checked or timed
    compile_error = "compile_error"
    incorrect = "incorrect"
    runtime_error = "runtime_error"  # raised, crashed, device error, resource exhaustion
    timeout = "timeout"
    hacked = "hacked"  # did what only a hack does, in its build or while it ran
    suspect = "suspect"  # correct, but faster than the card or the task's bounds allow
    compiled = "compiled"  # static backend only: compiles and analysed for AMD, never run


# The flag of a runtime_error that the judge's own code raised, not the candidate's
# (verifier/gpu/judge/worker.py writes it as a literal: that module imports nothing of ours).
JUDGE_ERROR = "judge-error"


class StaticFacts(Frozen):
    """Resource usage and ISA facts of one kernel, from a static compile: the AMD device compile
    for a gfx target (verifier/build/amd_static.py), or, where that toolchain is absent, the
    CUDA build that runs (verifier/build/cuda_static.py; target sm_XX, `platform` "cuda"). The
    AMD names stand for their CUDA counterparts there, as each field says."""

    kernel: str
    target: str = Field(description="gfx942, gfx90a, ... (AMD); sm_90, ... (the CUDA build)")
    vgprs: int = Field(default=0, description="VGPRs; on CUDA, registers per thread")
    agprs: int = 0
    sgprs: int = 0
    lds_bytes: int = Field(default=0, description="static LDS (on CUDA: shared memory) a block")
    scratch_bytes: int = Field(
        default=0, description="private memory a lane; on CUDA, the stack frame a thread"
    )
    occupancy: int = Field(
        default=0,
        description="waves per SIMD the compiler reports; on CUDA, resident warps per "
        "SM sub-partition from registers, shared memory and the launch bound (else 256 threads)",
    )
    spills_vgpr: int = Field(default=0, description="on CUDA, spill-store bytes / 4")
    spills_sgpr: int = 0
    mfma: int = Field(
        default=0,
        description="MFMA instructions in the ISA; on CUDA, tensor-core instructions "
        "(mma, wgmma) in the PTX",
    )
    global_loads: dict[str, int] = Field(default_factory=dict, description="width -> count")
    buffer_loads: dict[str, int] = Field(default_factory=dict, description="width -> count")
    lds_ops: int = 0

    @property
    def spills(self) -> int:
        return self.spills_vgpr + self.spills_sgpr

    @property
    def platform(self) -> str:
        """The facts' platform: "cuda" for an NVIDIA build (target sm_XX), else "amd"."""
        return "cuda" if self.target.startswith("sm_") else "amd"


class CaseResult(Frozen):
    case: str
    correct: bool
    time_us: float | None = Field(default=None, description="the candidate's median trial")
    ref_time_us: float | None = Field(
        default=None,
        description="the denominator of the speedup: the run's baseline in a run "
        "(hipevolve/core/baseline.py), else the reference timed inside this evaluation",
    )
    ref_check_us: float | None = Field(
        default=None,
        description="in a run: the reference timed inside this evaluation, a check "
        "of the machine's noise, not a term of the fitness",
    )
    cv: float | None = Field(default=None, description="coefficient of variation of the trials")
    ci: float | None = Field(
        default=None, description="relative half-width of the median's ~95% interval (noise.py)"
    )
    max_abs_err: float | None = None
    rel_rms_err: float | None = None
    roofline_fraction: float | None = Field(
        default=None, description="memory-bound time over measured time (1.0 = at the roofline)"
    )
    message: str = ""

    @property
    def speedup(self) -> float | None:
        if self.time_us and self.ref_time_us:
            return self.ref_time_us / self.time_us
        return None


class Evaluation(Frozen):
    status: Status
    task: str
    backend: str = ""
    cases: tuple[CaseResult, ...] = ()
    static: tuple[StaticFacts, ...] = ()
    message: str = Field(default="", description="one line: why this status")
    compile_log: str = Field(default="", description="trimmed, in the candidate's line numbers")
    mismatch: str = Field(default="", description="trimmed summary of the first wrong outputs")
    flags: tuple[str, ...] = Field(default=(), description="static and dynamic check findings")
    seconds: dict[str, float] = Field(default_factory=dict, description="stage -> wall seconds")

    @property
    def ok(self) -> bool:
        return self.status is Status.ok

    @property
    def judge_failed(self) -> bool:
        """The harness failed here, not the kernel: this evaluation says nothing about it."""
        return JUDGE_ERROR in self.flags

    @property
    def fitness(self) -> float:
        """Geometric-mean speedup over the timed cases; 0 unless the candidate is ok."""
        speedups = [c.speedup for c in self.cases if c.speedup]
        if self.status is not Status.ok or not speedups:
            return 0.0
        return math.exp(sum(math.log(s) for s in speedups) / len(speedups))
