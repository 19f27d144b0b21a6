"""The run's scratchpad: every few generations a note of what was tried and learned, built from
the archive (the same archive gives the same note), bounded in tokens, stored in the archive's
notes table (schema v4; a v3 archive migrates), and shown to the optimizer and the mutator."""

from __future__ import annotations

import html
import json
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from agents_support import CompilingStandIn, replay_steps, replayed_run
from llm_server import ScriptedLLMServer, Step, message_text
from sqlite_utils import Database

from hipevolve.agents import scratchpad
from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.ensemble import Ensemble
from hipevolve.agents.llm.tokens import count_tokens
from hipevolve.agents.roles import mutator, optimizer
from hipevolve.agents.state import AgentLimits
from hipevolve.app.run_job import first_candidates
from hipevolve.archive import schema
from hipevolve.archive.records import Attempt
from hipevolve.archive.store import Archive
from hipevolve.core.config import ModelSettings
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.evolution.budget import RunBudget
from hipevolve.evolution.child import Child, Proposal
from hipevolve.evolution.islands import Elite, EvolutionSettings
from hipevolve.evolution.offline.transforms import CATALOGUE
from hipevolve.evolution.recorder import Recorder
from hipevolve.evolution.workshop import Workshop
from hipevolve.export.dataset import export_dataset
from hipevolve.export.report import build_report
from hipevolve.problems import get_task
from hipevolve.problems.kernelbench import load_kernelbench_file
from hipevolve.verifier.evaluators import BaseEvaluator

TASK = get_task("softmax")
SEED = first_candidates(TASK)[0].candidate
REPO = Path(__file__).resolve().parents[1]
TIMES = {256: 80.0, 512: 60.0, 128: 95.0}  # us per BLOCK; 1024 does not compile


@pytest.fixture(autouse=True)
def _no_real_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


class ByBlock(BaseEvaluator):
    settings_key, toolchain = "scratchpad", "stand-in"

    def __call__(self, candidates):
        out = []
        for c in candidates:
            block = next(b for b in (128, 256, 512, 1024) if f"#define BLOCK {b}\n" in c.hip_source)
            if block == 1024:
                out.append(
                    Evaluation(
                        status=Status.compile_error,
                        task=TASK.name,
                        message="kernel.hip(40): error: too many resources\nmore",
                    )
                )
                continue
            out.append(
                Evaluation(
                    status=Status.ok,
                    task=TASK.name,
                    cases=(
                        CaseResult(
                            case="rows", correct=True, time_us=TIMES[block], ref_time_us=100.0
                        ),
                    ),
                )
            )
        return out


def variant(block: int):
    return SEED.model_copy(update={"hip_source": SEED.hip_source.replace(
        "#define BLOCK 256", f"#define BLOCK {block}")})  # fmt: skip


IDEAS = {512: "wider blocks hide the exp latency", 1024: "even wider blocks",
         128: "narrower blocks for more waves"}  # fmt: skip


def run_with_children(archive: Archive, generation: int = 5) -> tuple[Workshop, int]:
    """A run whose seed has three children: one faster, one that does not compile, one slower."""
    run = archive.start_run(TASK, EvolutionSettings(), 0, 10)
    recorder = Recorder(archive, run, ByBlock())
    seed_id = recorder.store(Child(candidate=SEED, island=0, agent="seed"), 0)
    recorder.record(seed_id, ByBlock()([SEED])[0])
    workshop = Workshop(TASK, recorder, 1, RunBudget(10))
    for block, idea in IDEAS.items():
        workshop.evaluate(Child(candidate=variant(block), island=0, parents=(seed_id,),
                                agent="mutator", model="openai/x",
                                attempt=Attempt(idea=idea)))  # fmt: skip
    return Workshop(TASK, recorder, generation, RunBudget(10)), seed_id


def context(workshop: Workshop | None, ensemble: Ensemble | None = None, **limits) -> AgentContext:
    return AgentContext(task=TASK, workshop=workshop, limits=AgentLimits(**limits),  # type: ignore[arg-type]
                        ensemble=ensemble, rng=random.Random(0))  # fmt: skip


