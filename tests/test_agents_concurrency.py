"""Concurrent proposals over real HTTP: with AgentLimits.concurrency 2 and a model that takes
0.2 s a reply, two calls are in flight at once and never more, evaluations overlap with calls
in flight, and the run evaluates the same set of kernels as one proposal at a time.

What the design promises with concurrency > 1 (agents/policy.py): the set of evaluated source
hashes, given the same replies, seed and a budget that does not cut a generation short; not the
order of evaluation, the candidate ids, nor which parent a reply was applied to (each proposal
takes whichever reply the model gives it first)."""

from __future__ import annotations

import pytest
from agents_support import CompilingStandIn, replay_steps, replayed_run, transcript
from llm_server import ScriptedLLMServer

from hipevolve.archive.store import Archive
from hipevolve.evolution.islands import EvolutionSettings

REPLIES = "softmax_concurrent"
SETTINGS = EvolutionSettings(islands=1, proposals_per_island=4)
BUDGET = 9  # the seed, then two generations of four proposals


@pytest.fixture(autouse=True)
def _no_real_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def run(tmp_path, concurrency: int) -> tuple[set[str], int, int, list[int], int]:
    """(evaluated hashes, calls recorded, most requests in flight, requests in flight as each
    evaluation started and ended, requests sent)."""
    with ScriptedLLMServer(replay_steps(REPLIES, delay_s=0.2), any_order=True) as server, \
            Archive.open(tmp_path / f"c{concurrency}.db") as archive:  # fmt: skip
        during: list[int] = []
        evaluate = CompilingStandIn(tmp_path / "cache", build=False, seconds=0.2,
                                    on_evaluate=lambda c: during.append(server.in_flight))  # fmt: skip
        summary = replayed_run(archive, evaluate, server.api_base, budget=BUDGET,
                               settings=SETTINGS, concurrency=concurrency,
                               limits={"audit_rechecks": 0})  # fmt: skip
        assert summary.reason == "budget", summary.message
        hashes = {archive.candidate(c).candidate.source_hash
                  for c in archive.candidate_ids(summary.run)}  # fmt: skip
        calls = archive.llm_usage(summary.run).calls
        return hashes, calls, server.max_in_flight, during, server.count


def test_two_calls_in_flight_never_more_and_the_same_kernels_as_one_at_a_time(tmp_path):
    parallel, calls, most, during, sent = run(tmp_path, concurrency=2)
    serial, serial_calls, serial_most, _, _ = run(tmp_path, concurrency=1)
    assert sent == calls == serial_calls == len(transcript(REPLIES)) == 24
    assert most == 2 and serial_most == 1  # the bound is reached and never passed
    assert any(n > 0 for n in during)  # an evaluation ran while a proposal awaited the model
    assert len(parallel) == BUDGET and parallel == serial
