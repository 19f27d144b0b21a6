"""The run's one budget: `--budget N` counts units of verifier work, and RunBudget alone counts them.

What spends a unit, and what does not:
- new code (a source hash the run has not admitted) spends one when it is admitted, not when its
  result comes back, so evaluations in flight are counted and the budget is never overrun
  whatever order results arrive in;
- a duplicate (a hash already admitted, evaluated or in flight) is free: the caller reuses that
  evaluation, even once the budget is spent;
- a machine-code copy (new source whose build matches an evaluated candidate's machine code,
  evolution/recorder.py) gives its unit back once it is found: no GPU ran for it, and on NVIDIA
  a GDN search spent 60% of its units on AMD-only tunables (issue 47);
- an offline child screened out as a copy before it was stored (event `screened_copy`) is never
  admitted, so it spends nothing; it counts only toward the copy streak (`barren`);
- a hidden-seed re-check of admitted code (the agents' auditor) spends one;
- a head-to-head spends one per evaluation (two a round); the final one, the run's best against
  the seed, is paid from a reserve kept back from the start.

Shares. A run with models spends its budget on the children the models write, and on three
other things, each bounded by a share of --budget (Shares, from agents.tuner_share, duel_share
and recheck_share): the offline tuner's configurations (evolution/sweep.py), head-to-heads (the
final one's reserve included) and hidden-seed re-checks. Unbounded, a 200-evaluation GDN run on
a GPU spent 44 on the tuner, 34 head to head and 16 on re-checks, leaving the models 105; the
defaults keep at least three quarters of the budget for the models' children. What a share
refuses is refused as a spent budget is: the tuner proposes no more, a close call keeps the
incumbent, a winner stands unconfirmed. An offline run has no shares (every unit is the offline
mutator's, or a head-to-head's, as it decides).

One formula, everywhere (the run loop, the referee, the workshop, the display, the final lines,
`evolve report`):

    spent = admitted - copies + rechecks + duels
    room  = limit - reserve - spent      what admission and the search's head-to-heads may use
    left  = limit - spent                what the run has left, its reserve included

The archive holds every fact of the ledger (the run's candidates with their generation, and its
`machine_copy`, `audit_recheck` and `duel` events), so `from_archive` counts what the run counted.

Resume and determinism. The offline search admits each generation against the ledger as of that
generation (`as_of`): code admitted up to it, copies found before it, and the head-to-heads of
the generations its plan was drawn from. That is what an uninterrupted run had counted when it
admitted the generation, and what a resumed run counts when it replays it, although its archive
already holds later generations, their copies and head-to-heads. A copy found in generation g
gives its unit back from generation g + 1 on: g's own admissions were decided before its copies
were known, in both runs. A proposal policy (the agents) writes its generations side by side, so
it admits against everything spent so far.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from hipevolve.core.errors import UserError

if TYPE_CHECKING:
    from hipevolve.archive.store import Archive

COPY = "machine_copy"  # event: a candidate found to copy an evaluated one's machine code
# event: an offline child screened out before it was stored, its build a copy (never admitted)
SCREENED = "screened_copy"
RECHECK = "audit_recheck"  # event: a hidden-seed re-check (status "skipped": none was run)
DUEL = "duel"  # event: one head-to-head, with the generation and the evaluations it spent
TUNER = "offline-tuner"  # the agent label of the offline tuner's children (evolution/sweep.py)


def check_budget(budget: int) -> int:
    """The run's budget, at least one evaluation: the one place this rule is checked (the
    command line before it opens the archive, the run loop for library callers)."""
    if budget < 1:
        raise UserError(
            f"--budget {budget}: the budget counts verifier evaluations, so at least one is needed",
            "pass --budget 1 or more",
        )
    return budget


def recorded_limit(archive: Archive, run: int) -> int:
    """The run's --budget: the one its last resume gave (a resumed run may raise it), else the
    one it started with; 0 where it recorded none."""
    resumes = archive.events(run, "resume")
    return (resumes[-1].data.get("budget") if resumes else None) or archive.run(run).budget or 0


class Admission(StrEnum):
    evaluate = "evaluate"  # new code: one unit spent, send it to the verifier
    duplicate = "duplicate"  # already admitted: free, reuse that result
    exhausted = "exhausted"  # new code, but the budget is spent: drop it


@dataclass(frozen=True)
class Shares:
    """The most of --budget each spender besides the writers' children may take, as a fraction
    of it (module docstring); 1.0: no bound but the budget's own."""

    tuner: float = 1.0  # the offline tuner's configurations (agents.tuner_share)
    duels: float = 1.0  # head-to-heads, the final one's reserve included (agents.duel_share)
    rechecks: float = 1.0  # hidden-seed re-checks (agents.recheck_share)

    @staticmethod
    def units(share: float, limit: int) -> int:
        """A share of `limit` in units, rounded up (a small budget still gets one)."""
        return limit if share >= 1.0 else math.ceil(share * limit)