def test_the_note_says_what_beat_its_parent_where_what_failed_and_why(tmp_path):
    with Archive.open(tmp_path / "a.db") as archive:
        workshop, _ = run_with_children(archive)
        note = scratchpad.build_note(archive, workshop.run, 5, max_tokens=400)
        again = scratchpad.build_note(archive, workshop.run, 5, max_tokens=400)
    assert note == again  # built from the archive alone: the same archive, the same note
    lines = note.splitlines()
    assert lines[0].startswith("After generation 5: 4 candidates evaluated, 3 correct.")
    beat = next(i for i, line in enumerate(lines) if line.startswith("Beat their parent (1"))
    assert (
        "wider blocks hide the exp latency -> fitness 1.667 from 1.250 (+33.3%)" in lines[beat + 1]
    )
    assert "faster on rows 1.25x->1.67x" in lines[beat + 1]
    assert any("narrower blocks for more waves -> fitness 1.053 against its parent's 1.250" in line
               for line in lines)  # fmt: skip
    assert any(line.startswith("- compile_error x1") and "even wider blocks -> kernel.hip(40): "
               "error: too many resources" in line for line in lines)  # fmt: skip


def test_a_repair_of_a_failed_child_gains_from_the_code_that_last_passed_not_from_zero(tmp_path):
    with Archive.open(tmp_path / "a.db") as archive:
        workshop, seed_id = run_with_children(archive)
        failed = next(c for c, s in workshop.sources.items() if "BLOCK 1024" in s.hip_source)
        fixed = variant(512)
        fixed = fixed.model_copy(update={"hip_source": fixed.hip_source + "\n#define REPAIRED 1\n"})
        workshop.evaluate(Child(candidate=fixed,
                                island=0, parents=(failed,), agent="repairer", model="openai/x",
                                attempt=Attempt(idea=f"repair of candidate {failed} "
                                                "(compile_error): fewer resources")))  # fmt: skip
        note = scratchpad.build_note(archive, workshop.run, 5, max_tokens=400)
        credits = {(c.role, c.model): c.reward for c in archive.credits(workshop.run)}
        usage = {u.model: u for u in archive.llm_usage_by_model(workshop.run)}
    repaired = next(line for line in note.splitlines() if "fewer resources" in line)
    assert "from 1.250" in repaired and "from 0.000" not in note  # the seed's, not the failure's
    # the bandit's record and the report's "beat their parent" count it the same way
    assert credits[("repairer", "openai/x")] == pytest.approx(100 / 60 - 100 / 80)
    assert usage["openai/x"].improved == 2  # the 512 child and the repair, over the seed


def test_the_notes_and_ideas_go_into_the_exported_dataset(tmp_path):
    with Archive.open(tmp_path / "a.db") as archive:
        workshop, _ = run_with_children(archive, generation=5)
        written = scratchpad.write_note(context(workshop, scratchpad_every=5))
        run = workshop.run
    export_dataset(tmp_path / "a.db", tmp_path / "data")
    notes = [json.loads(line) for line in (tmp_path / "data" / "notes.jsonl").read_text().splitlines()]
    assert [(n["run"], n["generation"], n["text"]) for n in notes] == [(run, 5, written)]
    ideas = {json.loads(line)["idea"] for line in
             (tmp_path / "data" / "evaluations.jsonl").read_text().splitlines()}  # fmt: skip
    assert set(IDEAS.values()) <= ideas
    assert "notes.jsonl" in (tmp_path / "data" / "DATASET.md").read_text()


def test_a_child_without_an_idea_is_described_by_the_tunables_it_moved(tmp_path):
    with Archive.open(tmp_path / "a.db") as archive:
        run = archive.start_run(TASK, EvolutionSettings(), 0, 10)
        recorder = Recorder(archive, run, ByBlock())
        seed_id = recorder.store(Child(candidate=SEED, island=0, agent="seed"), 0)
        recorder.record(seed_id, ByBlock()([SEED])[0])
        Workshop(TASK, recorder, 1, RunBudget(10)).evaluate(
            Child(candidate=variant(512), island=0, parents=(seed_id,), agent="offline-mutator")
        )
        note = scratchpad.build_note(archive, run, 5, max_tokens=400)
    assert "(generation 1, offline-mutator): tunables BLOCK 256->512 -> fitness 1.667" in note


