"""The Evaluation: what the verifier says about one candidate on one task. Crosses every layer."""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import Field

from hipevolve.core.base import Frozen


class Status(StrEnum):
    ok = "ok"
    parse_error = "parse_error"  # the candidate could not be read (format, missing file)
    rejected = "rejected"  # a strict static check failed: never compiled, never run
    compile_error = "compile_error"
    incorrect = "incorrect"
    runtime_error = "runtime_error"  # raised, crashed, device error, resource exhaustion
    timeout = "timeout"
    hacked = "hacked"  # a dynamic hack check fired
    suspect = "suspect"  # correct, but faster than physics or 10x allows: not crowned
    compiled = "compiled"  # static backend only: compiles and analysed for AMD, never run


class StaticFacts(Frozen):
    """AMD resource usage and ISA facts of one kernel, from the static gfx compile."""

    kernel: str
    target: str = Field(description="gfx942, gfx90a, ...")
    vgprs: int = 0
    agprs: int = 0
    sgprs: int = 0
    lds_bytes: int = 0
    scratch_bytes: int = 0
    occupancy: int = Field(default=0, description="waves per SIMD the compiler reports")
    spills_vgpr: int = 0
    spills_sgpr: int = 0
    mfma: int = Field(default=0, description="MFMA instructions in the ISA")
    global_loads: dict[str, int] = Field(default_factory=dict, description="width -> count")
    buffer_loads: dict[str, int] = Field(default_factory=dict, description="width -> count")
    lds_ops: int = 0

    @property
    def spills(self) -> int:
        return self.spills_vgpr + self.spills_sgpr


class CaseResult(Frozen):
    case: str
    correct: bool
    time_us: float | None = Field(default=None, description="the candidate's median trial")
    ref_time_us: float | None = Field(
        default=None, description="the denominator of the speedup: the run's baseline in a run "
        "(hipevolve/core/baseline.py), else the reference timed inside this evaluation")
    ref_check_us: float | None = Field(
        default=None, description="in a run: the reference timed inside this evaluation, a check "
        "of the machine's noise, not a term of the fitness")
    cv: float | None = Field(default=None, description="coefficient of variation of the trials")
    ci: float | None = Field(
        default=None, description="relative half-width of the median's ~95% interval (noise.py)")
    max_abs_err: float | None = None
    rel_rms_err: float | None = None
    roofline_fraction: float | None = Field(
        default=None, description="memory-bound time over measured time (1.0 = at the roofline)")
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
    def fitness(self) -> float:
        """Geometric-mean speedup over the timed cases; 0 unless the candidate is ok."""
        speedups = [c.speedup for c in self.cases if c.speedup]
        if self.status is not Status.ok or not speedups:
            return 0.0
        return math.exp(sum(math.log(s) for s in speedups) / len(speedups))
