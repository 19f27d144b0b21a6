"""What one proposal costs in input tokens: the parent once plus a few thousand for the rest.

A gated_delta_net run in a real SQLite archive, mid-run (a child as its best, with times per
case and static facts, earlier attempts with their ideas and outcomes, the run's notes, elites
to quote as inspirations), shown by `evolve prompts show ROLE --archive --run --json` for the
proposal's three roles. Their requests share a prefix (system, briefing, parent, memory, each
ending in a cache marker); the proposal's input not read from the provider's cache is the first
request whole plus each later one's own part.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

from hipevolve.agents import scratchpad
from hipevolve.agents.briefing import platform_view
from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.tokens import count_tokens
from hipevolve.agents.state import AgentLimits
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.records import Attempt
from hipevolve.archive.store import Archive
from hipevolve.core.evaluation import CaseResult, Evaluation, StaticFacts, Status
from hipevolve.evolution.budget import RunBudget
from hipevolve.evolution.child import Child
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.recorder import Recorder
from hipevolve.evolution.workshop import Workshop
from hipevolve.problems import get_task
from hipevolve.verifier.evaluators import BaseEvaluator

TASK = get_task("gated_delta_net")
SEED = first_candidates(TASK)[0].candidate
EVERYTHING_ELSE = 6000  # tokens a proposal may send besides the parent, uncached
MOVES = [("BV", "32", "64"), ("TC_STAGES", "3", "2"), ("MFMA_KSTEP", "16", "32"),
         ("BV", "32", "16"), ("U_BF16", "1", "0"), ("AMD_STATE_BF16", "2", "1")]  # fmt: skip
FACTS = tuple(StaticFacts(kernel=name, target="gfx942", vgprs=96, agprs=32, sgprs=40,
                          lds_bytes=32768, occupancy=3, mfma=48, global_loads={"dwordx4": 12},
                          lds_ops=40)
              for name in ("gdn_prep", "gdn_chunk_state", "gdn_chunk_output"))  # fmt: skip


def variant(name: str, was: str, now: str):
    define = f"#define {name} {was}\n"
    assert define in SEED.hip_source, define
    return SEED.model_copy(update={"hip_source": SEED.hip_source.replace(define,
                                                                         f"#define {name} {now}\n")})  # fmt: skip


class Timed(BaseEvaluator):
    """Every timed case at a made-up time by source; one variant fails to compile."""

    settings_key, toolchain = "tokens", "stand-in"

    def __call__(self, candidates):
        out = []
        for c in candidates:
            if "#define U_BF16 0\n" in c.hip_source:
                out.append(
                    Evaluation(
                        status=Status.compile_error,
                        task=TASK.name,
                        message=(
                            "kernel.hip(812): error: no matching function for call to 'pack_bf16'"
                        ),
                    )
                )
                continue
            # the seed slowest, so the run's best is a child whatever the seed's hash
            speed = 1.0 if c.source_hash == SEED.source_hash else 1.01 + (
                sum(map(ord, c.source_hash)) % 40) / 100  # fmt: skip
            out.append(Evaluation(status=Status.ok, task=TASK.name, backend="rocm", static=FACTS,
                                  cases=tuple(CaseResult(case=k.name, correct=True,
                                                         time_us=900.0 / speed if k.timed else None,
                                                         ref_time_us=1800.0 if k.timed else None)
                                              for k in TASK.cases)))  # fmt: skip
        return out


def mid_run_archive(path) -> int:
    """A GDN run at generation 5: the seed, six children with ideas (one failed), two elites,
    the run's notes."""
    with Archive.open(path) as archive:
        run = archive.start_run(TASK, EvolutionSettings(), 0, 200)
        recorder = Recorder(archive, run, Timed())
        seed = recorder.store(Child(candidate=SEED, island=0, agent="seed"), 0)
        recorder.record(seed, Timed()([SEED])[0])
        workshop = Workshop(TASK, recorder, 5, RunBudget(200))
        for name, was, now in MOVES:
            idea = (f"Move {name} from {was} to {now}: the chunk loop then keeps more of the state "
                    "tile in registers and issues fewer LDS round trips per chunk, which the "
                    "profile says bound the long cases.")  # fmt: skip
            workshop.evaluate(Child(candidate=variant(name, was, now), island=0, parents=(seed,),
                                    agent="mutator", model="openai/x", attempt=Attempt(idea=idea)))  # fmt: skip
        for cell, top in enumerate(archive.top(run, 3)):
            archive.set_elite(run, 0, str(cell), top.candidate_id, top.fitness)
        ctx = AgentContext(task=TASK, workshop=workshop, limits=AgentLimits(), ensemble=None,
                           rng=random.Random(0))  # fmt: skip
        assert scratchpad.write_note(ctx)
    return run


def shown(role: str, path, run: int) -> dict:
    out = subprocess.run([sys.executable, "-m", "hipevolve", "prompts", "show", role, "--task",
                          TASK.name, "--backend", "rocm", "--archive", str(path), "--run",
                          str(run), "--json"], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_gdn_proposal_sends_the_parent_once_and_at_most_6k_tokens_besides(tmp_path):
    run = mid_run_archive(tmp_path / "a.db")
    roles = [shown(role, tmp_path / "a.db", run) for role in ("profiler_reader", "optimizer",
                                                                "mutator")]  # fmt: skip
    texts = ["".join(b["text"] for m in r["messages"] for b in m["content"]) for r in roles]
    owns = [r["tokens"]["own"] for r in roles]
    prefixes = {t[: t.rindex("# Role: ")] for t in texts}
    assert len(prefixes) == 1  # the same bytes before each role's own part
    with Archive.open(tmp_path / "a.db") as archive:
        best = archive.candidate(archive.best(run).candidate_id).candidate
    assert best.source_hash != SEED.source_hash  # a mid-run parent, with its evaluation:
    assert "| 2.00x |" not in texts[0] and "gdn_chunk_state (gfx942): 96 VGPRs" in texts[0]
    assert "-> compile_error: kernel.hip(812)" in texts[0] and "After generation 5" in texts[0]
    assert "### candidate" in texts[0]  # inspirations
    parent = count_tokens(platform_view(best.hip_source, "amd").text) + count_tokens(
        best.python_source
    )
    proposal = roles[0]["tokens"]["total"] + owns[1] + owns[2]
    print(
        f"GDN proposal, uncached: {proposal} input tokens = parent {parent} + "
        f"{proposal - parent} (system {roles[0]['tokens']['system']}, own parts {owns})"
    )
    assert proposal <= parent + EVERYTHING_ELSE, (proposal, parent)