class AnyOk(BaseEvaluator):
    settings_key, toolchain = "any-ok", "stand-in"

    def __call__(self, candidates):
        case = CaseResult(case="rows", correct=True, time_us=50.0, ref_time_us=100.0)
        return [Evaluation(status=Status.ok, task=TASK.name, cases=(case,)) for _ in candidates]


def test_a_child_of_the_offline_mutator_in_the_graph_records_its_move_and_its_lineage(tmp_path):
    """No model for the mutator: its child's idea says what the offline mutator did (the
    optimizer's transform, a tunable step, or a crossover naming both parents), and a crossover
    is recorded with both parents, not as a mutation of the proposal's parent."""
    from hipevolve.agents.roles import gate

    with Archive.open(tmp_path / "a.db") as archive:
        run = archive.start_run(TASK, EvolutionSettings(), 0, 40)
        recorder = Recorder(archive, run, AnyOk())
        ids, other = [], variant(512).hip_source.replace("#define VEC 4", "#define VEC 8")
        for candidate in (SEED, SEED.model_copy(update={"hip_source": other})):
            ids.append(recorder.store(Child(candidate=candidate, island=0, agent="seed"), 0))
            recorder.record(ids[-1], AnyOk()([candidate])[0])
        ctx = context(Workshop(TASK, recorder, 1, RunBudget(40)))
        elites = [Elite(candidate_id=i, fitness=2.0, source_hash=c.source_hash, cell=(str(i),))
                  for i, c in zip(ids, (recorder.source(i) for i in ids), strict=True)]  # fmt: skip
        transform = next(t.name for t in CATALOGUE if t.apply(SEED.hip_source) is not None)
        for turn in range(12):
            proposal = Proposal(island=0, parent=elites[0], inspirations=(elites[1],))
            state = {"proposal": proposal, "parent": SEED, "transform": transform if turn == 0
                     else None, "idea": "an optimizer's idea the mutator did not follow"}  # fmt: skip
            state |= mutator.node(ctx)(state)
            gate.node(ctx)(state)
        ideas = {a.candidate_id: a.idea for a in archive.attempted(run) if a.candidate_id > ids[1]}
        edges = archive.lineage_edges(run)
    assert len(ideas) == 12
    assert next(iter(ideas.values())) == (
        f"offline mutator on candidate {ids[0]}: transform {transform} (the optimizer's pick)"
    )
    crossed = {e.child for e in edges if e.kind == "crossover"}
    for cid, idea in ideas.items():
        parents = sorted(e.parent for e in edges if e.child == cid and e.kind != "inspiration")
        if cid in crossed:
            assert parents == ids and idea.startswith("offline mutator: crossover of candidates")
        else:
            assert len(parents) == 1 and idea.startswith(f"offline mutator on candidate {parents[0]}: ")
        assert "optimizer's idea" not in idea
    assert crossed


def test_the_note_is_stored_once_per_due_generation_and_shown_in_both_prompts(tmp_path):
    with Archive.open(tmp_path / "a.db") as archive:
        workshop, seed_id = run_with_children(archive, generation=5)
        ctx = context(workshop, scratchpad_every=5)
        written = scratchpad.write_note(ctx)
        assert written and scratchpad.write_note(ctx) is None  # not twice for one generation
        assert scratchpad.write_note(context(run_with_children(archive, 4)[0])) is None  # not due
        note = archive.latest_note(workshop.run)
        parent = Elite(candidate_id=seed_id, fitness=1.25, source_hash=SEED.source_hash, cell=())
        state = {"proposal": Proposal(island=0, parent=parent), "parent": SEED,
                 "parent_evaluation": None, "diagnosis": "latency", "idea": "x"}  # fmt: skip
        prompts = [
            mutator.prompt(ctx, state, "(none)").text(),
            optimizer.prompt(ctx, state, "(none)").text(),
        ]
    assert note is not None and note.generation == 5 and note.text == written and note.author == ""
    for text in prompts:
        shown = text.split("## Run notes (the run's scratchpad: what it has tried and learned "
                           "so far)\n", 1)[1]  # fmt: skip
        assert shown.startswith(f"(written after generation 5)\n{written}\n")


