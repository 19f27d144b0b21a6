"""Repair after a wrong result, over real HTTP: the stand-in verifier scores a kernel that halves
its outputs `incorrect` with the comparison's mismatch summary; the repairer's turn follows up on
the mutator's own conversation and quotes it (pinned to tests/snapshots/repairer_incorrect.txt),
and the repaired child descends from it."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
from agents_support import (
    WRONG_MARK,
    CompilingStandIn,
    halved_softmax_mismatch,
    replay_steps,
    replayed_run,
    transcript,
)
from llm_server import ScriptedLLMServer, message_text

from hipevolve.archive.store import Archive
from hipevolve.core.evaluation import Status

REPLIES = "softmax_wrong_result"
SNAPSHOT = Path(__file__).resolve().parent / "snapshots" / "repairer_incorrect.txt"
DECIMAL = re.compile(r"\d+\.\d+(?:e[-+]?\d+)?")


def same_but_float_noise(text: str, pinned: str, rel: float = 1e-4) -> bool:
    """The texts are equal but for decimal numbers, and those agree within `rel`: the mismatch
    summary's errors come from torch's softmax, whose last digit differs between torch builds
    (0.000917077 against 0.000917078). Rounding both to a few digits would still fail where the
    two straddle a rounding boundary; a tolerance does not."""
    if DECIMAL.split(text) != DECIMAL.split(pinned):
        return False
    ours, theirs = DECIMAL.findall(text), DECIMAL.findall(pinned)
    return all(
        math.isclose(float(a), float(b), rel_tol=rel) for a, b in zip(ours, theirs, strict=True)
    )


def test_the_snapshot_comparison_forgives_a_last_digit_and_nothing_more():
    pinned = "got 0.000917077 expected 0.000916854; max rel err 0.5"
    assert same_but_float_noise(pinned.replace("917077", "917078"), pinned)
    assert same_but_float_noise(pinned.replace("0.5", "0.4999999"), pinned)
    assert not same_but_float_noise(pinned.replace("917077", "927077"), pinned)
    assert not same_but_float_noise(pinned.replace("got", "gets"), pinned)
    assert not same_but_float_noise(pinned + " 1.0", pinned)


@pytest.fixture(autouse=True)
def _no_real_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_repairer_is_shown_the_mismatch_summary_and_its_fix_descends_from_the_wrong_kernel(
    tmp_path,
):
    evaluate = CompilingStandIn(tmp_path / "cache")
    with ScriptedLLMServer(replay_steps(REPLIES)) as server, \
            Archive.open(tmp_path / "a.db") as archive:  # fmt: skip
        summary = replayed_run(archive, evaluate, server.api_base, budget=3)
        requests = list(server.requests)
        ids = archive.candidate_ids(summary.run)
        records = [archive.candidate(c) for c in ids]
        evaluations = [archive.evaluation_of(c) for c in ids]
        edges = archive.db.execute(
            "SELECT parent FROM lineage WHERE child = ? AND kind = 'mutation'", [ids[2]]
        ).fetchall()
    assert summary.reason == "budget", summary.message
    assert len(requests) == len(transcript(REPLIES)) == 4
    assert [e.status for e in evaluations] == [Status.ok, Status.incorrect, Status.ok]
    wrong, repaired = records[1], records[2]
    assert WRONG_MARK in wrong.candidate.hip_source and wrong.agent == "mutator"
    mismatch, _ = halved_softmax_mismatch()
    assert evaluations[1].mismatch == mismatch and "elements outside atol" in mismatch
    # The repairer's request follows up on the mutator's own turn: its prompt and reply, then
    # the failure, the mismatch summary, the idea and the diff that put the wrong line in.
    messages = requests[3].body["messages"]
    mutator_turn = requests[2].body["messages"]
    reply = transcript(REPLIES)[2]["reply"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    # the same text, its stable parts still marked for the provider's cache (at most 4 markers)
    assert [message_text(m) for m in messages[:2]] == [message_text(m) for m in mutator_turn]
    assert message_text(messages[2]) == reply
    markers = [b for m in messages if isinstance(m["content"], list) for b in m["content"]
               if "cache_control" in b]  # fmt: skip
    assert len(markers) == 4 and "cache_control" in messages[2]["content"][-1]
    prompt = message_text(messages[-1])
    assert prompt.startswith("# Role: repairer\n")
    assert "gave wrong results (incorrect)" in prompt and mismatch in prompt
    added = [line for line in prompt.splitlines() if line.startswith("+") and WRONG_MARK in line]
    assert "```diff\n" in prompt and added
    assert "Larger blocks, and a cheaper normaliser." in prompt  # the optimizer's idea
    assert "the candidate that failed" not in prompt
    if os.environ.get("HIPEVOLVE_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(prompt)
    assert same_but_float_noise(prompt, SNAPSHOT.read_text()), (
        f"repairer prompt differs from {SNAPSHOT}"
    )
    # The fix descends from the wrong kernel, not from the seed it was mutated from.
    assert repaired.agent == "repairer" and edges == [(ids[1],)]
    assert WRONG_MARK not in repaired.candidate.hip_source
    # Its idea is the repair (what failed, what the reply says it fixed), not the idea of the
    # child that failed, which stays that child's own.
    assert repaired.attempt.idea.startswith(f"repair of candidate {ids[1]} (incorrect")
    assert repaired.attempt.idea.endswith(": The normaliser must be 1 / sum; restored.")
    assert wrong.attempt.idea == "Larger blocks, and a cheaper normaliser."
    assert "Larger blocks" not in repaired.attempt.idea + repaired.attempt.diagnosis
    assert summary.progress.best_fitness == pytest.approx(1.2)


def test_a_kernel_whose_judge_failed_gets_no_repair_turn_and_a_crash_does():
    """A judge error (the harness's own code failed) says nothing about the kernel: a repair
    turn there would ask a model to fix a healthy kernel."""
    from hipevolve.agents.roles.repairer import REPAIRABLE, failure_of
    from hipevolve.core.evaluation import JUDGE_ERROR, Evaluation

    judged = Evaluation(status=Status.runtime_error, task="t", flags=(JUDGE_ERROR,),
                        message="judge error: FileNotFoundError: reference.py")  # fmt: skip
    assert failure_of(judged).kind not in REPAIRABLE
    crashed = judged.model_copy(update={"flags": (), "message": "crash: signal 11"})
    assert failure_of(crashed).kind == "runtime_error"
    assert failure_of(crashed).kind in REPAIRABLE
