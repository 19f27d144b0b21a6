"""The LLM client against a real loopback HTTP server that scripts a provider's faults (FAULTS 28)."""

from __future__ import annotations

import socket
import time

import pytest
from llm_server import ScriptedLLMServer, Step

from hipevolve.agents.llm.client import (
    LLMCall,
    LLMClient,
    Usage,
    prompt_hash,
    record_call,
)
from hipevolve.agents.llm.preflight import check_model
from hipevolve.core.errors import UserError

MODEL = "openai/test-model"
MESSAGES = [{"role": "user", "content": "write a softmax kernel"}]


@pytest.fixture(autouse=True)
def _no_real_keys(monkeypatch):
    # A real key in the developer's environment must never be sent, even to loopback.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def client(server: ScriptedLLMServer, **kw) -> LLMClient:
    settings = {"timeout_s": 5.0, "max_retries": 3, "backoff_s": 0.05, "backoff_max_s": 0.2}
    settings.update(kw)
    return LLMClient(MODEL, server.api_base, **settings)


def test_success_returns_text_usage_and_prompt_hash():
    with ScriptedLLMServer([Step.ok("hello", prompt_tokens=12, completion_tokens=3)]) as server:
        call = client(server).complete("translator", MESSAGES)
        sent = server.requests[0]
    assert call.ok and call.text == "hello"
    assert (call.tokens_in, call.tokens_out, call.attempts) == (12, 3, 1)
    assert call.prompt_hash == prompt_hash(MESSAGES)
    assert call.role == "translator" and call.model == MODEL
    assert call.cost_usd == 0.0 and not call.cost_known  # litellm has no price for test-model
    assert sent.path.endswith("/chat/completions")
    assert sent.body["messages"] == MESSAGES and sent.body["model"] == "test-model"


def test_rate_limit_waits_for_retry_after_then_succeeds():
    with ScriptedLLMServer([Step.rate_limit(retry_after=1), Step.ok("after")]) as server:
        call = client(server).complete("mutator", MESSAGES)
        first, second = server.requests
    assert call.ok and call.text == "after" and call.attempts == 2
    gap = second.at - first.at
    assert 0.9 <= gap < 1.0 + 5.0, f"retried {gap:.2f} s after a Retry-After of 1 s"  # slack: load


def test_retry_after_is_capped():
    with ScriptedLLMServer([Step.rate_limit(retry_after=3600), Step.ok("x")]) as server:
        call = client(server, retry_after_cap_s=0.2).complete("mutator", MESSAGES)
        first, second = server.requests
    assert call.ok and second.at - first.at < 10.0  # capped at 0.2 s, not 3600 (slack: load)


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_error_is_retried_then_succeeds(status):
    with ScriptedLLMServer([Step.server_error(status), Step.ok("fine")]) as server:
        call = client(server).complete("repairer", MESSAGES)
        assert server.count == 2
    assert call.ok and call.text == "fine" and call.attempts == 2


def test_stall_past_timeout_is_retried_then_succeeds():
    with ScriptedLLMServer([Step.stall(8.0), Step.ok("on time")]) as server:
        start = time.monotonic()
        call = client(server, timeout_s=0.5).complete("optimizer", MESSAGES)
        elapsed = time.monotonic() - start
        assert server.count == 2
    assert call.ok and call.text == "on time" and call.attempts == 2
    assert elapsed < 6.0, f"waited {elapsed:.2f} s on a 0.5 s timeout"  # the stall lasts 8 s


def test_bad_request_is_not_retried():
    with ScriptedLLMServer([Step.bad_request(), Step.ok("never")]) as server:
        call = client(server).complete("mutator", MESSAGES)
        assert server.count == 1
    assert call.status == "error" and call.error_class == "bad_request" and call.attempts == 1
    assert "temperature" in (call.error or "")


def test_context_overflow_is_not_retried():
    with ScriptedLLMServer([Step.context_overflow(), Step.ok("never")]) as server:
        call = client(server).complete("mutator", MESSAGES)
        assert server.count == 1
    assert call.error_class == "context_overflow" and call.attempts == 1
    assert "maximum context length" in (call.error or "")


