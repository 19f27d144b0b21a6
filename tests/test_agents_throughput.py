"""The agents keep the GPU slots busy and never spend without evaluating: evaluations on every
slot at once, re-checks only where they matter and inside the budget, and a stop when the model
writes nothing new."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest
from agents_support import MODEL
from llm_server import ScriptedLLMServer, Step

from hipevolve.agents.llm.ensemble import Ensemble, ModelSettings
from hipevolve.agents.policy import AgentPolicy
from hipevolve.agents.roles.auditor import surprising
from hipevolve.agents.state import AgentLimits
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.evolution.budget import Admission, RunBudget
from hipevolve.evolution.child import Child, Proposal
from hipevolve.evolution.islands import Elite, EvolutionSettings
from hipevolve.evolution.recorder import Recorder
from hipevolve.evolution.run import run_evolution
from hipevolve.evolution.workshop import Workshop
from hipevolve.problems import get_task
from hipevolve.verifier.evaluators import BaseEvaluator

TASK = get_task("softmax")
SEED = first_candidates(TASK)[0].candidate


class Slots(BaseEvaluator):
    """Holds a slot `seconds` per candidate; records how many calls overlapped."""

    settings_key, toolchain = "slots", "stand-in"

    def __init__(self, parallelism: int, seconds: float = 0.3) -> None:
        self.parallelism, self.seconds = parallelism, seconds
        self.running = self.most = self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, candidates: list[Candidate]) -> list[Evaluation]:
        with self.lock:
            self.running += 1
            self.calls += 1
            self.most = max(self.most, self.running)
        time.sleep(self.seconds)
        with self.lock:
            self.running -= 1
        return [Evaluation(status=Status.ok, task=TASK.name, cases=(
            CaseResult(case="c", correct=True, time_us=50.0, ref_time_us=100.0),))
            for _ in candidates]  # fmt: skip


def variant(block: int) -> Candidate:
    return SEED.model_copy(update={"hip_source": SEED.hip_source.replace(
        "#define BLOCK 256", f"#define BLOCK {block}")})  # fmt: skip


def test_a_generation_evaluates_on_every_slot_at_once_and_shares_a_duplicate(tmp_path):
    evaluate = Slots(parallelism=2)
    with Archive.open(tmp_path / "a.db") as archive:
        run = archive.start_run(TASK, EvolutionSettings(), 0, 10)
        workshop = Workshop(TASK, Recorder(archive, run, evaluate), 1, RunBudget(10))
        children = [variant(b) for b in (64, 128, 512, 512)]  # the last two are the same code
        threads = [threading.Thread(target=workshop.evaluate, args=(Child(candidate=c, island=0),))
                   for c in children]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert evaluate.most == 2  # both slots busy at once, never more
    assert evaluate.calls == 3 == workshop.evaluations  # the duplicate waited for, not re-run


def test_a_recheck_spends_the_budget_and_is_refused_once_it_is_spent():
    budget = RunBudget(2)
    budget.restore(admitted=[("a", 0)])
    assert budget.recheck() and budget.spent == 2 and budget.exhausted
    assert not budget.recheck() and budget.spent == 2
    assert budget.admit("b") is Admission.exhausted


def test_only_a_suspect_speedup_or_a_new_island_best_is_rechecked():
    class Ctx:
        task, limits = TASK, AgentLimits(surprising_speedup=10.0)

    def state(fitness: float, island_best: float, rechecks: int = 0) -> dict:
        ev = Evaluation(
            status=Status.ok,
            task=TASK.name,
            cases=(CaseResult(case="c", correct=True, time_us=100 / fitness, ref_time_us=100.0),),
        )
        parent = Elite(candidate_id=1, fitness=1.0, source_hash="h", cell=())
        return {"evaluation": ev, "rechecks": rechecks,
                "proposal": Proposal(island=0, parent=parent, island_best=island_best)}  # fmt: skip

    assert surprising(Ctx(), state(1.5, island_best=1.4))  # a new island best
    assert not surprising(Ctx(), state(1.3, island_best=1.4))  # an ordinary child
    assert surprising(Ctx(), state(12.0, island_best=20.0))  # above the suspect speedup
    assert not surprising(Ctx(), state(12.0, island_best=1.0, rechecks=1))  # once only


def test_a_model_that_only_repeats_the_parent_stops_the_run_and_says_why(tmp_path):
    no_op = "kernel.hip\n<<<<<<< SEARCH\n#define BLOCK 256\n=======\n#define BLOCK 256\n>>>>>>> REPLACE\n"
    steps = []
    for _ in range(6):
        steps += [
            Step.ok(json.dumps({"bottleneck": "latency", "summary": "few waves"}),
                    expect="# Role: profiler_reader"),
            Step.ok(json.dumps({"idea": "change nothing", "transform": None}),
                    expect="# Role: optimizer"),
            Step.ok(no_op, expect="# Role: mutator"),
            # refused as identical to the parent before any compile; the repairer's two turns
            # (told so) repeat it again
            Step.ok(no_op, expect="identical to candidate 1"),
            Step.ok(no_op, expect="identical to candidate 1"),
        ]  # fmt: skip
    with ScriptedLLMServer(steps) as server, Archive.open(tmp_path / "a.db") as archive:
        models = ModelSettings.for_model(
            MODEL, api_base=server.api_base, max_retries=0, timeout_s=30
        )
        policy = AgentPolicy(Ensemble(models), AgentLimits(
            concurrency=1, stall_generations=2, proposals_per_generation=1,
            sweep_configurations=0))  # only the model writes: no seed sweep  # fmt: skip
        summary = run_evolution(TASK, archive, EvolutionSettings(islands=1, proposals_per_island=1),
                                Slots(parallelism=1, seconds=0.0), first=[Child(candidate=SEED, island=0)],
                                budget=20, seed=0, policy=policy)  # fmt: skip
        sent = server.count
    assert summary.reason == "llm_budget"
    assert "no new evaluation in 2 generations" in summary.message
    assert summary.progress.evaluations == 1  # the seed, nothing else
    assert sent == 10  # two generations of five calls, then the stop


def test_a_run_with_a_priced_model_says_its_cost_floor_and_cap_before_it_starts():
    from hipevolve.agents.briefing import Target
    from hipevolve.app.cost_estimate import estimate

    found = estimate(
        "anthropic/claude-sonnet-4-5", get_task("gated_delta_net"), Target("static"), 200
    )
    assert 20_000 < found.tokens_in < 80_000  # three prompts, each with the system prompt
    assert found.usd is not None and found.usd == found.usd_per_proposal * 200 > 5
    line = found.line(25.0)
    assert line.startswith("LLM cost: at least $") and "--cost-budget" in line
    local = estimate("openai/served", TASK, Target("static"), 10, api_base="http://127.0.0.1:9/v1")
    assert local.usd is None and "no price known" in local.line(25.0)


def test_a_spent_budget_cancels_a_writing_call_in_flight_and_keeps_its_prompt_tokens(tmp_path):
    from hipevolve.agents.context import AgentContext

    slow = Step.ok(json.dumps({"bottleneck": "latency", "summary": "few waves"}), delay_s=30.0)
    with ScriptedLLMServer([slow, slow]) as server, Archive.open(tmp_path / "a.db") as archive:
        models = ModelSettings.for_model(
            MODEL, api_base=server.api_base, max_retries=0, timeout_s=60
        )
        run = archive.start_run(TASK, EvolutionSettings(), 0, 2)
        budget = RunBudget(2)
        workshop = Workshop(TASK, Recorder(archive, run, Slots(1)), 1, budget)
        ctx = AgentContext(task=TASK, workshop=workshop, limits=AgentLimits(),
                           ensemble=Ensemble(models), rng=random.Random(0))  # fmt: skip
        replies: list = []
        asking = threading.Thread(
            target=lambda: replies.append(
                ctx.ask("profiler_reader", "# Role: profiler_reader\nread")
            )
        )
        asking.start()
        while server.count == 0:  # the request is on the wire
            time.sleep(0.02)
        budget.admit("a"), budget.admit("b")  # the run's last evaluations are admitted
        spent = time.monotonic()
        asking.join(timeout=10)
        waited = time.monotonic() - spent
        rows = archive.db.execute("SELECT role, tokens_in, tokens_out FROM llm_calls").fetchall()
        errors = [e.data for e in archive.events(run, "llm_error")]
        again = ctx.ask("mutator", "# Role: mutator\nwrite")  # the budget is spent: not sent
        sent = server.count
    assert replies and replies[0].error_class == "cancelled" and not replies[0].ok
    assert waited < 5  # not the reply's 30 s
    assert rows == [("profiler_reader", replies[0].tokens_in, 0)] and replies[0].tokens_in > 0
    assert errors and errors[0]["error_class"] == "cancelled"
    assert again.error_class == "cancelled" and sent == 1  # the second call never left
    assert len(archive_rows(tmp_path)) == 1  # and is not in the accounting


def test_a_cancelled_call_that_was_sent_is_billed_for_its_tokens_and_a_resume_counts_them(tmp_path):
    from hipevolve.agents.context import AgentContext
    from hipevolve.agents.llm.client import load_litellm, spent_in

    priced = "openai/priced-test-model"  # $3 a million input tokens, as litellm prices it
    load_litellm().register_model({priced: {"input_cost_per_token": 3e-6,
                                            "output_cost_per_token": 15e-6,
                                            "litellm_provider": "openai", "mode": "chat"}})  # fmt: skip
    slow = Step.ok(json.dumps({"bottleneck": "latency", "summary": "few waves"}), delay_s=30.0)
    with ScriptedLLMServer([slow]) as server, Archive.open(tmp_path / "a.db") as archive:
        models = ModelSettings.for_model(priced, api_base=server.api_base, max_retries=0,
                                         timeout_s=60)  # fmt: skip
        run = archive.start_run(TASK, EvolutionSettings(), 0, 1)
        budget = RunBudget(1)
        workshop = Workshop(TASK, Recorder(archive, run, Slots(1)), 1, budget)
        ctx = AgentContext(task=TASK, workshop=workshop, limits=AgentLimits(),
                           ensemble=Ensemble(models), rng=random.Random(0))  # fmt: skip
        replies: list = []
        asking = threading.Thread(target=lambda: replies.append(
            ctx.ask("profiler_reader", "# Role: profiler_reader\nread")))  # fmt: skip
        asking.start()
        while server.count == 0:  # the request is on the wire
            time.sleep(0.02)
        budget.admit("a")  # the run's last evaluation is admitted: the reply is of no use
        asking.join(timeout=10)
        rows = archive.db.execute("SELECT tokens_in, cost_usd FROM llm_calls").fetchall()
        resumed = Ensemble(models, spent=spent_in(archive, run))  # what --resume starts from
    (call,) = replies
    assert resumed.usage().cost_usd == call.cost_usd  # it counts toward --cost-budget
    assert call.error_class == "cancelled" and call.tokens_estimated and call.cost_known
    assert rows == [(call.tokens_in, call.cost_usd)]
    assert call.cost_usd == pytest.approx(call.tokens_in * 3e-6) and call.cost_usd > 0


def archive_rows(tmp_path) -> list:
    with Archive.open(tmp_path / "a.db") as archive:
        return archive.db.execute("SELECT id FROM llm_calls").fetchall()