class RunBudget:
    """The run's units: what was admitted, copied, re-checked and spent head to head; thread-safe
    (a policy's generations admit from threads of their own).

    It keeps totals and counts per generation, never a snapshot per admission: copying the set
    of hashes on every admission would make a long run quadratic."""

    def __init__(self, limit: int, reserve: int = 0) -> None:
        if limit < 0:
            raise ValueError(f"budget must be >= 0, got {limit}")
        self.limit, self.reserve = limit, max(reserve, 0)
        self.shares = Shares()  # a run with models bounds its other spenders (module docstring)
        self._admitted: dict[str, int] = {}  # source hash -> the generation that admitted it
        self._tuned: set[str] = set()  # admitted hashes the offline tuner wrote
        self._copies: set[str] = set()  # admitted hashes found to be machine-code copies
        self._rechecks = self._duel_total = 0
        self._admitted_in: Counter[int] = Counter()  # by generation: new code admitted
        self._copied_in: Counter[int] = Counter()  # copies, by the generation that admitted them
        self._duels_in: Counter[int] = Counter()  # head-to-head evaluations, by generation
        self._screened_in: Counter[int] = Counter()  # offline children screened out as copies
        self._lock = threading.RLock()

    @classmethod
    def from_archive(
        cls, archive: Archive, run: int, limit: int | None = None, reserve: int = 0
    ) -> RunBudget:
        """The run's budget as its archive records it: the ledger a resumed run continues and
        `evolve report` counts. limit None: the run's own (recorded_limit)."""
        budget = cls(recorded_limit(archive, run) if limit is None else limit, reserve)
        stored = archive.stored(run)
        copies = {int(e.data["candidate"]) for e in archive.events(run, COPY)}
        budget.restore(
            admitted=[(s.source_hash, s.generation) for s in stored],
            tuned=[s.source_hash for s in stored if s.agent == TUNER],
            copies=[s.source_hash for s in stored if s.candidate_id in copies],
            rechecks=sum(e.data.get("status") != "skipped" for e in archive.events(run, RECHECK)),
            duels=[
                (int(e.data.get("generation", 0)), int(e.data["evaluations"]))
                for e in archive.events(run, DUEL)
            ],
        )
        for event in archive.events(run, SCREENED):
            budget.screened(int(event.data["generation"]))
        return budget

    def restore(
        self,
        admitted: Iterable[tuple[str, int]] = (),
        copies: Iterable[str] = (),
        rechecks: int = 0,
        duels: Iterable[tuple[int, int]] = (),
        tuned: Iterable[str] = (),
    ) -> None:
        """Counts what was spent before (a resumed run's archive): the (hash, generation) pairs
        admitted, the hashes among them that were copies, the re-checks, the (generation,
        evaluations) of each head-to-head, and the admitted hashes the offline tuner wrote."""
        with self._lock:
            for source_hash, generation in admitted:
                self._add(source_hash, generation)
            self._tuned.update(h for h in tuned if h in self._admitted)
            for source_hash in copies:
                self.copied(source_hash)
            self._rechecks += rechecks
            for generation, evaluations in duels:
                self._spend_duel(evaluations, generation)

    # ---------------------------------------------------------------- the one formula

    def units(self, generation: int | None = None, base: int | None = None) -> int:
        """Units spent: admitted - copies + rechecks + duels. As of admitting `generation`
        (a deterministic search's view, module docstring): code admitted up to it, copies found
        before it, head-to-heads of the generations up to `base`."""
        with self._lock:
            if generation is None:
                admitted, copies, duels = len(self._admitted), len(self._copies), self._duel_total
            else:
                admitted = sum(n for g, n in self._admitted_in.items() if g <= generation)
                copies = sum(n for g, n in self._copied_in.items() if g < generation)
                duels = sum(n for g, n in self._duels_in.items() if base is None or g <= base)
            return admitted - copies + self._rechecks + duels

    @property
    def spent(self) -> int:
        return self.units()

    @property
    def left(self) -> int:
        """Units left of --budget, the reserve for the final head-to-head included."""
        return max(self.limit - self.spent, 0)

    @property
    def remaining(self) -> int:
        """Units the search may still spend: what is left less the reserve."""
        return max(self.limit - self.reserve - self.spent, 0)

    @property
    def exhausted(self) -> bool:
        return self.remaining == 0

    # ---------------------------------------------------------------- spending

    def admit(
        self, source_hash: str, generation: int = 0, *, room: int | None = None, by: str = ""
    ) -> Admission:
        """Decides one proposal of `generation`; a duplicate is a duplicate even when the budget
        is spent. room: the units it may use where an Allowance counts them (None: what the
        search has left now). by: the agent that wrote it (the tuner's share bounds TUNER's)."""
        with self._lock:
            if source_hash in self._admitted:
                return Admission.duplicate
            if (self.remaining if room is None else room) < 1:
                return Admission.exhausted
            if by == TUNER and self.tuner_room < 1:
                return Admission.exhausted
            self._add(source_hash, generation)
            if by == TUNER:
                self._tuned.add(source_hash)
            return Admission.evaluate

    @property
    def tuner_room(self) -> int:
        """Units the offline tuner's configurations may still spend: its share's, within what
        the search has left."""
        with self._lock:
            share = Shares.units(self.shares.tuner, self.limit) - self.tuned
            return max(min(share, self.remaining), 0)

    def as_of(self, generation: int, base: int | None) -> Allowance:
        """What `generation` may admit: with `base` (the generation its plan was drawn from),
        as of admitting it (module docstring); None: a policy's generation, against everything
        spent so far."""
        return Allowance(self, generation, base)

    def copied(self, source_hash: str) -> None:
        """An admitted hash turned out a machine-code copy: its unit comes back (once)."""
        with self._lock:
            if source_hash in self._copies or source_hash not in self._admitted:
                return
            self._copies.add(source_hash)
            self._copied_in[self._admitted[source_hash]] += 1

    def recheck(self) -> bool:
        """Spends one unit on a second evaluation of admitted code (a hidden-seed re-check);
        False, and nothing spent, when the search has no unit left."""
        with self._lock:
            if self.exhausted or self._rechecks >= Shares.units(self.shares.rechecks, self.limit):
                return False
            self._rechecks += 1
            return True

    def duel(self, evaluations: int, generation: int, *, reserved: bool = False) -> bool:
        """Spends a head-to-head's evaluations if they fit; reserved: the final one against the
        seed, which may spend the reserve. False, and nothing spent, when they do not (or, for
        one of the search's, when the duels' share, less the reserve, has no room for them)."""
        with self._lock:
            room = self.left if reserved else self.remaining
            if not reserved:
                share = Shares.units(self.shares.duels, self.limit) - self.reserve
                room = min(room, share - self._duel_total)
            if evaluations < 1 or evaluations > room:
                return False
            self._spend_duel(evaluations, generation)
            return True

    # ---------------------------------------------------------------- what it counted

    def admitted(self) -> frozenset[str]:
        """Every hash admitted so far, as a snapshot: a policy writing children avoids them
        while admissions go on."""
        with self._lock:
            return frozenset(self._admitted)

    @property
    def copies(self) -> int:
        """Admitted candidates that were machine-code copies: no unit spent."""
        return len(self._copies)

    def screened(self, generation: int) -> None:
        """An offline child of `generation` was screened out as a copy before it was stored."""
        with self._lock:
            self._screened_in[generation] += 1

    def barren(self, generation: int) -> int:
        """The machine-code copies (admitted, or screened out before they were stored) of the
        generations just before `generation` (from generation 1 on) whose new code was all
        copies: how long the search has written nothing new for this card. Generations before
        `generation` only, so a resumed run counts what an uninterrupted one counted when it
        planned `generation`."""
        with self._lock:
            streak = 0
            for g in range(generation - 1, 0, -1):
                admitted, copied = self._admitted_in[g], self._copied_in[g]
                if copied < admitted:
                    break
                streak += copied + self._screened_in[g]
            return streak

    @property
    def screened_out(self) -> int:
        """Offline children screened out as machine-code copies before they were stored."""
        return sum(self._screened_in.values())

    @property
    def duels(self) -> int:
        """Evaluations spent on head-to-heads."""
        return self._duel_total

    @property
    def rechecks(self) -> int:
        return self._rechecks

    @property
    def tuned(self) -> int:
        """Units spent on the offline tuner's configurations (its copies gave theirs back)."""
        with self._lock:
            return len(self._tuned - self._copies)

    def _add(self, source_hash: str, generation: int) -> None:
        if source_hash not in self._admitted:
            self._admitted[source_hash] = generation
            self._admitted_in[generation] += 1

    def _spend_duel(self, evaluations: int, generation: int) -> None:
        self._duels_in[generation] += evaluations
        self._duel_total += evaluations

    def __repr__(self) -> str:
        return (
            f"RunBudget(limit={self.limit}, reserve={self.reserve}, spent={self.spent}, "
            f"copies={self.copies}, duels={self.duels}, rechecks={self.rechecks}, "
            f"tuned={self.tuned})"
        )


class Allowance:
    """One generation's admissions against the run's budget (RunBudget.as_of): with a base, as
    of admitting that generation, what was spent before counted once and its own admissions
    added; without, the whole budget as it stands."""

    def __init__(self, budget: RunBudget, generation: int, base: int | None) -> None:
        self.budget, self.generation, self.base = budget, generation, base
        self._before = budget.units(generation, base) if base is not None else 0
        self._added = 0  # new code this allowance admitted

    @property
    def spent(self) -> int:
        return self.budget.spent if self.base is None else self._before + self._added

    @property
    def remaining(self) -> int:
        return max(self.budget.limit - self.budget.reserve - self.spent, 0)

    @property
    def exhausted(self) -> bool:
        return self.remaining == 0

    def admit(self, source_hash: str) -> Admission:
        """Decides one child of this generation: duplicate, evaluate (one unit) or exhausted."""
        if self.base is None:
            return self.budget.admit(source_hash, self.generation)
        admission = self.budget.admit(source_hash, self.generation, room=self.remaining)
        self._added += admission is Admission.evaluate
        return admission

    def copied(self, source_hash: str) -> None:
        """A child of this generation turned out a machine-code copy (RunBudget.copied)."""
        self.budget.copied(source_hash)
