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

The strong baselines a task names (TaskSpec.baselines: torch.matmul for GEMMs, torch.compile of
the reference, FLA and FlashQLA for gated_delta_net) are timed in jobs of one case each (the
run's evaluations go between them: `joined`), each right after the reference on that case,
with the same clock, trials, input sets and timing mode, and kept in `others`; one
that could not be timed (not installed, failed to build, or outside the task's tolerance) is in
`unavailable` with one line why. They are never the fitness: `speedups` reports a kernel's
speedup over each (geometric mean over the cases both timed, with its uncertainty) for the run's
final lines and exports.
"""

from __future__ import annotations

import math

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
    others: dict[str, dict[str, CaseBaseline]] = Field(
        default_factory=dict, description="each strong baseline the task names: its timed cases"
    )
    unavailable: dict[str, str] = Field(
        default_factory=dict, description="strong baselines not timed, each with one line why"
    )
    notes: dict[str, str] = Field(
        default_factory=dict,
        description="how a strong baseline was timed, where it differs "
        "from the task's timing (a forward CUDA graphs could not capture)",
    )
    held_s: dict[str, float] = Field(
        default_factory=dict,
        description="seconds each strong baseline held its judge (and so a GPU slot): its "
        "imports, builds, compiles and autotuning included",
    )
    compiled_s: float | None = Field(
        default=None,
        description="seconds their kernels took to compile beside the run's evaluations, off "
        "the GPU slot, before their jobs (verifier/baseline_warm.py); None: not compiled so",
    )
    pending: tuple[str, ...] = Field(
        default=(),
        description="strong baselines the task names that are still to be timed: "
        "a run's start times the reference alone, and these beside its first evaluations",
    )

    def with_strong(self, other: RunBaseline) -> RunBaseline:
        """This baseline (its reference stays the run's denominator) with the strong
        baselines `other` timed, and nothing pending."""
        return self.model_copy(
            update={
                "others": other.others,
                "unavailable": other.unavailable,
                "notes": other.notes,
                "held_s": other.held_s,
                "compiled_s": other.compiled_s,
                "pending": (),
            }
        )

    @classmethod
    def joined(cls, pieces: list[RunBaseline]) -> RunBaseline:
        """One baseline from jobs that each timed some of the cases (their first piece's
        device, toolchain and clocks): a strong baseline unavailable in any piece is
        unavailable (its first reason), as one job would have dropped it there."""
        unavailable: dict[str, str] = {}
        for piece in pieces:
            for name, why in piece.unavailable.items():
                unavailable.setdefault(name, why)
        others: dict[str, dict[str, CaseBaseline]] = {}
        held: dict[str, float] = {}
        for piece in pieces:
            for name, timed in piece.others.items():
                if name not in unavailable:
                    others.setdefault(name, {}).update(timed)
            for name, seconds in piece.held_s.items():
                held[name] = round(held.get(name, 0.0) + seconds, 1)
        notes: dict[str, str] = {}
        for piece in pieces:
            for name, note in piece.notes.items():
                notes[name] = f"{notes[name]}; {note}"[:300] if name in notes else note
        return pieces[0].model_copy(
            update={
                "cases": {k: v for piece in pieces for k, v in piece.cases.items()},
                "others": others,
                "unavailable": unavailable,
                "notes": notes,
                "held_s": held,
                "pending": (),
            }
        )

    def strong_line(self) -> str:
        """One line: each strong baseline timed (on how many cases) or not (why), and how long
        it held the GPU slot; "" when the task names none."""
        parts = []
        for name in sorted({*self.others, *self.unavailable}):
            held = f", {self.held_s[name]:.0f} s on the GPU slot" if name in self.held_s else ""
            if name in self.others:
                parts.append(f"{name} timed on {len(self.others[name])} cases{held}")
            else:
                parts.append(f"{name} not timed ({self.unavailable[name]}{held})")
        if parts and self.compiled_s is not None:
            parts.append(f"compiled beside the run's evaluations first, in {self.compiled_s:.0f} s")
        return f"strong baselines: {'; '.join(parts)}" if parts else ""

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
                flags.append(
                    f"{NOISE_FLAG} {c.case}: the reference took {check:.1f} us in this "
                    f"evaluation, {check / base.time_us:.2f}x its run baseline "
                    f"{base.time_us:.1f} us (not in the fitness)"
                )
            cases.append(c.model_copy(update={"ref_time_us": base.time_us, "ref_check_us": check}))
        return evaluation.model_copy(update={"cases": tuple(cases), "flags": tuple(flags)})

    def speedups(self, cases: tuple[CaseResult, ...]) -> list[Speedup]:
        """An evaluation's speedup over the reference and over each strong baseline timed."""
        timings = {REFERENCE: self.cases, **self.others}
        found = (speedup_over(name, base, cases) for name, base in timings.items())
        return [s for s in found if s is not None]

    def against(self, cases: tuple[CaseResult, ...]) -> str:
        """One line: those speedups with their uncertainty, and what was not timed and why."""
        parts = [s.describe() for s in self.speedups(cases)]
        missing = "; ".join(f"{name} not timed ({why})" for name, why in self.unavailable.items())
        return "; ".join(p for p in (", ".join(parts), missing) if p)

    def bounds(
        self, margin: float, suspect_speedup: float, roofline_cases: frozenset[str]
    ) -> dict[str, tuple[float, str]]:
        """Each case's fastest believable time (us) in this run, with what it comes from: the
        strongest baseline timed on the case over `margin`; on a case no strong baseline timed
        and with no roofline, the reference over `suspect_speedup` (nothing physical is known
        there). A case with a roofline and no strong baseline has none: the roofline decides."""
        found: dict[str, tuple[float, str]] = {}
        for case, reference in self.cases.items():
            timed = [(b[case].time_us, name) for name, b in self.others.items() if case in b]
            if timed:
                us, name = min(timed)
                found[case] = (us / margin, f"{margin:g}x {name}'s {us:.1f} us in this run")
            elif case not in roofline_cases:
                found[case] = (
                    reference.time_us / suspect_speedup,
                    f"{suspect_speedup:g}x the reference's {reference.time_us:.1f} us "
                    "in this run (the case has no roofline and no strong baseline)",
                )
        return found

    def uncertainty(self) -> float:
        """Relative uncertainty its cases add to a geometric-mean speedup."""
        return geomean_uncertainty([c.ci for c in self.cases.values()])


class RunBounds(Frozen):
    """What a run tells each of its evaluations beyond the task (PipelineEvaluator.use_baseline):
    each case's fastest believable time (RunBaseline.bounds) and whether the reference is timed
    inside the evaluation (only as a periodic check of the machine's noise: the run's stored
    baseline is the denominator), and the run's hidden check seed: drawn once per run, never
    shown to an agent or stored, so the judge builds its references once and keeps them
    (references.Kept) where a seed drawn per evaluation would rebuild them every time. None:
    one drawn for each evaluation (a lone `evolve verify`)."""

    fastest: dict[str, tuple[float, str]] = Field(default_factory=dict)
    time_reference: bool = True
    hidden_seed: int | None = None


REFERENCE = "reference"


class Speedup(Frozen):
    """A kernel against one baseline: the geometric mean of baseline time over kernel time
    on the cases both timed, and its relative ~95% half-width (the baseline's and the kernel's
    per-case intervals combined: geomean_uncertainty)."""

    against: str
    speedup: float = Field(gt=0)
    uncertainty: float = Field(ge=0)
    cases: int = Field(ge=1)

    def describe(self) -> str:
        return f"{self.speedup:.2f}x over {self.against} (+-{self.uncertainty * 100:.1f}%)"


def speedup_over(
    name: str, base: dict[str, CaseBaseline], cases: tuple[CaseResult, ...]
) -> Speedup | None:
    """`cases`' speedup over the baseline `base`, or None when they time no case in common."""
    pairs = [(base[c.case], c) for c in cases if c.time_us and c.case in base]
    if not pairs:
        return None
    logs = [math.log(b.time_us / c.time_us) for b, c in pairs]
    spreads = [math.hypot(b.ci, c.ci or 0.0) for b, c in pairs]
    return Speedup(
        against=name,
        speedup=math.exp(sum(logs) / len(logs)),
        uncertainty=geomean_uncertainty(spreads),
        cases=len(pairs),
    )


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