def test_malformed_body_is_an_error_not_retried():
    with ScriptedLLMServer([Step.malformed(), Step.ok("never")]) as server:
        call = client(server).complete("mutator", MESSAGES)
        assert server.count == 1
    assert call.status == "error" and call.error_class == "malformed_response"


@pytest.mark.parametrize("content", ["", None])
def test_empty_reply_is_ok_with_empty_text(content):
    with ScriptedLLMServer([Step.ok(content)]) as server:
        call = client(server).complete("mutator", MESSAGES)
    assert call.ok and call.text == ""


def test_retries_stop_after_max_retries():
    with ScriptedLLMServer([Step.server_error(503)] * 3) as server:
        call = client(server, max_retries=2).complete("mutator", MESSAGES)
        assert server.count == 3
    assert call.error_class == "server_error" and call.attempts == 3


def test_token_budget_stops_further_calls():
    script = [Step.ok("a", 60, 30), Step.ok("b", 60, 30), Step.ok("never")]
    with ScriptedLLMServer(script) as server:
        llm = client(server, token_budget=150)
        first, second, third = (llm.complete("mutator", MESSAGES) for _ in range(3))
        assert server.count == 2
    assert first.ok and second.ok  # 90 used < 150, so the second call may start
    assert third.error_class == "budget_exhausted" and third.attempts == 0
    assert "180 of 150" in (third.error or "")
    assert llm.usage == Usage(calls=2, tokens_in=120, tokens_out=60, cost_usd=0.0)


def test_cost_budget_counts_priced_models():
    # gpt-4o-mini is in litellm's shipped price map; its name reaches the server as is.
    script = [Step.ok("a", 100_000, 100_000), Step.ok("never")]
    with ScriptedLLMServer(script) as server:
        llm = LLMClient("openai/gpt-4o-mini", server.api_base, timeout_s=5, max_retries=0,
                        cost_budget_usd=0.01)  # fmt: skip
        first, second = llm.complete("mutator", MESSAGES), llm.complete("mutator", MESSAGES)
        assert server.count == 1
    assert first.cost_known and first.cost_usd > 0.01
    assert second.error_class == "budget_exhausted" and "cost budget" in (second.error or "")


def test_spent_usage_from_a_previous_run_counts_against_the_budget():
    with ScriptedLLMServer([]) as server:
        llm = client(server, token_budget=100, spent=Usage(calls=3, tokens_in=80, tokens_out=20,
                                                           cost_usd=0.0))  # fmt: skip
        call = llm.complete("mutator", MESSAGES)
        assert server.count == 0
    assert call.error_class == "budget_exhausted"


def test_every_outcome_is_an_llmcall_and_records_in_the_archive(tmp_path):
    from hipevolve.archive.store import Archive

    script = [Step.bad_request(), Step.context_overflow(), Step.ok("x", 11, 7)]
    with ScriptedLLMServer(script) as server:
        llm = client(server, token_budget=18)
        calls = [llm.complete("mutator", MESSAGES) for _ in range(4)]
    assert all(isinstance(c, LLMCall) for c in calls)
    assert [c.error_class for c in calls] == [
        "bad_request", "context_overflow", None, "budget_exhausted"
    ]  # fmt: skip
    with Archive.open(tmp_path / "a.db") as archive:
        run = archive.start_run("softmax", {}, seed=0, budget=1)
        rows = [record_call(archive, run, c) for c in calls]
        usage = archive.llm_usage(run)
        errors = archive.events(run, "llm_error")
    assert rows[3] is None and all(isinstance(r, int) for r in rows[:3])
    assert (usage.calls, usage.tokens_in, usage.tokens_out) == (3, 11, 7)
    assert [e.data["error_class"] for e in errors] == ["bad_request", "context_overflow"]


# ----------------------------------------------------------------------------- preflight


