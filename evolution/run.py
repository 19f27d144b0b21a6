"""The evolution run loop: plan, propose, deduplicate, admit, evaluate, record, insert, repeat.

Generation 0 seeds every island with the first candidates the caller passes in: the task's seed
kernels, or the offline translator's lowering of its reference, chosen by the composition root
(hipevolve/app/run_job.py first_candidates), so the loop imports no agent; with none passed, the
proposal policy writes them, translating the reference (a task without seeds, where a model is
behind the translator). Each later generation asks selection.plan for proposals, lets the
offline policy (evolution/offline/policy.py) write one child per proposal, drops code the run
has already seen, admits the rest against the budget, evaluates the batch through the injected
evaluator (in production the verifier pipeline, evaluators.pipeline_evaluator), records each
result in the archive before anything else happens (write-through), and inserts the ok ones into
their islands. The loop stops when the budget is spent, when nothing unseen is one edit from any
elite (the reachable space is exhausted), when the last generations wrote nothing but
machine-code copies (Search.barren: copies spend no unit, so such a search would never end),
or when should_stop() says so (Ctrl-C: the generations in flight are finished first and the
run is marked interrupted).

Generations in flight. With settings.lag = L, generation g is planned from the islands after
generation g-1-L (generation 1 and the first L after it from generation 0's), so it can be
staged, compiled and evaluated while the L generations before it finish: a slot that would
wait for a generation's slowest evaluation takes the next one's work instead. A proposal policy
(the agents) writes and evaluates a lagging generation on its own threads, so the model calls
of generation g overlap the evaluations of g - 1; its generations admit against one budget for
the run, since they are written side by side. Results still
enter the islands one generation at a time, in order, with the exchanges (migration, reseeding)
due at each; L = 0 is the plain loop, each generation planned from the one just finished. A plan
that lags and proposes nothing is made again from the latest islands before the search is
called exhausted. With a model, the run may pace its lag (evolution/pace.py): each generation's
lag, up to settings.lag, is decided from the measured latencies when it is first planned and
logged as a `pace` event, which a resume reads back.

Resume and determinism. A generation is a pure function of the islands it is planned from, the
source hashes of earlier generations and an rng seeded by (seed, generation, evaluations so
far), whatever order the evaluations finish in (generation 0: of the first candidates passed in,
which a resume passes again). Its end is checkpointed as one `generation`
event holding the islands. Resuming reopens the run, restores the islands of the last L + 1
checkpoints and replays the unfinished generations: the same children come out, those the
archive already holds keep their ids, those already evaluated are not evaluated again, and the
ones that were in flight (re-queued by Archive.resume) are evaluated first, counting toward the
budget, which admits each generation as of that generation (evolution/budget.py), machine-code
copies and head-to-heads included. A resumed run therefore evaluates exactly what an
uninterrupted run with the same seed would have.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from hipevolve.archive.store import Archive
from hipevolve.core.config import FitnessSettings
from hipevolve.core.evaluation import Evaluation
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.child import Child
from hipevolve.evolution.generations import (
    Progress,
    ProposalPolicy,
    RunSummary,
    Search,
    Staged,
    StopReason,
)
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.migration import exchange
from hipevolve.evolution.pace import Pace
from hipevolve.evolution.selection import PolicyState, empty_islands, plan
from hipevolve.verifier.evaluators import Evaluator


def run_evolution(
    task: TaskSpec,
    archive: Archive,
    settings: EvolutionSettings,
    evaluate: Evaluator,
    *,
    first: Sequence[Child],
    budget: int,
    seed: int,
    run_id: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    policy: ProposalPolicy | None = None,
    fitness: FitnessSettings | None = None,
    pace: Pace | None = None,
    on_status: Callable[[str], None] | None = None,
) -> RunSummary:
    """Runs (or, with run_id, resumes) a search of `task` until one of the stop conditions.

    `first`: generation 0's candidates (hipevolve.app.run_job.first_candidates: the task's seed
    kernels, or the offline lowering of its reference); empty: `policy` translates the reference
    instead. `policy` (the agents over a model) writes the children; None: the offline mutator.
    `on_status`: told in one line what the run does before its first generation lands.
    `pace` (evolution/pace.py): graph runs in flight and, with a lag bound, each generation's
    lag, from measured latencies; None: Little's law for the graph runs, settings.lag fixed.
    """
    if not first and (policy is None or not policy.translates()):
        raise ValueError("no first candidates, and no policy that translates the reference")
    search = Search(task, archive, settings, evaluate, budget, seed, run_id, fitness, pace)
    search.policy = policy
    if policy is not None:
        policy.warm()  # its model client loads while the baseline and the seeds are timed
    generation, states = search.restore()
    if on_status is not None:
        search.referee.say = on_status
    search.referee.establish(search.resumed)  # the run's baseline, before any evaluation
    # Where this session's numbers come from (a resumed run may move to another machine).
    environment = {"toolchain": evaluate.toolchain}
    if evaluate.device:
        environment["device"] = evaluate.device
    archive.log_event(search.run, "environment", environment)
    lag = settings.lag  # a paced run's bound: its generations lag by what search.pace decides
    proposals = settings.islands * settings.proposals_per_island
    done = generation - 1  # the last generation whose results are in the islands
    flight: deque[Future[tuple[Staged, list[Evaluation]]]] = deque()  # oldest first
    reason: StopReason | None = None
    latest = False  # the lagged plan of `generation` proposed nothing: plan it from g - 1's
    while True:
        while reason is None:
            lag_now = search.pace.lag(generation, proposals, lag) if generation else lag
            if len(flight) > lag_now:
                break
            base = generation - 1 if latest else max(0, generation - 1 - lag_now)
            if generation > 0 and base > done:
                break  # its islands are not in yet
            seen = search.seen_before(generation)
            admitted = search.allowance(generation, base)
            if admitted.exhausted:
                reason = "budget"
                break
            if search.barren(generation):
                reason = "copies"
                break
            if policy is not None and policy.stop_reason() is not None:
                reason = "llm_budget"
                break
            rng = random.Random(f"hipevolve:{seed}:{generation}:{len(seen)}")
            if generation == 0:
                children = search.first_children(first, rng, admitted)
            elif not any(island.grid for island in states[base]):
                reason = "no_seed"
                break
            else:
                state = PolicyState(islands=states[base], generation=generation - 1)
                planned = plan(state, settings, rng)
                if policy is not None and lag > 0:
                    # The agents write and evaluate this generation on their own threads, while
                    # the generations before it finish: their model calls overlap evaluations.
                    flight.append(_in_background(search.write_and_evaluate, (
                        planned.proposals, planned.islands, rng, seen, generation, admitted)))
                    generation, latest = generation + 1, False
                    continue
                children = search.children(
                    planned.proposals, planned.islands, rng, seen, generation, admitted
                )
            if not children:
                if policy is not None and policy.repeated(generation):  # a stall, not a spent space
                    if policy.stop_reason() is None:
                        continue  # the models repeated evaluated code: write it again
                    reason = "llm_budget"
                    break
                if generation > 0 and base < generation - 1:
                    latest = True  # planned from older islands: try the latest first
                    continue
                reason = "no_seed" if generation == 0 else "exhausted"
                break
            staged = search.stage(generation, children, admitted)
            flight.append(_in_background(search.evaluated, staged))
            generation, latest = generation + 1, False
        if not flight:
            break
        staged, evaluations = flight.popleft().result()
        results = search.complete(staged, evaluations)
        done = staged.generation
        islands, moves = exchange(states.get(done - 1, ()), done - 1, settings)
        states[done] = search.insert(islands or empty_islands(settings), results,
                                     everywhere=done == 0, generation=done)  # fmt: skip
        search.checkpoint(done, states[done], moves)
        search.referee.time_strong()  # once, after the first generation lands (a resume's too)
        search.referee.settle()
        for old in [g for g in states if g < max(0, done - lag)]:
            del states[old]
        if on_progress is not None:
            on_progress(search.progress(done + 1, states[done]))
        if (reason is None and policy is not None and not staged.ids and done > 0
                and (policy.stop_reason() or not policy.repeated(done))):
            # the agents wrote nothing this generation, and no offline child was left either
            # (a generation of repeats goes on until the stall stop)
            reason = ("llm_budget" if policy.stop_reason() else
                      "budget" if search.budget.exhausted else "exhausted")  # fmt: skip
        if reason is None and should_stop is not None and should_stop() and search.budget.left:
            reason = "stopped"  # the generations in flight are finished first
    assert reason is not None  # the loop ends only once a stop reason is set and nothing flies
    search.referee.settle(wait=reason != "stopped")  # the final lines name the strong baselines
    return search.finish(reason, done + 1, states.get(done, empty_islands(settings)))


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
