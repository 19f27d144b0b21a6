"""A run's baseline: the reference timed once per run, device and case, every speedup's denominator.

A host-bound PyTorch reference timed inside each evaluation swung 1.8x within one GDN run while the
candidates' own times held within 3%, and a fitness of reference time over candidate time then
followed the reference: the run crowned a kernel 22% slower than its seed. So a run times the
reference once, at its start, in a judge on the device it evaluates on, with
FitnessSettings.baseline_trials trials, and stores it in the archive (a `baseline` event with the
device, clocks and toolchain; a resumed run on the same device reuses it). `rebase` makes every
evaluation of the run measure against it: a case's `ref_time_us` becomes the baseline's and the
reference timed inside the evaluation moves to `ref_check_us`, a check of the machine's noise
(flagged when it strays by FitnessSettings.check_drift) and never a term of the fitness. Ranking
by the rebased fitness is ranking by the candidates' own times.
"""

from __future__ import annotations

from pydantic import Field

from hipevolve.core.base import Frozen
from hipevolve.core.evaluation import CaseResult, Evaluation

NOISE_FLAG = "noise:"


class CaseBaseline(Frozen):
    case: str
    time_us: float = Field(gt=0, description="median of the trials")
    ci: float = Field(ge=0, description="relative half-width of the median's ~95% interval")
    trials: int = Field(ge=1)


class RunBaseline(Frozen):
    """The reference's time on each timed case, measured once for a run on one device."""

    task: str
    device: str = Field(description="the GPU's name, as the evaluator reports it")
    toolchain: str
    clocks: str = Field(default="", description="clocks the driver reported when it was timed")
    cases: dict[str, CaseBaseline]

    def rebase(self, evaluation: Evaluation, drift: float = 1.5) -> Evaluation:
        """The evaluation measured against this baseline (see the module docstring). Idempotent:
        an evaluation rebased before (for another run) keeps its own reference check."""
        if not evaluation.cases or not self.cases:
            return evaluation
        cases, flags = [], [f for f in evaluation.flags if not f.startswith(NOISE_FLAG)]
        for c in evaluation.cases:
            base = self.cases.get(c.case)
            if base is None or c.time_us is None:
                cases.append(c)
                continue
            check = c.ref_check_us if c.ref_check_us is not None else c.ref_time_us
            if check and not (1 / drift <= check / base.time_us <= drift):
                flags.append(f"{NOISE_FLAG} {c.case}: the reference took {check:.1f} us in this "
                             f"evaluation, {check / base.time_us:.2f}x its run baseline "
                             f"{base.time_us:.1f} us (not in the fitness)")  # fmt: skip
            cases.append(c.model_copy(update={"ref_time_us": base.time_us, "ref_check_us": check}))
        return evaluation.model_copy(update={"cases": tuple(cases), "flags": tuple(flags)})

    def uncertainty(self) -> float:
        """Relative uncertainty its cases add to a geometric-mean speedup."""
        return geomean_uncertainty([c.ci for c in self.cases.values()])


def evaluation_uncertainty(cases: tuple[CaseResult, ...]) -> float:
    """Relative uncertainty of an evaluation's geometric mean over its timed cases."""
    return geomean_uncertainty([c.ci for c in cases if c.time_us and c.ci is not None])


def geomean_uncertainty(relative: list[float]) -> float:
    """Relative uncertainty of a geometric mean of independent ratios, each with its own: the
    mean of n logs has the root mean square of their spreads over sqrt(n)."""
    if not relative:
        return 0.0
    n = len(relative)
    return (sum(r * r for r in relative) / n) ** 0.5 / n**0.5
