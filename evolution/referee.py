"""A run's referee: the baseline every speedup is measured against, which child may displace an
incumbent, the run's best, and the final word on it (DESIGN.md "Fitness").

- Baseline (hipevolve/core/baseline.py): the reference timed once when a run starts (or read
  from the verifier's cache of this card, task and toolchain: verifier/baseline_cache.py),
  stored as a `baseline` event; a resumed run on the same device keeps it. The task's strong
  baselines are timed once the first generation has landed, queued behind the evaluations in
  flight (`time_strong`), and taken in once timed (`settle`); from then on they bound what is
  believable (a case past the margin is suspect and re-checked: verifier/pipeline.recheck).
  Every evaluation the run records is rebased on it (Recorder.rebase), so fitness ranks
  candidates by their own times. An evaluator that times nothing (the static backend,
  stand-ins) leaves evaluations as they are.
- Displacing. A child whose fitness beats its cell's elite or the run's best (the champion) by
  more than the noise (duel.compare) displaces it; a closer call goes head to head (duel.decide)
  unless its gain is under min_gain (no head-to-head could call that a win: in a GDN run on an
  H100, 52 of 94 evaluations went on such close calls, most between kernels that differ only
  in AMD-only tunables), and a tie keeps the incumbent. The child then enters its island with
  the fitness the head-to-head gave it, never above an incumbent it did not beat, so
  islands.insert's strict comparison keeps the incumbent.
- The champion is the run's best: generation 0's best seed first, replaced only as above. It is
  what the run reports and saves; it travels in each checkpoint.
- The final lines: what the speedups are measured against (`describe`), the run's best over
  the reference and each strong baseline the task names, with their uncertainty (`against`),
  and the head-to-head against the seed (`confirm`).
- The end. When the reachable space is spent, what budget is left goes on head-to-heads of the
  contenders within the noise of the champion; then the champion meets the seed it started from
  over FitnessSettings.confirm_rounds rounds (reserved from the budget at the start), and the last
  line says "confirmed N% faster than the seed (+-M%)" or that no improvement was confirmed.
Head-to-heads spend the run's budget (evolution/budget.py RunBudget, which keeps the reserve for
the final one and restores what they spent from the archive's `duel` events on resume) and their
rounds are stored beside the candidates' scores, never replacing them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from hipevolve.archive.store import Archive
from hipevolve.core.baseline import RunBaseline
from hipevolve.core.config import FitnessSettings
from hipevolve.core.evaluation import Evaluation
from hipevolve.evolution.budget import DUEL, RunBudget
from hipevolve.evolution.duel import Duel, compare, decide
from hipevolve.evolution.islands import Elite
from hipevolve.evolution.recorder import Recorder
from hipevolve.verifier.evaluators import Evaluator, duel_order

BASELINE = "baseline"  # event: the run's baseline (RunBaseline JSON)
SMALLEST_CONFIRMED = 20  # budgets below this keep nothing back for the final head-to-head


def confirmation_rounds(settings: FitnessSettings, budget: int, *, exact: bool) -> int:
    """Rounds of the final head-to-head against the seed, whose evaluations (two a round) the
    run's budget keeps back from the start. Numbers from no device (a test's stand-in) carry no
    timing noise: every difference is real, and nothing is kept back for a confirmation."""
    return settings.confirm_rounds if budget >= SMALLEST_CONFIRMED and not exact else 0


class Referee:
    def __init__(
        self,
        archive: Archive,
        run: int,
        evaluate: Evaluator,
        recorder: Recorder,
        settings: FitnessSettings,
        budget: RunBudget,
    ) -> None:
        self.archive, self.run, self.evaluate = archive, run, evaluate
        self.recorder, self.settings = recorder, settings
        # Numbers from no device carry no timing noise: nothing goes head to head.
        self.exact = evaluate.device is None
        self.budget = budget  # the run's one budget: head-to-heads ask it, its reserve is theirs
        self.confirm_rounds = budget.reserve // 2  # two evaluations a round
        self.baseline: RunBaseline | None = None
        self.baseline_note = ""
        self._strong: Future | None = None  # the pending strong baselines, timing (time_strong)
        self.say: Callable[[str], None] = lambda status: None  # what the run is doing, one line
        self.champion: Elite | None = None
        self.seed: Elite | None = None
        self.known: dict[tuple[int, int], Duel] = {}

    # ---------------------------------------------------------------- the baseline

    def establish(self, resumed: bool) -> None:
        """The run's baseline: a resumed run's own when the device is the same, else timed now."""
        if resumed:
            for event in self.archive.events(self.run, DUEL):
                self.known[(event.data["duel"]["child"], event.data["duel"]["incumbent"])] = (
                    Duel.model_validate(event.data["duel"])
                )
            stored = self.archive.events(self.run, BASELINE)
            if stored:
                baseline = RunBaseline.model_validate(stored[-1].data)
                if baseline.device == (self.evaluate.device or ""):
                    self._use(baseline)
                    return
        if self.evaluate.device:
            self.say(
                f"the run's baseline on {self.evaluate.device}: the reference's time on "
                "each case (read from the cache, or timed once for this card and cached)"
            )
        started = time.monotonic()
        measured = self.evaluate.baseline(
            self.settings.baseline_trials, self.settings.baseline_target
        )
        if isinstance(measured, RunBaseline):
            self.archive.log_event(self.run, BASELINE, measured.model_dump(mode="json"))
            self._use(measured)
            self.say(
                f"baseline ready in {time.monotonic() - started:.0f} s; evaluating the seed kernels"
            )
        elif isinstance(measured, str):
            self.baseline_note = (
                f"no run baseline ({measured}): speedups use the reference "
                "timed inside each evaluation"
            )
            self.archive.log_event(self.run, "baseline_failed", {"why": measured})

    def describe(self) -> str:
        """One line: what the run's speedups are measured against."""
        if self.baseline is None:
            return self.baseline_note
        cases = ", ".join(
            f"{name} {c.time_us:.1f} us (+-{c.ci * 100:.1f}%)"
            for name, c in self.baseline.cases.items()
        )
        strong = (
            f"; strong baselines timed once beside it: {', '.join(self.baseline.others)}"
            if self.baseline.others
            else ""
        )
        return (
            f"speedups over the reference timed once for this run on {self.baseline.device}: "
            f"{cases}{strong}"
        )

    def against(self) -> str:
        """One line: the run's best over the reference and each strong baseline of the task
        (geometric means over the cases both timed, with their uncertainty), and the strong
        baselines that could not be timed, with why."""
        if self.baseline is None or self.champion is None:
            return ""
        evaluation = self.archive.evaluation_of(self.champion.candidate_id)
        if evaluation is None or not evaluation.ok:
            return ""
        line = self.baseline.against(evaluation.cases)
        return f"the run's best (candidate {self.champion.candidate_id}): {line}" if line else ""

    def _use(self, baseline: RunBaseline) -> None:
        self.baseline = baseline
        drift = self.settings.check_drift
        self.recorder.rebase = lambda evaluation: baseline.rebase(evaluation, drift)
        self.evaluate.use_baseline(baseline, self.settings.check_every)

    def time_strong(self) -> None:
        """Times the strong baselines still pending (FLA, FlashQLA, torch.compile: compiles
        of a minute or more) on a thread of their own, queued on the slots behind the
        evaluations in flight: a run's first evaluations do not wait for them (`settle`)."""
        if self.baseline is None or not self.baseline.pending or self._strong is not None:
            return
        self.say(
            f"timing the strong baselines ({', '.join(self.baseline.pending)}) once for "
            "this card: their kernels compiled first beside this run's evaluations, then "
            "one case a job between them (cached for later runs)"
        )
        self._strong = Future()
        trials, target = self.settings.baseline_trials, self.settings.baseline_target

        def work(future: Future = self._strong) -> None:
            try:
                future.set_result(self.evaluate.strong_baselines(trials, target))
            except BaseException as e:  # noqa: BLE001 (a line in the run, never its end)
                future.set_result(f"{type(e).__name__}: {e}")

        threading.Thread(target=work, name="strong-baselines", daemon=True).start()

    def settle(self, wait: bool = False) -> None:
        """Takes the strong baselines in once timed (`wait`: waits for them): the reference
        stays the run's denominator (RunBaseline.with_strong), and later evaluations are
        bounded by them (suspect past the margin)."""
        if self._strong is None or self.baseline is None or not self.baseline.pending:
            return
        if not wait and not self._strong.done():
            return
        measured = self._strong.result()
        if isinstance(measured, RunBaseline):
            merged = self.baseline.with_strong(measured)
        else:
            why = measured or "not timed on this evaluator"
            merged = self.baseline.model_copy(
                update={
                    "unavailable": {name: why[:300] for name in self.baseline.pending},
                    "pending": (),
                }
            )
        self.archive.log_event(self.run, BASELINE, merged.model_dump(mode="json"))
        if merged.strong_line():
            self.say(merged.strong_line())
        self._use(merged)

    # ---------------------------------------------------------------- displacing

    def restore(self, data: dict) -> None:
        """The champion and seed from a checkpoint's data."""
        if data.get("champion"):
            self.champion = Elite.model_validate(data["champion"])
        if data.get("seed"):
            self.seed = Elite.model_validate(data["seed"])

    def checkpoint(self) -> dict:
        return {
            "champion": self.champion.model_dump(mode="json") if self.champion else None,
            "seed": self.seed.model_dump(mode="json") if self.seed else None,
        }

    def seeded(self, elite: Elite) -> None:
        """A generation-0 candidate: the best of them is the seed and the first champion."""
        if self.champion is None or elite.fitness > self.champion.fitness:
            self.champion = self.seed = elite

    def admit(
        self, elite: Elite, evaluation: Evaluation, cell: Elite | None, generation: int
    ) -> Elite:
        """The child as it may enter its island: its fitness lowered to that of an incumbent
        (its cell's elite, or the champion) it did not clearly beat. Crowns it when it beats
        the champion."""
        fitness = elite.fitness
        for incumbent in [] if self.exact else _distinct(cell, self.champion, elite):
            if fitness <= incumbent.fitness:
                continue
            fitness = self._contest(elite, evaluation, incumbent, fitness, generation)
        elite = elite.model_copy(update={"fitness": fitness})
        if self.champion is None or fitness > self.champion.fitness:
            self.champion = elite
        return elite

    def _contest(
        self,
        elite: Elite,
        evaluation: Evaluation,
        incumbent: Elite,
        fitness: float,
        generation: int,
    ) -> float:
        """The child's fitness after meeting `incumbent` (clear, or a head-to-head)."""
        theirs = self.archive.evaluation_of(incumbent.candidate_id)
        if theirs is None or not theirs.ok:
            return fitness
        call, gain = compare(evaluation, theirs, self.settings.noise_floor)
        if call == "clear":
            return fitness
        if gain <= self.settings.min_gain:  # a head-to-head could not call it a win: a tie
            return min(fitness, incumbent.fitness)
        duel = self.duel(
            elite.candidate_id, incumbent.candidate_id, self.settings.duel_rounds, generation
        )
        if duel is not None and duel.winner == "child":
            return max(incumbent.fitness * (1 + duel.gain), incumbent.fitness * 1.000001)
        return min(fitness, incumbent.fitness)  # a tie keeps the incumbent

    def duel(
        self, child: int, incumbent: int, rounds: int, generation: int, *, reserved: bool = False
    ) -> Duel | None:
        """A head-to-head (a recorded one on replay); None when the budget has no room for it.
        reserved: the final confirmation, paid from the reserve."""
        if (child, incumbent) in self.known:
            return self.known[(child, incumbent)]
        cost = 2 * rounds
        if rounds < 1 or not self.budget.duel(cost, generation, reserved=reserved):
            return None
        a, b = self.recorder.source(child), self.recorder.source(incumbent)
        with self.recorder.clock.timing(cost, width=1):  # its rounds run on one slot
            played = self.evaluate.head_to_head(a, b, rounds)
        evaluations = [self.recorder.rebase(e) for e in played]
        order = ["child" if c is a else "incumbent" for c in duel_order(a, b, rounds)]
        number = len(self.known) + 1
        for i, (who, evaluation) in enumerate(zip(order, evaluations, strict=True)):
            cid = child if who == "child" else incumbent
            self.recorder.record(cid, evaluation, suffix=f"duel{number}:{i}", scores=False)
        self.recorder.add_evaluated(cost)
        outcome = decide(child, incumbent, order, evaluations, self.settings.min_gain)
        self.known[(child, incumbent)] = outcome
        self.archive.log_event(
            self.run,
            DUEL,
            {
                "duel": outcome.model_dump(mode="json"),
                "generation": generation,
                "evaluations": cost,
            },
        )
        return outcome

    # ---------------------------------------------------------------- the end

    def contenders(self, elites: list[Elite], generation: int) -> None:
        """The budget left after the search ran dry, on head-to-heads of the elites within the
        noise of the champion (the fittest first)."""
        champion = self.champion
        if champion is None or self.exact or self.settings.duel_rounds < 1:
            return
        close = sorted(
            (
                e
                for e in elites
                if e.candidate_id != champion.candidate_id
                and e.fitness >= champion.fitness * (1 - self.settings.noise_floor)
            ),
            key=lambda e: (-e.fitness, e.candidate_id),
        )
        for elite in close:
            assert self.champion is not None
            duel = self.duel(
                elite.candidate_id,
                self.champion.candidate_id,
                self.settings.duel_rounds,
                generation,
            )
            if duel is None:
                return
            if duel.winner == "child":
                self.champion = elite.model_copy(
                    update={"fitness": max(elite.fitness, self.champion.fitness * (1 + duel.gain))}
                )

    def unspent_reserve(self) -> int:
        """Evaluations kept back for the final head-to-head and not spent on it."""
        spent = (
            self.known.get((self.champion.candidate_id, self.seed.candidate_id))
            if self.champion and self.seed
            else None
        )
        return 0 if spent is not None else self.budget.reserve

    def confirm(self, generation: int) -> str:
        """The final head-to-head of the champion against the seed, as the run's last line."""
        champion, seed = self.champion, self.seed
        if champion is None or seed is None:
            return ""
        if champion.candidate_id == seed.candidate_id:
            return "no improvement over the seed: the seed is still the run's best"
        if self.exact:
            gain = champion.fitness / seed.fitness - 1 if seed.fitness else 0.0
            return (
                f"{gain * 100:.1f}% faster than the seed (an evaluator on no device: "
                "exact numbers, nothing to confirm)"
            )
        if self.confirm_rounds < 1:
            return (
                f"not confirmed against the seed: a budget under {SMALLEST_CONFIRMED} keeps "
                "no evaluations back for the head-to-head"
            )
        duel = self.duel(
            champion.candidate_id, seed.candidate_id, self.confirm_rounds, generation, reserved=True
        )
        if duel is None:
            return "not confirmed against the seed: no budget left for the head-to-head"
        spread = f"+-{2 * duel.uncertainty * 100:.1f}%, {duel.rounds} rounds head to head"
        if duel.winner == "child":
            return f"confirmed {duel.gain * 100:.1f}% faster than the seed ({spread})"
        self.champion = seed  # not confirmed: the seed stays the run's best, and is what it saves
        return (
            f"no confirmed improvement over the seed (candidate {champion.candidate_id} "
            f"measured {duel.gain * 100:+.1f}%, {spread}): the seed stays the run's best"
        )


def _distinct(cell: Elite | None, champion: Elite | None, child: Elite) -> list[Elite]:
    """The incumbents a child meets: its cell's elite, then the champion, each once, never
    itself."""
    found: list[Elite] = []
    for e in (cell, champion):
        if e is not None and e.candidate_id != child.candidate_id and e not in found:
            found.append(e)
    return found
