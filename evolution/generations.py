"""The run loop's steps against the archive, and the types it hands out.

`Search` holds a run's state between generations and does each step of one: restore a resumed
run's last checkpoints, write a generation's children (generation 0: the first candidates the
caller passed, or the policy's translations of the reference), store and admit them (`stage`),
evaluate the ones the archive has no evaluation for, record each result as it lands, insert the
ok ones into their islands, checkpoint the islands, and sum up the run. Its archive writes for
candidates (storing, the evaluation cache, recording) go through a Recorder
(evolution/recorder.py), which the Workshop a policy writes through shares. evolution/flight.py's
Flight decides which generation runs when; see its docstring for generations in flight, resume
and determinism.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from hipevolve.archive.store import Archive
from hipevolve.core.base import Frozen
from hipevolve.core.candidate import Candidate
from hipevolve.core.config import FitnessSettings
from hipevolve.core.evaluation import Evaluation, Status
from hipevolve.core.taskspec import TaskSpec
from hipevolve.evolution.budget import (
    SCREENED,
    Admission,
    Allowance,
    RunBudget,
    Shares,
    check_budget,
)
from hipevolve.evolution.child import SEED, Child, Proposal
from hipevolve.evolution.descriptors import axes_source, cell_key, cell_of
from hipevolve.evolution.islands import (
    Elite,
    EvolutionSettings,
    Island,
    best,
    insert,
    own_elites,
)
from hipevolve.evolution.offline.inert import inert_tunables, pinned
from hipevolve.evolution.offline.policy import propose, rescue
from hipevolve.evolution.offline.tunables import TunableError, current_configuration, parse_tunables
from hipevolve.evolution.pace import EVENT as PACE
from hipevolve.evolution.pace import Pace
from hipevolve.evolution.recorder import Recorder, copy_of
from hipevolve.evolution.referee import Referee, confirmation_rounds
from hipevolve.evolution.resume import check_resume
from hipevolve.evolution.sweep import Sweep, seed_configurations
from hipevolve.evolution.workshop import Workshop
from hipevolve.verifier.evaluators import Evaluator
from hipevolve.verifier.prepared import Prepared

StopReason = Literal["budget", "exhausted", "copies", "stopped", "no_seed", "llm_budget"]
BARREN_GENERATIONS = 12  # generations of nothing but machine-code copies that stop a search
# How often an offline proposal is made again when its child builds to machine code the run has
# (Search.children). Late in a GDN run on an H200 three children in four were copies, so a
# generation of four sent one kernel to the GPU and the GPU waited on the builds.
SCREEN_ROUNDS = 8
CHECKPOINT = "generation"  # event kind: one per completed generation, with its islands


class ProposalPolicy(Protocol):
    """Writes a generation's children instead of the offline mutator (the agents, with a model).

    It may evaluate children itself through the Workshop (to repair them, or re-check a
    winner) and returns every child it had evaluated; the loop records nothing twice.
    `stop_reason` is set once the policy can write no more (its token or dollar budget).
    """

    def children(
        self, proposals: Sequence[Proposal], workshop: Workshop, rng: random.Random
    ) -> list[Child]: ...

    def stop_reason(self) -> str | None: ...

    def repeated(self, generation: int) -> bool:
        """That generation's models wrote only code the run had evaluated: no offline
        fallback (asked per generation: several are written at once)."""
        ...

    def translates(self) -> bool:
        """Whether it can write a first candidate from the reference (a task without seeds)."""
        ...

    def sweep_configurations(self) -> int:
        """Configurations of each new model-written island best, and of each seed, the
        offline tuner proposes in the generations after (evolution/sweep.py); 0: none."""
        ...

    def shares(self) -> Shares:
        """The most of the run's budget the offline tuner, head-to-heads and re-checks may each
        spend (evolution/budget.py Shares): the rest goes to the children it writes."""
        ...

    def warm(self) -> None:
        """Loads what its first model call needs (the client library, the tokenizer) in the
        background, while the run times its baseline and evaluates the seeds."""
        ...


class Progress(Frozen):
    """What a progress line shows after each generation."""

    run: int
    generation: int = Field(description="generations completed, seeding (generation 0) included")
    evaluations: int = Field(description="candidates of this run with an evaluation")
    head_to_head: int = Field(
        default=0, description="evaluations spent on head-to-heads (evolution/referee.py)"
    )
    spent: int = Field(
        default=0,
        description="budget units spent (evolution/budget.py): new code less machine-code "
        "copies, plus re-checks and head-to-heads",
    )
    left: int = Field(default=0, description="budget units left, the confirmation's included")
    budget: int
    valid_rate: float = Field(description="fraction of evaluations with status ok")
    best_fitness: float = Field(
        description="geometric-mean speedup of the islands' best; 0 if none"
    )
    best_candidate: int | None
    best_speedups: dict[str, float] = Field(default_factory=dict, description="case -> speedup")
    evaluations_per_minute: float = Field(description="this session's evaluations per minute")
    seconds_per_evaluation: float | None = Field(
        default=None,
        description="wall seconds an evaluation holds a slot, measured as evaluations "
        "complete (evolution/clock.py); None before the first",
    )
    slots: int = Field(default=1, description="evaluations the evaluator runs at once")


class Staged(BaseModel):
    """A generation stored and admitted, waiting for (or back from) the evaluator."""

    generation: int
    ids: list[tuple[int, int]] = Field(description="(candidate, island), in candidate order")
    done: dict[int, Evaluation | None] = Field(description="evaluations the archive had")
    pending: list[int] = Field(description="candidates the evaluator scores, in this order")
    copies: dict[int, int] = Field(
        default_factory=dict,
        description="machine-code copy -> the candidate whose result it "
        "takes (evolution/recorder.py), recorded once the original's is",
    )
    prepared: list[Prepared] = Field(
        description="the pending candidates as the evaluator prepared them, for its `run`"
    )


class RunSummary(Frozen):
    run: int
    status: Literal["finished", "interrupted"]
    reason: StopReason
    message: str = Field(description="one line: why the run stopped, and how to resume it")
    progress: Progress
    resume: str | None = Field(default=None, description="how to continue an interrupted run")
    confirmation: str = Field(
        default="", description="the final head-to-head of the run's best against the seed"
    )
    baseline: str = Field(default="", description="what the speedups are measured against")
    against: str = Field(
        default="",
        description="the run's best over the reference and each "
        "strong baseline, with their uncertainty",
    )
    islands: str = Field(
        default="",
        description="how distinct the islands ended (elites each, "
        "and those no other island holds) and where the grid's axes came from",
    )


class Search:
    """The loop's state and its archive work, one method per step."""

    def __init__(
        self,
        task: TaskSpec,
        archive: Archive,
        settings: EvolutionSettings,
        evaluate: Evaluator,
        budget: int,
        seed: int,
        run_id: int | None,
        fitness: FitnessSettings | None = None,
        pace: Pace | None = None,
        policy: ProposalPolicy | None = None,
    ) -> None:
        check_budget(budget)
        self.task, self.archive, self.settings = task, archive, settings
        self.evaluate, self.seed = evaluate, seed
        self.started = time.monotonic()
        self.run = run_id if run_id is not None else archive.start_run(task, settings, seed, budget)
        self.recorder = Recorder(archive, self.run, evaluate, pace)  # stores, caches, records
        self.pace = self.recorder.pace  # graph runs in flight, and a paced run's lags
        self.pace.log = lambda d: archive.log_event(self.run, PACE, d.model_dump(mode="json"))
        self.resumed = run_id is not None
        self.written: dict[tuple[int, str], int] = {}  # (island, cell) -> candidate in elites
        self._policy: ProposalPolicy | None = None
        self.sweep: Sweep | None = None  # with a policy: the tuner's sweep of new model elites
        self._sweeping = threading.Lock()
        self.barren_streak = 0  # the copies in a row that stopped the search (barren)
        self.inert: dict[str, frozenset[str]] = {}  # kernel source -> its tunables inert here
        fitness = fitness or FitnessSettings()
        # The run's one budget (evolution/budget.py), what its archive already spent counted in,
        # with the final head-to-head against the seed kept back.
        rounds = confirmation_rounds(fitness, budget, exact=evaluate.device is None)
        self.budget = RunBudget.from_archive(archive, self.run, budget, reserve=2 * rounds)
        self.referee = Referee(archive, self.run, evaluate, self.recorder, fitness, self.budget)
        self.policy = policy  # writes the children (the agents); None: the offline mutator

    @property
    def policy(self) -> ProposalPolicy | None:
        return self._policy

    @policy.setter
    def policy(self, policy: ProposalPolicy | None) -> None:
        """The policy that writes the children (None: the offline mutator); its shares bound
        what the run's budget spends besides them (evolution/budget.py)."""
        self._policy = policy
        self.budget.shares = policy.shares() if policy is not None else Shares()

    # -------------------------------------------------------------------- resume

    def restore(self) -> tuple[int, dict[int, tuple[Island, ...]]]:
        """(next generation, the islands after each of the last lag + 1 generations): nothing
        for a fresh run, the last checkpoints of a resumed one."""
        if not self.resumed:
            return 0, {}
        check_resume(self.archive.run(self.run), self.task.name, self.seed, self.settings)
        resumed = self.archive.resume(self.run)
        self.archive.log_event(
            self.run, "resume", {"budget": self.budget.limit, "requeued": list(resumed.requeued)}
        )
        self.written = {(e.island, e.cell): e.candidate_id for e in self.archive.elites(self.run)}
        self.pace.restore(e.data for e in self.archive.events(self.run, PACE))
        checkpoints = self.archive.events(self.run, CHECKPOINT)[-(self.settings.lag + 1) :]
        if not checkpoints:
            return 0, {}
        self.referee.restore(checkpoints[-1].data)
        states = {
            c.data["generation"]: tuple(Island.model_validate(i) for i in c.data["islands"])
            for c in checkpoints
        }
        return max(states) + 1, states

    def begin(self, on_status: Callable[[str], None] | None = None) -> None:
        """The run's baseline, before any evaluation (`on_status` is told what is timed), and
        where this session's numbers come from (a resumed run may move to another machine)."""
        if on_status is not None:
            self.referee.say = on_status
        self.referee.establish(self.resumed)
        environment = {"toolchain": self.evaluate.toolchain}
        if self.evaluate.device:
            environment["device"] = self.evaluate.device
        self.archive.log_event(self.run, "environment", environment)

    def seen_before(self, generation: int) -> frozenset[str]:
        """Source hashes of this run's candidates from generations before `generation`, and of
        the offline children screened out there as machine-code copies."""
        screened = {
            str(e.data["source_hash"])
            for e in self.archive.events(self.run, SCREENED)
            if int(e.data["generation"]) < generation
        }
        return self.archive.source_hashes_before(self.run, generation) | screened

    def allowance(self, generation: int, base: int) -> Allowance:
        """What `generation`, planned from the islands after `base`, admits against. The offline
        mutator: the run's budget as of that generation (a pure function of the archive, so a
        resumed run replays it: evolution/budget.py). A policy: everything spent so far, since
        its generations are written side by side."""
        return self.budget.as_of(generation, None if self.policy is not None else base)

    def barren(self, generation: int) -> bool:
        """Whether the search stops before `generation` because it keeps writing copies: the
        generations just before it wrote nothing but machine-code copies of evaluated kernels,
        BARREN_GENERATIONS generations' worth of proposals in a row (RunBudget.barren). Copies
        spend no unit, so without this a search whose new sources all build to code it has
        evaluated (another target's tunables on this card) would run without end: on an
        H200, a 200-evaluation GDN run wrote 277 copies against 84 distinct builds."""
        per_generation = self.settings.islands * self.settings.proposals_per_island
        streak = self.budget.barren(generation)
        if streak < BARREN_GENERATIONS * per_generation:
            return False
        self.barren_streak = streak
        return True

    # -------------------------------------------------------------------- proposing

    def first_children(
        self, first: Sequence[Child], rng: random.Random, admitted: Allowance
    ) -> list[Child]:
        """Generation 0: the first candidates the caller passed (the task's seed kernels, or the
        offline lowering of its reference); none: the policy's translations of the reference,
        one proposal per island (run_evolution refuses no first candidates unless the policy
        translates)."""
        if first or self.policy is None:
            return list(first)
        proposals = [Proposal(island=i, parent=None) for i in range(self.settings.islands)]
        workshop = Workshop(self.task, self.recorder, 0, self.budget)
        return list(self.policy.children(proposals, workshop, rng))

    def children(
        self,
        proposals,
        islands,
        rng: random.Random,
        seen: frozenset[str],
        generation: int,
        admitted: Allowance,
    ) -> list[Child]:
        """One unseen child per proposal where possible; a rescue child when none is."""
        for elite in (e for island in islands for e in island.elites):
            self.recorder.source(elite.candidate_id)
        if self.policy is not None:
            workshop = Workshop(self.task, self.recorder, generation, self.budget)
            swept = self._sweep(islands, workshop, generation)  # evaluating while models write
            found = self.policy.children(proposals, workshop, rng)
            found = [c for c, done in ((c, f.result()) for c, f in swept) if done] + found
            if (
                found
                or self.policy.stop_reason() is not None
                or self.policy.repeated(generation)
                or admitted.exhausted
            ):
                return found  # repeats count toward the stall stop (agents.stall_generations)
            # The models wrote nothing that could be evaluated this generation (every reply
            # malformed): the offline mutator writes it, so the search goes on.
            self.archive.log_event(self.run, "offline_fallback", {"generation": generation})
        taken = set(seen)
        found: list[Child] = []
        # The generations up to the one whose islands g is planned from with the lag (g - 1 -
        # lag; evolution/flight.py) are all evaluated when g is written, however the evaluations in
        # flight land, and a lagged run is told what a plain one is at generation 1.
        history = self.recorder.history(before=max(0, generation - 1 - self.settings.lag) + 1)
        waiting, built = list(proposals), {}  # built: digest -> the child that has it
        with pinned(self._inert_in(islands)):  # no move in a tunable this card does not read
            for _ in range(SCREEN_ROUNDS):
                written = []
                for proposal in waiting:
                    child = propose(proposal, self.recorder.sources, rng, taken, history)
                    if child is not None:
                        taken.add(child.candidate.source_hash)
                        written.append((proposal, child))
                waiting = self._screen(written, generation, found, built)
                if not waiting:
                    break
            if not found:
                child = rescue(islands, self.recorder.sources, taken)
                found = [child] if child is not None else []
        return found

    def _inert_in(self, islands: Sequence[Island]) -> dict[str, frozenset[str]]:
        """The tunables inert on this card in each elite's kernel (evolution/offline/inert.py),
        the new elites' variants preprocessed in two batches; every elite's source is read already."""
        kernels = {
            source
            for island in islands
            for e in island.elites
            if (source := self.recorder.sources[e.candidate_id].hip_source)
        }
        new = sorted(kernels - self.inert.keys())
        digests = getattr(self.evaluate, "preprocessed", None)  # a stand-in may have none
        if new and digests is not None:
            self.inert.update(zip(new, inert_tunables(new, digests), strict=True))
        return self.inert

    def _screen(
        self,
        written: list[tuple[Proposal, Child]],
        generation: int,
        found: list[Child],
        built: dict[str, str],
    ) -> list[Proposal]:
        """Adds to `found` the children that build to new machine code (their digests to
        `built`); logs the others (`screened_copy`: never stored, no unit spent) and returns
        their proposals, to be made again. A resumed run replays this: it builds the same
        children and finds the same copies, and logs each only once."""
        copies = self.recorder.screen([child.candidate for _, child in written], built)
        logged = {
            str(e.data["source_hash"])
            for e in self.archive.events(self.run, SCREENED)
            if int(e.data["generation"]) == generation
        }
        again = []
        for (proposal, child), twin in zip(written, copies, strict=True):
            if twin is None:
                found.append(child)
                continue
            again.append(proposal)
            source_hash = child.candidate.source_hash
            self.recorder.drop_screened([source_hash])
            if source_hash in logged:
                continue
            self.budget.screened(generation)
            self.archive.log_event(self.run, SCREENED, {
                "generation": generation, "source_hash": source_hash, "island": child.island,
                "parents": list(child.parents), "twin": twin,
            })  # fmt: skip
        return again

    def _sweep(self, islands, workshop: Workshop, generation: int) -> list[tuple[Child, Future]]:
        """The offline tuner's configurations of new model-written island bests
        (evolution/sweep.py), each evaluated through the workshop on a thread of its own."""
        assert self.policy is not None
        with self._sweeping:  # generations in flight are written on threads of their own
            if self.sweep is None:
                configurations = self.policy.sweep_configurations()
                self.sweep = Sweep(
                    self.archive,
                    self.recorder,
                    configurations,
                    seed_configurations(configurations, self.budget.limit),
                )
        room = self.budget.tuner_room
        if not self.sweep.configurations or room < 1:
            return []
        rng = random.Random(f"hipevolve:sweep:{self.seed}:{generation}")
        history = self.recorder.history(before=max(0, generation - 1 - self.settings.lag) + 1)
        children = self.sweep.children(islands, rng, workshop.seen(), history, room)
        pool = ThreadPoolExecutor(max_workers=max(1, len(children)))
        futures = [(c, pool.submit(workshop.evaluate, c)) for c in children]
        pool.shutdown(wait=False)
        return futures

    # -------------------------------------------------------------------- evaluating

    def stage(self, generation: int, children: Sequence[Child], allowance: Allowance) -> Staged:
        """Stores and admits the children, and queues those not yet evaluated (here, or by
        another run with the same evaluation key) for the evaluator; a machine-code copy of an
        evaluated one hands its unit back."""
        ids: list[tuple[int, int]] = []
        for child in children:
            admission = allowance.admit(child.candidate.source_hash)
            if admission is Admission.exhausted:
                break
            ids.append((self.recorder.store(child, generation), child.island))
        ids += self._orphans({cid for cid, _ in ids}, allowance, generation)
        ids.sort()  # candidate order: what was in flight when a run stopped is evaluated first
        done = {cid: self.archive.evaluation_of(cid) for cid, _ in ids}
        pending = self.recorder.from_cache([cid for cid, _ in ids if done[cid] is None], done)
        prepared = self.recorder.prepare(pending)
        pending, copies = self.recorder.copies(prepared, ordered=self.policy is None)
        for cid in copies:
            allowance.copied(self.recorder.sources[cid].source_hash)
        self.recorder.dispatch(pending)
        return Staged(
            generation=generation,
            ids=ids,
            done=done,
            pending=pending,
            copies=copies,
            prepared=[prepared[cid] for cid in pending],
        )

    def evaluated(self, staged: Staged) -> tuple[Staged, list[Evaluation]]:
        """The evaluator's results for a staged generation (on its own thread: no archive work)."""
        if not staged.prepared:
            return staged, []
        with self.recorder.clock.timing(len(staged.prepared)):
            results = self.evaluate.run(staged.prepared)
        if len(results) != len(staged.prepared):
            raise RuntimeError(
                f"evaluator returned {len(results)} results for {len(staged.prepared)}"
            )
        return staged, results

    def write_and_evaluate(self, planned: tuple) -> tuple[Staged, list[Evaluation]]:
        """A generation the policy writes and evaluates on this thread (children, then staged;
        its Workshop evaluated them, so little is left for the evaluator)."""
        proposals, islands, rng, seen, generation, admitted = planned
        children = self.children(proposals, islands, rng, seen, generation, admitted)
        return self.evaluated(self.stage(generation, children, admitted))

    def complete(
        self, staged: Staged, results: list[Evaluation]
    ) -> list[tuple[int, int, Evaluation]]:
        """Records a staged generation's results; (candidate, island, evaluation) of each."""
        done = dict(staged.done)
        for cid, evaluation in zip(staged.pending, results, strict=True):
            if staged.generation == 0 and self.archive.candidate(cid).agent == SEED:
                evaluation = admitted_seed(evaluation)
            done[cid] = self.recorder.record(cid, evaluation)
        for cid, original in staged.copies.items():
            done[cid] = self.recorder.record_copy(cid, original)
        self.recorder.add_evaluated(len(staged.pending))
        return [(cid, island, done[cid]) for cid, island in staged.ids]  # type: ignore[misc]

    def _orphans(
        self, planned: set[int], allowance: Allowance, generation: int
    ) -> list[tuple[int, int]]:
        """Queued candidates of `generation` the replay did not propose again (a run written by
        another version of the policy): evaluated all the same, since the budget counted them."""
        found = []
        for cid in self.archive.queued(self.run):
            if cid not in planned:
                record = self.archive.candidate(cid)
                if record.generation != generation:
                    continue  # another generation in flight when the run stopped: its own turn
                allowance.admit(record.source_hash)
                self.recorder.remember(cid, record.candidate)
                found.append((cid, record.island))
        return found

    # -------------------------------------------------------------------- islands

    def insert(
        self, islands: tuple[Island, ...], results, *, everywhere: bool, generation: int = 0
    ) -> tuple[Island, ...]:
        """Islands with the ok results inserted: seeds into every island, children into theirs,
        each child as the referee admits it (a close call against an incumbent goes head to
        head: evolution/referee.py)."""
        updated = list(islands)
        for cid, island_id, evaluation in results:
            if not evaluation.ok or copy_of(evaluation) is not None:
                continue  # a machine-code copy: its original stands for it
            elite = Elite(
                candidate_id=cid,
                fitness=evaluation.fitness,
                source_hash=self.recorder.sources[cid].source_hash,
                cell=cell_of(evaluation.static, _configuration(self.recorder.sources[cid])),
            )
            if everywhere:
                self.referee.seeded(elite)
            else:
                home = next((i for i in updated if i.id == island_id), None)
                cell = home.grid.get(elite.cell) if home is not None else None
                elite = self.referee.admit(elite, evaluation, cell, generation)
            for i, island in enumerate(updated):
                if everywhere or island.id == island_id:
                    updated[i] = insert(island, elite)
        return tuple(updated)

    def checkpoint(self, generation: int, islands: tuple[Island, ...], moves: Sequence) -> None:
        """Mirrors the grids into the elites table, then records the generation as complete."""
        for island in islands:
            for elite in island.elites:
                if self.written.get((island.id, cell_key(elite.cell))) != elite.candidate_id:
                    self.archive.set_elite(
                        self.run, island.id, cell_key(elite.cell), elite.candidate_id, elite.fitness
                    )
                    self.written[(island.id, cell_key(elite.cell))] = elite.candidate_id
        self.archive.log_event(
            self.run,
            CHECKPOINT,
            {
                "generation": generation,
                "islands": [i.model_dump(mode="json") for i in islands],
                "moves": [m.model_dump(mode="json") for m in moves],
            }
            | self.referee.checkpoint(),
        )

    # -------------------------------------------------------------------- reporting

    def progress(self, generation: int, islands: tuple[Island, ...]) -> Progress:
        counts = self.archive.evaluation_counts(self.run)
        total, ok = counts.evaluated, counts.ok
        tops = [b for b in (best(i) for i in islands) if b is not None]
        top = self.referee.champion or max(
            tops, key=lambda e: (e.fitness, -e.candidate_id), default=None
        )
        speedups: dict[str, float] = {}
        if top is not None:
            evaluation = self.archive.evaluation_of(top.candidate_id)
            cases = evaluation.cases if evaluation else ()
            speedups = {c.case: c.speedup for c in cases if c.speedup is not None}
        minutes = max(time.monotonic() - self.started, 1e-9) / 60
        return Progress(
            run=self.run,
            generation=generation,
            evaluations=total,
            head_to_head=self.budget.duels,
            spent=self.budget.spent,
            left=self.budget.left,
            budget=self.budget.limit,
            valid_rate=ok / total if total else 0.0,
            best_fitness=top.fitness if top else 0.0,
            best_candidate=top.candidate_id if top else None,
            best_speedups=speedups,
            evaluations_per_minute=self.recorder.evaluated_here / minutes,
            seconds_per_evaluation=self.recorder.clock.seconds_per_evaluation(),
            slots=self.recorder.clock.slots,
        )

    def finish(
        self, reason: StopReason, generation: int, islands: tuple[Island, ...]
    ) -> RunSummary:
        confirmation = ""
        if reason in ("budget", "exhausted", "copies", "llm_budget"):
            if reason in ("exhausted", "copies"):  # what is left goes on the close contenders
                self.referee.contenders([e for i in islands for e in i.elites], generation)
            confirmation = self.referee.confirm(generation)
        progress = self.progress(generation, islands)
        budget, kept = self.budget, self.referee.unspent_reserve()
        notes = [f"{budget.duels} in head-to-heads"] if budget.duels else []
        notes += [f"{budget.rechecks} in hidden-seed re-checks"] if budget.rechecks else []
        notes += [f"{budget.tuned} on the offline tuner's configurations"] if budget.tuned else []
        notes += [f"{kept} kept for a confirmation that was not needed"] if kept else []
        notes += (
            [f"{budget.copies} machine-code copies answered without a GPU run, at no cost"]
            if budget.copies
            else []
        )
        notes += (
            [f"{budget.screened_out} children screened out before a unit was spent, "
             "their builds copies of machine code already run"]
            if budget.screened_out
            else []
        )  # fmt: skip
        done = f"{budget.spent} of {budget.limit} evaluations" + (
            f" ({'; '.join(notes)})" if notes else ""
        )
        messages = {
            "budget": f"budget spent: {done}",
            "exhausted": f"search space exhausted after {done}: every kernel the offline "
            "moves reach from the elites (tunable steps, crossovers, restarts, every declared "
            "configuration, the transforms) has been evaluated",
            "copies": f"search stopped after {done}: the last {self.barren_streak}"
            " kernels it wrote built to machine code it had already evaluated (their changes, "
            "such as another target's tunables, make no difference on this card): what its "
            "moves reach here is spent; --model lets an LLM write new code",
            "no_seed": f"no seed kernel of {self.task.name} passed the verifier ({done}): "
            "nothing to evolve from",
            "stopped": f"stopped after {done}; the evaluations in flight were finished and recorded",
            "llm_budget": f"the agents stopped after {done}: "
            f"{self.policy.stop_reason() if self.policy else ''}",
        }
        interrupted = reason == "stopped"
        resume = (
            f"resume run {self.run} with the same task, settings and seed (run_id={self.run})"
            if interrupted
            else None
        )
        self.archive.log_event(
            self.run, "champion", self.referee.checkpoint() | {"confirmation": confirmation}
        )
        self.archive.log_event(self.run, "stop", {"reason": reason, "generation": generation})
        self.archive.finish_run(self.run, "interrupted" if interrupted else "finished")
        message = messages[reason] + (f"; {resume}" if resume else "")
        return RunSummary(
            run=self.run,
            status="interrupted" if interrupted else "finished",
            reason=reason,
            message=message,
            progress=progress,
            resume=resume,
            confirmation=confirmation,
            baseline=self.referee.describe(),
            against=self.referee.against(),
            islands=islands_line(self.archive, islands),
        )


