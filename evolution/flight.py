"""Generations in flight: which generation the run plans next, from which islands, and when the
oldest one in flight lands (evolution/run.py's loop asks it: plan, land, stop).

Generations in flight. With settings.lag = L, generation g is planned from the islands after
generation g-1-L (generation 1 and the first L after it from generation 0's), so it can be
staged, compiled and evaluated while the L generations before it finish: a slot that would
wait for a generation's slowest evaluation takes the next one's work instead. A proposal policy
(the agents) writes and evaluates a lagging generation on its own threads, so the model calls
of generation g overlap the evaluations of g - 1; its generations admit against one budget for
the run, since they are written side by side. Results still enter the islands one generation
at a time, in order, with the exchanges (migration, reseeding) due at each; L = 0 is the plain
loop, each generation planned from the one just finished. A plan that lags and proposes nothing
is made again from the latest islands before the search is called exhausted. With a model, the
run may pace its lag (evolution/pace.py): each generation's lag, up to settings.lag, is decided
from the measured latencies when it is first planned and logged as a `pace` event, which a
resume reads back.

Resume and determinism. A generation is a pure function of the islands it is planned from, the
source hashes of earlier generations and an rng seeded by (seed, generation, evaluations so
far), whatever order the evaluations finish in (generation 0: of the first candidates passed in,
which a resume passes again). Its end is checkpointed as one `generation` event holding the
islands. Resuming reopens the run, restores the islands of the last L + 1 checkpoints
(Search.restore, the `restored` a Flight starts from) and replays the unfinished generations:
the same children come out, those the archive already holds keep their ids, those already
evaluated are not evaluated again, and the ones that were in flight (re-queued by
Archive.resume) are evaluated first, counting toward the budget, which admits each generation
as of that generation (evolution/budget.py), machine-code copies and head-to-heads included. A
resumed run therefore evaluates exactly what an uninterrupted run with the same seed would have.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from hipevolve.core.evaluation import Evaluation
from hipevolve.evolution.child import Child
from hipevolve.evolution.generations import Search, Staged, StopReason
from hipevolve.evolution.islands import Island
from hipevolve.evolution.migration import exchange
from hipevolve.evolution.selection import PolicyState, empty_islands, plan


class Flight:
    """The generations a run has in flight, oldest first, and the islands they are planned from.

    `plan` launches every generation the lag lets fly now; `land` waits for the oldest and puts
    its results into the islands; `reason` is set once the run must stop (nothing more is
    planned; what is in flight still lands)."""

    def __init__(
        self,
        search: Search,
        first: Sequence[Child],
        restored: tuple[int, dict[int, tuple[Island, ...]]],
    ) -> None:
        """`first`: generation 0's candidates; `restored`: Search.restore's (next generation,
        the islands after each of the last lag + 1 generations)."""
        self.search, self.first = search, first
        self.next, self.states = restored  # the next generation to plan; generation -> islands
        self.done = self.next - 1  # the last generation whose results are in the islands
        self.reason: StopReason | None = None
        self._flying: deque[Future[tuple[Staged, list[Evaluation]]]] = deque()  # oldest first
        self._latest = False  # the lagged plan of `next` proposed nothing: plan it from g - 1's
        self._bound = search.settings.lag  # a paced run's generations lag by what pace decides
        self._proposals = search.settings.islands * search.settings.proposals_per_island

    @property
    def in_air(self) -> bool:
        return bool(self._flying)

    @property
    def islands(self) -> tuple[Island, ...]:
        """The islands after the last generation landed."""
        return self.states.get(self.done, empty_islands(self.search.settings))

    def stop(self, reason: StopReason) -> None:
        """Plans nothing more; the generations in flight still land."""
        if self.reason is None:
            self.reason = reason

    def plan(self) -> None:
        """Launches generations until one must wait for its islands, or the run must stop."""
        while self.reason is None and self._plan_one():
            pass

    def _plan_one(self) -> bool:
        """Plans `next`: launched, or to be planned again (True); waiting or stopped (False)."""
        search, policy, generation = self.search, self.search.policy, self.next
        lag = (
            search.pace.lag(generation, self._proposals, self._bound) if generation else self._bound
        )
        if len(self._flying) > lag:
            return False
        base = generation - 1 if self._latest else max(0, generation - 1 - lag)
        if generation > 0 and base > self.done:
            return False  # its islands are not in yet
        seen = search.seen_before(generation)
        admitted = search.allowance(generation, base)
        if admitted.exhausted:
            return self._stopped("budget")
        if search.barren(generation):
            return self._stopped("copies")
        if policy is not None and policy.stop_reason() is not None:
            return self._stopped("llm_budget")
        rng = random.Random(f"hipevolve:{search.seed}:{generation}:{len(seen)}")
        if generation == 0:
            children = search.first_children(self.first, rng, admitted)
        elif not any(island.grid for island in self.states[base]):
            return self._stopped("no_seed")
        else:
            state = PolicyState(islands=self.states[base], generation=generation - 1)
            planned = plan(state, search.settings, rng)
            work = (planned.proposals, planned.islands, rng, seen, generation, admitted)
            if policy is not None and self._bound > 0:
                # The agents write and evaluate this generation on their own threads, while
                # the generations before it finish: their model calls overlap evaluations.
                return self._launch(search.write_and_evaluate, work)
            children = search.children(*work)
        if not children:
            return self._nothing_new(generation, base)
        return self._launch(search.evaluated, search.stage(generation, children, admitted))

    def _nothing_new(self, generation: int, base: int) -> bool:
        """A plan that proposed nothing: written again, planned from the latest islands, or the
        end of the search."""
        policy = self.search.policy
        if policy is not None and policy.repeated(generation):  # a stall, not a spent space
            if policy.stop_reason() is None:
                return True  # the models repeated evaluated code: write it again
            return self._stopped("llm_budget")
        if generation > 0 and base < generation - 1:
            self._latest = True  # planned from older islands: try the latest first
            return True
        return self._stopped("no_seed" if generation == 0 else "exhausted")

    def _stopped(self, reason: StopReason) -> bool:
        self.stop(reason)
        return False

    def _launch(self, work: Callable[[Any], Any], arg: Any) -> bool:
        self._flying.append(_in_background(work, arg))
        self.next, self._latest = self.next + 1, False
        return True

    def land(self) -> Staged:
        """Waits for the oldest generation in flight, records its results and inserts them into
        the islands after the exchanges due at it, checkpoints them; the generation."""
        search, settings = self.search, self.search.settings
        staged, evaluations = self._flying.popleft().result()
        results = search.complete(staged, evaluations)
        done = self.done = staged.generation
        islands, moves = exchange(self.states.get(done - 1, ()), done - 1, settings)
        self.states[done] = search.insert(
            islands or empty_islands(settings), results, everywhere=done == 0, generation=done
        )
        search.checkpoint(done, self.states[done], moves)
        search.referee.time_strong()  # once, after the first generation lands (a resume's too)
        search.referee.settle()
        for old in [g for g in self.states if g < max(0, done - self._bound)]:
            del self.states[old]
        policy = search.policy
        if (
            self.reason is None
            and policy is not None
            and not staged.ids
            and done > 0
            and (policy.stop_reason() or not policy.repeated(done))
        ):
            # the agents wrote nothing this generation, and no offline child was left either
            # (a generation of repeats goes on until the stall stop)
            self.stop(
                "llm_budget"
                if policy.stop_reason()
                else "budget"
                if search.budget.exhausted
                else "exhausted"
            )
        return staged


def _in_background(work: Callable[[Any], Any], arg: Any) -> Future:
    """work(arg) on a daemon thread: a second Ctrl-C ends the process without waiting for it
    (what it was evaluating is re-queued on resume)."""
    future: Future = Future()

    def run() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(work(arg))
        except BaseException as e:  # noqa: BLE001 (re-raised in the loop by future.result())
            future.set_exception(e)

    threading.Thread(target=run, name="generation", daemon=True).start()
    return future