def test_a_prompt_before_any_note_says_when_notes_come():
    assert (
        scratchpad.notes(context(None))
        == "(none yet: the run writes its notes every 5 generations)"
    )
    assert "never" in scratchpad.notes(context(None, scratchpad_every=0))


def test_the_note_stays_within_its_token_bound_keeping_the_gains_first(tmp_path):
    with Archive.open(tmp_path / "a.db") as archive:
        run = archive.start_run(TASK, EvolutionSettings(), 0, 200)
        recorder = Recorder(archive, run, ByBlock())
        seed_id = recorder.store(Child(candidate=SEED, island=0, agent="seed"), 0)
        recorder.record(seed_id, ByBlock()([SEED])[0])
        workshop = Workshop(TASK, recorder, 1, RunBudget(200))
        for i in range(40):  # 40 distinct children, each with a long idea
            block = (512, 128, 1024)[i % 3]
            child = variant(block).model_copy(update={"hip_source": variant(block).hip_source
                                                      + f"\n#define VARIANT_{i} 1\n"})  # fmt: skip
            workshop.evaluate(
                Child(
                    candidate=child,
                    island=i % 4,
                    parents=(seed_id,),
                    agent="mutator",
                    attempt=Attempt(idea=f"idea {i}: " + "restructure the reduction " * 20),
                )
            )
        full = scratchpad.build_note(archive, run, 10, max_tokens=4000)
        short = scratchpad.build_note(archive, run, 10, max_tokens=150)
    assert count_tokens(full) > 150
    assert count_tokens(short) <= 150
    assert short.startswith("After generation 10: 41 candidates evaluated")
    assert "Beat their parent (14" in short  # the gains are the last to go


def test_a_model_condenses_the_note_when_asked_and_the_archives_note_stands_when_it_fails(tmp_path):
    steps = [Step.ok("- BLOCK 512 paid off on rows; BLOCK 1024 does not compile.",
                     expect="# Role: scratchpad"), Step.server_error(400)]  # fmt: skip
    with ScriptedLLMServer(steps) as server, Archive.open(tmp_path / "a.db") as archive:
        models = ModelSettings.for_model("openai/noter", api_base=server.api_base, max_retries=0)
        ensemble = Ensemble(models)
        workshop, _ = run_with_children(archive, generation=5)
        written = scratchpad.write_note(context(workshop, ensemble, scratchpad_writer="model"))
        by_model = archive.latest_note(workshop.run)
        later = Workshop(TASK, workshop._recorder, 10, RunBudget(10))
        fallback = scratchpad.write_note(context(later, ensemble, scratchpad_writer="model"))
        stored = archive.latest_note(workshop.run)
        facts = message_text(server.requests[0].body["messages"][-1])
    assert written == "- BLOCK 512 paid off on rows; BLOCK 1024 does not compile."
    assert by_model.author == "openai/noter"
    assert "## What the run has tried\nAfter generation 5:" in facts
    assert fallback.startswith("After generation 10:")  # the failed call: the archive's note
    assert stored.generation == 10 and stored.text == fallback and stored.author == ""


