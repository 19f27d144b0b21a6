"""The agents remember what was tried: each model-written child's idea, diagnosis and reply are
stored with it, prompts show the latest attempts near the parent with their outcomes, and the
exported dataset carries the reasoning."""

from __future__ import annotations

from hipevolve.agents.briefing import tried_text
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.records import Attempt
from hipevolve.archive.store import Archive
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.evolution.budget import RunBudget
from hipevolve.evolution.child import Child, Proposal
from hipevolve.evolution.islands import Elite, EvolutionSettings
from hipevolve.evolution.recorder import Recorder
from hipevolve.evolution.workshop import Workshop
from hipevolve.export.dataset import records as dataset_records
from hipevolve.problems import get_task
from hipevolve.verifier.evaluators import BaseEvaluator

TASK = get_task("softmax")
SEED = first_candidates(TASK)[0].candidate


class Fixed(BaseEvaluator):
    settings_key, toolchain = "memory", "stand-in"

    def __call__(self, candidates):
        out = []
        for c in candidates:
            if "BLOCK 1024" in c.hip_source:
                out.append(Evaluation(status=Status.compile_error, task=TASK.name,
                                      message="kernel.hip(40): error: too many resources\nmore"))
            else:
                out.append(Evaluation(status=Status.ok, task=TASK.name, cases=(
                    CaseResult(case="c", correct=True, time_us=80.0, ref_time_us=100.0),)))
        return out


def variant(block: int):
    return SEED.model_copy(update={"hip_source": SEED.hip_source.replace(
        "#define BLOCK 256", f"#define BLOCK {block}")})  # fmt: skip


def test_attempts_are_stored_shown_near_their_parent_and_exported(tmp_path):
    with Archive.open(tmp_path / "a.db") as archive:
        run = archive.start_run(TASK, EvolutionSettings(), 0, 10)
        recorder = Recorder(archive, run, Fixed())
        seed_id = recorder.store(Child(candidate=SEED, island=0, agent="seed"), 0)
        recorder.record(seed_id, Fixed()([SEED])[0])
        workshop = Workshop(TASK, recorder, 1, RunBudget(10))
        for block, idea in ((512, "wider blocks hide latency"), (1024, "even wider blocks")):
            workshop.evaluate(Child(candidate=variant(block), island=0, parents=(seed_id,),
                                    agent="mutator", model="openai/x", attempt=Attempt(
                                        idea=idea, diagnosis="latency: few waves",
                                        reply=f"kernel.hip\n... BLOCK {block} ...")))  # fmt: skip
        parent = Elite(candidate_id=seed_id, fitness=1.25, source_hash=SEED.source_hash, cell=())
        text = tried_text(workshop, Proposal(island=0, parent=parent))
        records = {r.candidate_id: r for r in dataset_records(archive, run)}
    lines = text.splitlines()
    assert len(lines) == 2 and "child of the parent" in lines[0]
    assert "even wider blocks -> compile_error: kernel.hip(40): error: too many resources" in lines[0]
    assert "wider blocks hide latency -> ok, fitness 1.250" in lines[1]
    exported = [r for r in records.values() if r.agent == "mutator"]
    assert {r.idea for r in exported} == {"wider blocks hide latency", "even wider blocks"}
    assert all(r.diagnosis == "latency: few waves" and "BLOCK" in r.reply for r in exported)
    assert records[seed_id].idea == ""  # the seed: no agent's reasoning


def test_a_prompt_without_a_run_says_nothing_was_tried_yet():
    assert tried_text(None, Proposal(island=0, parent=None)) == "(none yet)"