def test_check_model_accepts_a_reachable_local_server():
    with ScriptedLLMServer([]) as server:
        assert check_model(MODEL, server.api_base) == "openai"


def test_check_model_names_an_unknown_provider():
    with pytest.raises(UserError, match="unknown model 'nosuchprovider/x'"):
        check_model("nosuchprovider/x")


def test_check_model_names_the_missing_key(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UserError, match="needs ANTHROPIC_API_KEY"):
        check_model("anthropic/claude-sonnet-4-5")


def test_check_model_names_a_refused_connection():
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UserError, match="connection refused"):
        check_model(MODEL, f"http://127.0.0.1:{port}/v1")


# ----------------------------------------------------------------------------- usage, finish, stream


LONG_PROMPT = [{"role": "user", "content": "write a softmax kernel for rows of 8192 " * 200}]


def test_server_without_usage_is_charged_an_estimate_and_the_token_budget_trips():
    script = [Step.ok("x" * 4000, usage=False), Step.ok("y" * 4000, usage=False), Step.ok("no")]
    with ScriptedLLMServer(script) as server:
        llm = client(server, token_budget=3000)
        calls = [llm.complete("mutator", LONG_PROMPT) for _ in range(3)]
        assert server.count == 2  # the estimate of the first two calls exhausts 3000 tokens
    first = calls[0]
    assert first.ok and first.tokens_estimated
    assert first.tokens_in > 1000 and first.tokens_out > 300  # ~1600 and ~500 by the tokenizer
    assert calls[2].error_class == "budget_exhausted"
    assert llm.usage.tokens_in + llm.usage.tokens_out >= 3000


def test_server_with_usage_is_charged_its_numbers_not_an_estimate():
    with ScriptedLLMServer([Step.ok("x" * 4000, prompt_tokens=5, completion_tokens=9)]) as server:
        call = client(server).complete("mutator", LONG_PROMPT)
    assert (call.tokens_in, call.tokens_out, call.tokens_estimated) == (5, 9, False)


@pytest.mark.parametrize("finish", ["stop", "length"])
def test_finish_reason_is_kept(finish):
    with ScriptedLLMServer([Step.ok("```hip\n__global__ void k", finish_reason=finish)]) as server:
        call = client(server).complete("mutator", MESSAGES)
    assert call.ok and call.finish_reason == finish


@pytest.mark.parametrize("usage", [True, False])
def test_streamed_reply_is_assembled_with_its_finish_reason_and_tokens(usage):
    text = "```hip\n" + "// line of a long kernel\n" * 200 + "```\n"
    script = [Step.ok(text, 40, 900, usage=usage, finish_reason="length")]
    with ScriptedLLMServer(script) as server:
        call = client(server, stream=True).complete("mutator", MESSAGES)
        sent = server.requests[0].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert call.ok and call.text == text and call.finish_reason == "length"
    if usage:
        assert (call.tokens_in, call.tokens_out) == (40, 900)
    else:  # litellm counts the streamed text itself
        assert call.tokens_in > 0 and call.tokens_out > 100


def test_max_concurrent_bounds_requests_in_flight():
    from concurrent.futures import ThreadPoolExecutor

    script = [Step.ok(f"r{i}", delay_s=0.3) for i in range(4)]
    with ScriptedLLMServer(script) as server:
        llm = client(server, max_concurrent=2)
        with ThreadPoolExecutor(4) as pool:
            calls = list(pool.map(lambda _: llm.complete("mutator", MESSAGES), range(4)))
        assert server.max_in_flight == 2
    assert all(c.ok for c in calls)


def test_installed_litellm_is_within_the_pinned_range():
    import tomllib
    from importlib.metadata import version
    from pathlib import Path

    from packaging.requirements import Requirement

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    pins = [Requirement(r) for r in pyproject["project"]["dependencies"]]
    (litellm,) = [r for r in pins if r.name == "litellm"]
    assert litellm.specifier.contains(version("litellm")), (version("litellm"), litellm)
