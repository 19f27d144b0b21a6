"""The agents driving a search over real HTTP (a scripted OpenAI-compatible server on loopback),
in a real SQLite archive: the replayed transcript, its candidates' compiles, the budgets."""

from __future__ import annotations

import pytest
from agents_support import (
    BROKEN_MARK,
    BUDGET,
    CompilingStandIn,
    nvcc_compiler,
    replay_steps,
    replayed_run,
    transcript,
)
from llm_server import ScriptedLLMServer

from hipevolve.archive.store import Archive
from hipevolve.core.evaluation import Status
from hipevolve.export.report import build_report
from hipevolve.verifier.build.compile import build_many


@pytest.fixture(autouse=True)
def _no_real_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One compile cache for the module: each transcript kernel is built by nvcc once."""
    return tmp_path_factory.mktemp("build-cache")


def test_transcript_kernels_compile_with_nvcc_except_the_deliberately_broken_one(cache_dir):
    from agents_support import TRANSCRIPT

    from hipevolve.agents.llm.replies import parse_reply
    from hipevolve.core.candidate import load_candidate

    seed = load_candidate(TRANSCRIPT.parents[2] / "problems" / "softmax" / "seeds" / "tunable")
    kernels = [parse_reply(s["reply"], seed) for s in transcript() if "```hip" in s["reply"]]
    assert len(kernels) == 7 and all(k.ok for k in kernels)
    results = build_many([k.candidate.hip_source for k in kernels], nvcc_compiler(), cache_dir)
    broken = [BROKEN_MARK in k.candidate.hip_source for k in kernels]
    assert [not r.ok for r in results] == broken, [r.log for r in results]
    failed = results[broken.index(True)]
    assert "undeclared_scale" in failed.log and "kernel.hip(" in failed.log


def test_replayed_run_records_every_call_a_repair_and_a_parse_error(tmp_path, cache_dir):
    evaluate = CompilingStandIn(cache_dir)
    with ScriptedLLMServer(replay_steps()) as server, Archive.open(tmp_path / "a.db") as archive:
        # The transcript was written for a run without hidden-seed re-checks.
        summary = replayed_run(archive, evaluate, server.api_base, limits={"audit_rechecks": 0})
        requests = server.count
        run = summary.run
        calls = archive.db.execute(
            "SELECT role, model, tokens_in, tokens_out FROM llm_calls WHERE run = ?", [run]
        ).fetchall()
        parse_errors = archive.events(run, "parse_error")
        rows = archive.db.execute(
            "SELECT c.id, c.agent, c.model, e.status FROM candidates c JOIN evaluations e"
            " ON e.id = c.evaluation_id WHERE c.run = ? ORDER BY c.id",
            [run],
        ).fetchall()
        repaired = [r for r in rows if r[1] == "repairer"]
        edges = archive.db.execute(
            "SELECT parent FROM lineage WHERE child = ? AND kind = 'mutation'", [repaired[1][0]]
        ).fetchall()
        failed = [r for r in rows if r[3] == "compile_error"]
        llm_errors = archive.events(run, "llm_error")
        fallbacks = archive.events(run, "reply_fallback")
        page = build_report(archive, run)
        repair_idea = archive.candidate(repaired[1][0]).attempt.idea
    assert summary.reason == "budget", summary.message
    assert requests == len(transcript()) == 21
    assert len(calls) == 21 and not llm_errors  # every call recorded, none out of step
    assert [c[0] for c in calls] == [s["role"] for s in transcript()]
    assert all(c[1] == "openai/test-model" and (c[2], c[3]) == (900, 300) for c in calls)
    # The malformed reply: recorded with its class and raw text; the repairer went on from it.
    assert len(parse_errors) == 1
    event = parse_errors[0].data
    assert event["role"] == "mutator" and event["error_class"] == "no_code_block"
    assert event["reply"].startswith("I would widen")
    # The profiler_reader's reply that is not JSON: one repair turn, then its offline rule, counted.
    assert [f.data["role"] for f in fallbacks] == ["profiler_reader"]
    # The broken build: a compile_error, then a repaired child descending from it.
    assert len(failed) == 1 and len(repaired) == 2
    assert edges == [(failed[0][0],)]
    assert repaired[1][3] == "ok"
    assert repair_idea.startswith(f"repair of candidate {failed[0][0]} (compile_error")
    # `evolve report` counts what the replies came to, by role, and lists what was tried.
    assert "<h2>What the agents' replies came to</h2>" in page
    assert "<td class=l>parse_error</td><td class=l>1</td><td class=l>mutator 1</td>" in page
    assert "<td class=l>reply_fallback</td><td class=l>1</td><td class=l>profiler_reader 1</td>" in page
    assert "<h2>What was tried</h2>" in page and f"repair of candidate {failed[0][0]}" in page
    assert len(rows) == BUDGET and summary.progress.evaluations == BUDGET
    assert summary.progress.best_fitness == pytest.approx(1.2 * 1.3 * 1.1)


def test_surprising_winners_get_one_hidden_seed_recheck_within_the_budget(tmp_path, cache_dir):
    evaluate = CompilingStandIn(cache_dir, boost=3.0)  # every correct kernel above 3x
    with ScriptedLLMServer(replay_steps()) as server, Archive.open(tmp_path / "a.db") as archive:
        summary = replayed_run(archive, evaluate, server.api_base,
                               limits={"surprising_speedup": 3.0})  # fmt: skip
        rechecks = archive.events(summary.run, "audit_recheck")
        ok = archive.db.execute(
            "SELECT count(*) FROM candidates c JOIN evaluations e ON e.id = c.evaluation_id"
            " WHERE c.run = ? AND e.status = 'ok' AND c.generation > 0 AND c.fitness > 3",
            [summary.run],
        ).fetchone()[0]
        children = summary.progress.evaluations
    # Each winner above 3x once (ROWS=2 scores 3 * 0.95, below); the seed is no proposal's child.
    assert ok >= 1 and len(rechecks) == ok
    assert all(r.data["status"] == "ok" for r in rechecks)
    # Re-checks spend the budget: children and re-checks together are the budget, no more.
    assert summary.reason == "budget", summary.message
    assert len(evaluate.calls) == children + len(rechecks) == BUDGET


def test_token_budget_stops_the_run_cleanly_and_says_so(tmp_path, cache_dir):
    evaluate = CompilingStandIn(cache_dir)
    with ScriptedLLMServer(replay_steps()) as server, Archive.open(tmp_path / "a.db") as archive:
        # 1200 tokens a call: the 4th call would start past 4000 tokens, so it is never sent.
        summary = replayed_run(archive, evaluate, server.api_base, budget=50, token_budget=4000)
        sent = server.count
        usage = archive.llm_usage(summary.run)
        status = archive.run(summary.run).status
    assert summary.reason == "llm_budget" and summary.status == "finished"
    assert "token budget exhausted: 4800 of 4000 tokens used" in summary.message
    assert sent == 4 and usage.calls == 4
    assert status == "finished"


@pytest.mark.gpu
def test_replayed_run_evolves_softmax_on_the_gpu_with_every_call_in_the_archive(tmp_path):
    from hipevolve.core.config import VerifierSettings
    from hipevolve.problems import get_task
    from hipevolve.verifier.evaluators import pipeline_evaluator

    evaluate = pipeline_evaluator(
        get_task("softmax"), VerifierSettings(cache_dir=tmp_path / "cache", trials=10), "auto"
    )
    try:
        with ScriptedLLMServer(replay_steps()) as server, \
                Archive.open(tmp_path / "a.db") as archive:  # fmt: skip
            # The transcript was written for a run without hidden-seed re-checks.
            summary = replayed_run(archive, evaluate, server.api_base,
                                   limits={"audit_rechecks": 0})  # fmt: skip
            sent = server.count
            calls = archive.llm_usage(summary.run).calls
            run = summary.run
            statuses = [archive.evaluation_of(c).status for c in archive.candidate_ids(run)]
            parse_errors = archive.events(run, "parse_error")
            events = archive.events(run)
    finally:
        evaluate.close()  # its judges hold device memory: the GPU tests after this one need it
    assert sent == calls == 21, [e.kind for e in events]
    assert len(parse_errors) == 1
    assert statuses.count(Status.compile_error) == 1, statuses
    assert statuses.count(Status.ok) == BUDGET - 1, statuses
    assert summary.progress.best_fitness > 0
