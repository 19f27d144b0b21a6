"""How sure a timing is: the interval of a median, and whether one kernel is clearly faster.

Two kinds of noise move a kernel's time. Within one evaluation the trials scatter (the median's
interval below, from order statistics, no distribution assumed). Between evaluations in fresh
judges the whole level moves, through clocks, placement and the host: the same GDN kernel timed
in three fresh judges spread 4% on one case while each evaluation's own trials spread 0.1-3%.
So a comparison of two evaluations never claims more than `floor` (FitnessSettings.noise_floor)
however tight their trials are; a head-to-head (evolution/duel.py) measures both in one place,
alternately, and decides closer calls.

Standard library only: the judge's side may use it too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

Z95 = 1.96


def median_interval(trials: Sequence[float]) -> tuple[float, float]:
    """(median, relative half-width of its ~95% interval). The interval's ends are the order
    statistics at n/2 -+ 1.96 sqrt(n)/2 (the binomial interval of the median: no assumption about
    the trials' distribution); fewer than 5 trials give a half-width of the whole range."""
    ordered = sorted(trials)
    n = len(ordered)
    if n == 0:
        raise ValueError("no trials")
    median = statistics.median(ordered)
    if median <= 0:
        return median, math.inf
    if n < 5:
        return median, (ordered[-1] - ordered[0]) / median
    half = Z95 * math.sqrt(n) / 2
    lo = ordered[max(0, math.floor(n / 2 - half))]
    hi = ordered[min(n - 1, math.ceil(n / 2 + half) - 1)]
    return median, max(median - lo, hi - median) / median


def combined(*relative: float | None) -> float:
    """The relative uncertainty of a ratio of independent measurements (root sum of squares);
    an unknown one (None) counts as 0."""
    return math.sqrt(sum((r or 0.0) ** 2 for r in relative))


def clear_margin(uncertainty: float, floor: float) -> float:
    """The advantage a ratio must exceed to be called real: twice its uncertainty (about 95%),
    never less than the floor of what separate evaluations can tell apart."""
    return max(floor, 2 * uncertainty)
