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

Which generation is planned when, from which islands, and what a resume replays: the Flight
(evolution/flight.py), whose docstring holds the contract for generations in flight, resume
and determinism.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hipevolve.archive.store import Archive
from hipevolve.core.config import FitnessSettings
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.child import Child
from hipevolve.evolution.flight import Flight
from hipevolve.evolution.generations import Progress, ProposalPolicy, RunSummary, Search
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.pace import Pace
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
    search = Search(task, archive, settings, evaluate, budget, seed, run_id, fitness, pace, policy)
    if policy is not None:
        policy.warm()  # its model client loads while the baseline and the seeds are timed
    flight = Flight(search, first, search.restore())
    search.begin(on_status)  # the run's baseline, before any evaluation
    while True:
        flight.plan()
        if not flight.in_air:
            break
        flight.land()
        if on_progress is not None:
            on_progress(search.progress(flight.done + 1, flight.islands))
        stopping = flight.reason is None and should_stop is not None and should_stop()
        if stopping and search.budget.left:
            flight.stop("stopped")  # the generations in flight are finished first
    assert flight.reason is not None  # the loop ends only once a stop reason is set, none flies
    # the final lines name the strong baselines
    search.referee.settle(wait=flight.reason != "stopped")
    return search.finish(flight.reason, flight.done + 1, flight.islands)
