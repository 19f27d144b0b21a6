"""Close calls: whether a child is clearly faster than an incumbent, and the head-to-head that
decides when it is not.

Two evaluations in fresh judges differ by a few percent with no change of code (DESIGN.md
"Fitness"), so a child whose fitness beats an incumbent's by less than the noise has not shown it
is faster. `compare` sorts a pair into clear (the child displaces the incumbent), close (a
head-to-head decides) and behind. A head-to-head evaluates both on one device alternately
(Evaluator.head_to_head: a b b a ..., so a steady drift favours neither) and `decide` calls the
child the winner only when its gain over the rounds clears both min_gain and twice its
uncertainty; a tie keeps the incumbent. Each head-to-head's evaluations spend budget and are
recorded in the archive (evolution/generations.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from hipevolve.core.base import Frozen
from hipevolve.core.baseline import evaluation_uncertainty
from hipevolve.core.evaluation import Evaluation
from hipevolve.core.noise import clear_margin, combined

Call = Literal["clear", "close", "behind"]


def gain_of(child: Evaluation, incumbent: Evaluation) -> float | None:
    """How much faster the child is, as a fraction (0.05: 5% faster): the geometric mean of the
    incumbent's time over the child's on the cases both timed; None if they share none."""
    theirs = {c.case: c.time_us for c in incumbent.cases if c.time_us}
    logs = [
        math.log(theirs[c.case] / c.time_us) for c in child.cases if c.time_us and c.case in theirs
    ]
    return math.exp(statistics.fmean(logs)) - 1 if logs else None


def compare(child: Evaluation, incumbent: Evaluation, floor: float) -> tuple[Call, float]:
    """(the call, the child's gain) for two ok evaluations."""
    gain = gain_of(child, incumbent)
    if gain is None or gain <= 0:
        return "behind", gain or 0.0
    noise = combined(evaluation_uncertainty(child.cases), evaluation_uncertainty(incumbent.cases))
    return ("clear" if gain > clear_margin(noise, floor) else "close"), gain


class Duel(Frozen):
    """A head-to-head's outcome, as the archive's `duel` event records it."""

    child: int
    incumbent: int
    rounds: int
    gain: float = Field(description="the child's gain over the incumbent, a fraction")
    uncertainty: float = Field(description="relative, one standard error of the gain")
    winner: Literal["child", "incumbent"]
    why: str = Field(default="", description="one line: how it was decided")

    def line(self) -> str:
        return (
            f"candidate {self.child} vs {self.incumbent}: {self.gain * 100:+.1f}% "
            f"(+-{2 * self.uncertainty * 100:.1f}%), {self.winner} kept"
            + (f" ({self.why})" if self.why else "")
        )


def decide(
    child: int,
    incumbent: int,
    order: Sequence[str],
    evaluations: Sequence[Evaluation],
    min_gain: float,
) -> Duel:
    """The outcome of a head-to-head whose evaluations came in `order` ("child"/"incumbent"
    each), pairing the i-th evaluation of each side as round i."""
    mine = [e for who, e in zip(order, evaluations, strict=True) if who == "child"]
    theirs = [e for who, e in zip(order, evaluations, strict=True) if who == "incumbent"]
    rounds = len(mine)

    def unmeasured(winner: str, why: str) -> Duel:
        """An outcome decided with no gain measured."""
        return Duel(
            child=child,
            incumbent=incumbent,
            rounds=rounds,
            gain=0.0,
            uncertainty=0.0,
            winner=winner,
            why=why,
        )

    # A round the harness failed (a judge error) measured neither kernel: nothing is decided,
    # and a tie keeps the incumbent.
    failed = next((e for e in evaluations if e.judge_failed), None)
    if failed is not None:
        return unmeasured("incumbent", f"a judge failed in a round: {failed.message[:120]}")
    # A side that failed a round loses the duel outright: the incumbent first, then the child.
    for side, evaluated, winner in (("incumbent", theirs, "child"), ("child", mine, "incumbent")):
        bad = next((e for e in evaluated if not e.ok), None)
        if bad is not None:
            return unmeasured(winner, f"the {side} was {bad.status.value} in a round")
    logs = [
        math.log1p(g) for a, b in zip(mine, theirs, strict=True) if (g := gain_of(a, b)) is not None
    ]
    if not logs:
        return unmeasured("incumbent", "no case timed by both")
    spread = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0
    trials = math.sqrt(
        statistics.fmean(
            [
                combined(evaluation_uncertainty(a.cases), evaluation_uncertainty(b.cases)) ** 2
                for a, b in zip(mine, theirs, strict=True)
            ]
        )
        / len(logs)
    )
    uncertainty = combined(spread, trials)
    gain = math.expm1(statistics.fmean(logs))
    won = gain > clear_margin(uncertainty, min_gain)
    return Duel(
        child=child,
        incumbent=incumbent,
        rounds=rounds,
        gain=gain,
        uncertainty=uncertainty,
        winner="child" if won else "incumbent",
    )