def test_the_graphs_prompts_carry_the_runs_notes(tmp_path):
    evaluate = CompilingStandIn(tmp_path / "cache", build=False)
    with ScriptedLLMServer(replay_steps()) as server, Archive.open(tmp_path / "a.db") as archive:
        summary = replayed_run(archive, evaluate, server.api_base,
                               limits={"audit_rechecks": 0, "scratchpad_every": 2})  # fmt: skip
        notes = archive.db.execute("SELECT generation, text FROM notes WHERE run = ?",
                                   [summary.run]).fetchall()  # fmt: skip
        sent = [message_text(r.body["messages"][-1]) for r in server.requests]
        page = build_report(archive, summary.run)
        latest = archive.latest_note(summary.run)
    assert notes and notes[0][0] == 2 and notes[0][1].startswith("After generation 2:")
    assert f"<h2>Run notes (after generation {latest.generation})</h2>" in page
    assert html.escape(latest.text).splitlines()[0] in page
    shown = [p for p in sent if ("# Role: mutator" in p or "# Role: optimizer" in p)
             and f"(written after generation 2)\n{notes[0][1]}\n" in p]  # fmt: skip
    assert shown, "no optimizer or mutator prompt showed the note"


def _columns(path) -> dict[str, list[str]]:
    conn = sqlite3.connect(path)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    out = {t: sorted(r[1] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables}
    conn.close()
    return out


def test_a_v3_archive_migrates_to_v4_keeping_its_attempts_and_takes_notes(tmp_path):
    old = tmp_path / "v3.db"
    db = Database(old)
    for step in schema.MIGRATIONS[:3]:  # the schema as hipevolve wrote it before notes
        step(db)
    db["meta"].insert_all([{"key": "app", "value": schema.MARKER},
                           {"key": "schema_version", "value": "3"},
                           {"key": "created", "value": "long ago"}])  # fmt: skip
    db["tasks"].insert({"name": TASK.name, "spec": TASK.model_dump_json()})
    db["runs"].insert({"id": 1, "task": TASK.name, "settings": "{}", "seed": 0, "budget": 4,
                       "status": "interrupted", "started": "t0"})  # fmt: skip
    db["candidates"].insert(
        {
            "id": 1,
            "run": 1,
            "source_hash": SEED.source_hash,
            "format": SEED.format,
            "python_source": SEED.python_source,
            "hip_source": SEED.hip_source,
            "agent": "mutator",
            "created": "t0",
        }
    )
    db["attempts"].insert({"candidate": 1, "idea": "kept", "diagnosis": "", "reply": ""})
    db.conn.commit()
    db.close()
    with Archive.open(old) as archive:
        assert schema.stored_version(archive.db) == schema.SCHEMA_VERSION == 4
        assert archive.candidate(1).candidate.hip_source == SEED.hip_source
        assert (
            archive.db.execute("SELECT idea FROM attempts WHERE candidate = 1").fetchone()[0]
            == "kept"
        )
        assert archive.latest_note(1) is None
        archive.resume(1)
        assert archive.add_note(1, 5, "after five") and not archive.add_note(1, 5, "again")
        assert archive.latest_note(1).text == "after five"
        created = dict(archive.db.execute("SELECT key, value FROM meta").fetchall())["created"]
    assert created == "long ago"
    Archive.open(tmp_path / "new.db").close()
    assert _columns(old) == _columns(tmp_path / "new.db")


def evolve(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hipevolve", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)  # fmt: skip


def test_prompts_show_with_a_run_shows_its_notes_and_attempts(tmp_path):
    with Archive.open(tmp_path / "a.db") as archive:
        workshop, _ = run_with_children(archive, generation=5)
        written = scratchpad.write_note(context(workshop, scratchpad_every=5))
    shown = evolve(
        "prompts",
        "show",
        "mutator",
        "--task",
        "softmax",
        "--backend",
        "static",
        "--archive",
        str(tmp_path / "a.db"),
        "--run",
        str(workshop.run),
        cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.stderr
    assert (
        f"## Run notes (the run's scratchpad: what it has tried and learned so far)\n"
        f"(written after generation 5)\n{written}\n" in shown.stdout
    )
    assert "wider blocks hide the exp latency -> ok, fitness 1.667" in shown.stdout  # attempts
    fresh = evolve("prompts", "show", "mutator", "--task", "softmax", "--backend", "static",
                   cwd=tmp_path)  # fmt: skip
    assert "(none yet: the run writes its notes every 5 generations)" in fresh.stdout


@pytest.mark.parametrize("role", ["profiler_reader", "optimizer", "mutator", "translator",
                                  "repairer", "auditor"])  # fmt: skip
def test_prompts_show_renders_every_role_of_a_kernelbench_run_with_its_stored_evaluation(
        tmp_path, role):  # fmt: skip
    """A KernelBench task's run (the offline lowering as its seed, a child that failed): every
    role's prompt, the parent measured as the run stored it, its inputs' shapes in the cases."""
    reference = REPO / "tests" / "data" / "kernelbench" / "level_test" / "19_ReLU.py"
    task = load_kernelbench_file(reference)
    with Archive.open(tmp_path / "a.db") as archive:
        run = archive.start_run(task, EvolutionSettings(), 0, 10)
        recorder = Recorder(archive, run, ByKernel(task.name))
        seed = first_candidates(task)[0].candidate
        seed_id = recorder.store(Child(candidate=seed, island=0, agent="seed"), 0)
        recorder.record(seed_id, ByKernel(task.name)([seed])[0])
        broken = seed.model_copy(update={"hip_source": seed.hip_source + "\n#define BROKEN 1\n"})
        Workshop(task, recorder, 1, RunBudget(10)).evaluate(
            Child(candidate=broken, island=0, parents=(seed_id,), agent="mutator"))
    shown = evolve("prompts", "show", role, "--task", task.name, "--tasks-dir", str(reference),
                   "--backend", "static", "--archive", str(tmp_path / "a.db"), "--run", str(run),
                   cwd=tmp_path)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert f"{role} on {task.name} (static): " in shown.stderr
    if role not in ("repairer", "auditor"):  # the two that show no cases
        assert "inputs float32[16, 1024]" in shown.stdout  # the case's tensors, not "default:"
    if role in ("profiler_reader", "optimizer", "mutator"):
        assert "| default | inputs float32[16, 1024] | 50.0 | 2.00x |" in shown.stdout
    if role == "repairer":
        assert "compile_error: kernel.hip(3): error: BROKEN" in shown.stdout
    if role == "mutator":  # without --tasks-dir: the task the run stored, its file still there
        again = evolve("prompts", "show", role, "--task", task.name, "--backend", "static",
                       "--archive", str(tmp_path / "a.db"), "--run", str(run), cwd=tmp_path)  # fmt: skip
        assert again.returncode == 0 and again.stdout == shown.stdout, again.stderr


class ByKernel(BaseEvaluator):
    """The seed takes 50 us of the reference's 100 on the task's default case; a kernel that
    defines BROKEN does not compile."""

    settings_key, toolchain = "kernelbench-show", "stand-in"

    def __init__(self, task: str) -> None:
        self.task = task

    def __call__(self, candidates):
        return [Evaluation(status=Status.compile_error, task=self.task,
                           message="kernel.hip(3): error: BROKEN is not a kernel")
                if "BROKEN" in c.hip_source else
                Evaluation(status=Status.ok, task=self.task, cases=(CaseResult(
                    case="default", correct=True, time_us=50.0, ref_time_us=100.0),))
                for c in candidates]  # fmt: skip


@pytest.mark.parametrize(("args", "says"), [
    (["--archive", "a.db"], "--archive and --run go together"),
    (["--archive", "a.db", "--run", "7"], "no run 7 in"),
    (["--archive", "missing.db", "--run", "1"], "missing.db"),
])  # fmt: skip
def test_prompts_show_with_a_bad_run_says_so_in_one_line(tmp_path, args, says):
    with Archive.open(tmp_path / "a.db") as archive:
        run_with_children(archive)
    out = evolve("prompts", "show", "mutator", "--task", "softmax", "--backend", "static", *args,
                 cwd=tmp_path)  # fmt: skip
    line = out.stderr.strip()
    assert out.returncode == 2 and line.startswith("error: ") and "\n" not in line, out.stderr
    assert says in line
