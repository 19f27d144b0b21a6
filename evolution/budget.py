"""The evaluation budget: `--budget N` counts verifier evaluations, and duplicates cost nothing.

A proposal is admitted by its normalised source hash before it goes anywhere near a compiler or
a GPU; a hidden-seed re-check of admitted code (the agents' auditor) is charged one unit too. A hash already admitted (evaluated, or in flight) is a duplicate: free, and the caller
reuses that evaluation. A new hash spends one unit when admitted, not when its result comes
back, so evaluations in flight are counted and the budget can never be overrun whatever the
order in which results arrive. Resuming a run passes the hashes the archive already evaluated.

This is the one stateful object of the policy (a growing set of hashes): copying a frozen set
on every admission would make a long run quadratic.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from hipevolve.core.errors import UserError


def check_budget(budget: int) -> int:
    """The run's budget, at least one evaluation: the one place this rule is checked (the
    command line before it opens the archive, the run loop for library callers)."""
    if budget < 1:
        raise UserError(
            f"--budget {budget}: the budget counts verifier evaluations, so at least one is "
            "needed",
            "pass --budget 1 or more",
        )
    return budget


class Admission(StrEnum):
    evaluate = "evaluate"  # new code: one unit spent, send it to the verifier
    duplicate = "duplicate"  # already evaluated or in flight: free, reuse that result
    exhausted = "exhausted"  # new code, but the budget is spent: drop it


class Budget:
    """Counts verifier evaluations against a limit, by distinct source hash."""

    def __init__(self, limit: int, evaluated: Iterable[str] = (), rechecks: int = 0) -> None:
        if limit < 0:
            raise ValueError(f"budget must be >= 0, got {limit}")
        self.limit = limit
        self._seen: set[str] = set(evaluated)
        self._rechecks = rechecks  # second evaluations of admitted code (hidden-seed re-checks)

    @property
    def spent(self) -> int:
        return len(self._seen) + self._rechecks

    @property
    def remaining(self) -> int:
        return max(self.limit - self.spent, 0)

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.limit

    def seen(self, source_hash: str) -> bool:
        return source_hash in self._seen

    def admitted(self) -> frozenset[str]:
        """Every hash admitted so far (those it started with included), as a snapshot: a policy
        writing children avoids them while admissions go on."""
        return frozenset(self._seen)

    def admit(self, source_hash: str) -> Admission:
        """Decide one proposal; a duplicate is a duplicate even when the budget is spent."""
        if source_hash in self._seen:
            return Admission.duplicate
        if self.exhausted:
            return Admission.exhausted
        self._seen.add(source_hash)
        return Admission.evaluate

    def include(self, evaluated: Iterable[str]) -> None:
        """Counts hashes admitted elsewhere (a generation staged before this one's plan)."""
        self._seen.update(evaluated)

    def charge(self) -> bool:
        """Spends one unit on a second evaluation of admitted code (a re-check); False, and
        nothing spent, when the budget is already spent."""
        if self.exhausted:
            return False
        self._rechecks += 1
        return True

    def __repr__(self) -> str:
        return f"Budget(limit={self.limit}, spent={self.spent})"
