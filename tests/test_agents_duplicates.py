"""A model's child that only re-spaces or re-comments code already tried is refused before any
compile (issue 34), and the model is told so in its next prompt, over real HTTP: the scripted
mutator re-spaces one line of the softmax seed (a new exact hash, the same tokens), the auditor
refuses it with "identical to candidate N after removing comments/whitespace", the repairer's
turn quotes that line, and only its real change reaches the evaluator."""

from __future__ import annotations

import pytest
from agents_support import CompilingStandIn, replayed_run
from llm_server import ScriptedLLMServer, Step

from hipevolve.archive.store import Archive
from hipevolve.evolution.islands import EvolutionSettings

MERGE = "    s = s * exp_of(m - mx) + s2 * exp_of(m2 - mx);"
RESPACED = "kernel.hip\n<<<<<<< SEARCH\n" + MERGE + "\n=======\n" + (
    "    s = s*exp_of(m-mx) + s2*exp_of(m2-mx);  // the merge, tighter\n>>>>>>> REPLACE\n")
SMALLER = ("kernel.hip\n<<<<<<< SEARCH\n#define BLOCK 256\n=======\n#define BLOCK 128\n"
           ">>>>>>> REPLACE\n")  # fmt: skip
STEPS = [
    Step.ok('{"bottleneck": "latency", "summary": "few waves."}', expect="# Role: profiler_reader"),
    Step.ok('{"idea": "tighten the merge", "transform": null}', expect="# Role: optimizer"),
    Step.ok(RESPACED, expect="# Role: mutator"),
    Step.ok(SMALLER, expect="identical to candidate 1 after removing comments/whitespace"),
]


@pytest.fixture(autouse=True)
def _no_real_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_a_respaced_copy_of_the_parent_is_refused_before_compiling_and_the_model_is_told(
    tmp_path,
):
    evaluate = CompilingStandIn(tmp_path / "cache", build=False)
    settings = EvolutionSettings(islands=1, proposals_per_island=1)
    with ScriptedLLMServer(STEPS) as server, Archive.open(tmp_path / "a.db") as archive:
        summary = replayed_run(archive, evaluate, server.api_base, budget=2, settings=settings)
        requests = list(server.requests)
        refused = archive.events(summary.run, "audit_duplicate")
        stored = [archive.candidate(c).candidate for c in archive.candidate_ids(summary.run)]
    assert summary.reason == "budget", summary.message
    assert len(requests) == 4  # the repairer's turn was answered: the model saw the reason
    assert [e.data["twin"] for e in refused] == [1]
    assert len(evaluate.calls) == 2 and [c.source_hash for c in stored] == evaluate.calls
    assert "#define BLOCK 128" in (stored[1].hip_source or "")
    assert "s*exp_of(m-mx)" in (stored[1].hip_source or "")  # the repair kept editing the copy