SEED_ADMITTED = "suspect, admitted as a seed:"


def admitted_seed(evaluation: Evaluation) -> Evaluation:
    """A shipped seed kernel is never refused for speed alone: a `suspect` verdict on a seed
    whose every case is correct is admitted as ok, its reason kept as a flag (a seed is the
    task author's code; a time past the bounds says the task's roofline or baselines need a
    look, and the seed must still be something to evolve from)."""
    if evaluation.status is not Status.suspect or not all(c.correct for c in evaluation.cases):
        return evaluation
    note = f"{SEED_ADMITTED} {evaluation.message}"[:300]
    return evaluation.model_copy(
        update={"status": Status.ok, "message": "", "flags": (*evaluation.flags, note)}
    )


def islands_line(archive: Archive, islands: Sequence[Island]) -> str:
    """One line: each island's elites, those no other island holds, and the source of the
    grid's fact axes (the AMD static compile, the CUDA build, or none); "" without elites."""
    if not any(island.grid for island in islands):
        return ""
    sizes = "/".join(str(len(island.grid)) for island in islands)
    own = "/".join(map(str, own_elites(islands)))
    elites = sorted({e.candidate_id for island in islands for e in island.elites})
    source = next(
        (
            axes_source(ev.static)
            for cid in elites
            if (ev := archive.evaluation_of(cid)) is not None and ev.static
        ),
        "",
    )
    axes = (
        f"occ, lds, vec and mfma from the {source}"
        if source
        else "no static facts: the occ, lds, vec and mfma axes read ?"
    )
    return f"islands: {sizes} elites, {own} of them on no other island; {axes}"


def _configuration(candidate: Candidate) -> dict[str, str]:
    if candidate.format != "native" or candidate.hip_source is None:
        return {}
    try:
        return current_configuration(parse_tunables(candidate.hip_source))
    except TunableError:
        return {}
