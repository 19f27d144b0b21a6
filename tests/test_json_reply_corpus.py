"""A corpus of realistic JSON replies (tests/data/json_replies/) for the profiler_reader and the
optimizer: each read right or refused aloud, none silently wrong, and at least 95% of them
answered in one turn (read as written or repaired, or refused and answered by the repair turn).

Each file is one reply with a TOML header between `+++` lines:
    role = "profiler_reader"   # or "optimizer": the schema the reply is read against
    expect = "ok"              # or "refused"
    says = "never closes"      # refused: a phrase the error must hold (optional)
    [answer]                   # ok: the fields the answer must have (transform left out: null)
    bottleneck = "memory"
    summary = "..."
Right: the answer has exactly those fields, or a refusal came with an error. Silently wrong: an
answer came out that differs, or came out of a reply that must be refused. Lost: refused where
an answer was expected.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from agents_support import MODEL
from llm_server import ScriptedLLMServer, Step, message_text
from reply_corpus_support import load_case

from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.ensemble import Ensemble, ModelSettings
from hipevolve.agents.llm.structured import read_json_reply
from hipevolve.agents.roles.optimizer import Idea
from hipevolve.agents.roles.profiler_reader import Diagnosis
from hipevolve.agents.state import AgentLimits
from hipevolve.agents.structured_call import ask_json
from hipevolve.archive.store import Archive
from hipevolve.evolution.budget import RunBudget
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.recorder import Recorder
from hipevolve.evolution.workshop import Workshop
from hipevolve.problems import get_task

CORPUS = Path(__file__).parent / "data" / "json_replies"
SCHEMAS = {"profiler_reader": Diagnosis, "optimizer": Idea}
CASES = sorted(CORPUS.glob("*.md"))
# What a model answers on the repair turn, once told what could not be read.
CLEAN = {
    "profiler_reader": '{"bottleneck": "memory", "summary": "41% of the memory roofline."}',
    "optimizer": '{"idea": "16-byte loads.", "transform": "widen_vector"}',
}


def judge(path: Path) -> str:
    """right, lost or silently_wrong, for one reply of the corpus."""
    case, reply = load_case(path)
    reading = read_json_reply(reply, SCHEMAS[case["role"]])
    if case["expect"] == "refused":
        if reading.answer is not None:
            return "silently_wrong"
        return "right" if case.get("says", "") in reading.error else "lost"
    if reading.answer is None:
        return "lost"
    want = {"transform": None} if case["role"] == "optimizer" else {}
    return "right" if reading.answer.model_dump() == want | case["answer"] else "silently_wrong"


def test_corpus_covers_both_json_roles_and_both_outcomes():
    cases = [load_case(p)[0] for p in CASES]
    assert len(cases) >= 40
    assert {c["role"] for c in cases} == set(SCHEMAS)
    for role in SCHEMAS:
        assert sum(c["role"] == role for c in cases) >= 20
    refusals = sum(c["expect"] == "refused" for c in cases)
    assert 5 <= refusals < len(cases) // 4


def test_corpus_read_right_or_refused_aloud_and_never_silently_wrong(capsys):
    verdicts = {p.name: judge(p) for p in CASES}
    wrong = sorted(n for n, v in verdicts.items() if v == "silently_wrong")
    lost = sorted(n for n, v in verdicts.items() if v == "lost")
    read = sum(load_case(p)[0]["expect"] == "ok" and verdicts[p.name] == "right" for p in CASES)
    with capsys.disabled():
        print(f"\nJSON reply corpus: {len(verdicts) - len(wrong) - len(lost)}/{len(verdicts)} "
              f"right ({read} read, the rest refused aloud), lost {lost}, "
              f"silently wrong {wrong}")  # fmt: skip
    assert not wrong, f"silently wrong: {wrong}"
    assert not lost, f"lost: {lost}"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_expectation_is_well_formed(path):
    case, _ = load_case(path)
    assert case["role"] in SCHEMAS and case["expect"] in ("ok", "refused")
    assert (case["expect"] == "ok") == bool(case.get("answer"))
    if case.get("answer"):
        SCHEMAS[case["role"]].model_validate(case["answer"])  # the expectation is an answer


# ----------------------------------------------------------------------------- over real HTTP


def context(archive: Archive, api_base: str) -> tuple[AgentContext, int]:
    task = get_task("softmax")
    models = ModelSettings.for_model(MODEL, api_base=api_base, max_retries=0, timeout_s=30)
    run = archive.start_run(task, EvolutionSettings(), 0, 2)
    no_gpu = SimpleNamespace(parallelism=1)  # the calls evaluate nothing
    workshop = Workshop(task, Recorder(archive, run, no_gpu), 1, RunBudget(100))  # type: ignore[arg-type]
    ctx = AgentContext(task=task, workshop=workshop, limits=AgentLimits(),
                       ensemble=Ensemble(models), rng=random.Random(0))  # fmt: skip
    return ctx, run


def test_json_corpus_answered_in_one_turn_at_least_95_percent_over_http(tmp_path, capsys):
    """Each reply from a scripted provider over real HTTP; a reply that cannot be read is sent
    back once with its error, and the provider then answers cleanly."""
    script = []
    for path in CASES:
        case, reply = load_case(path)
        script.append(Step.ok(reply))
        if case["expect"] == "refused":
            script.append(Step.ok(CLEAN[case["role"]], expect="Repair turn:"))
    answered, repaired, fallbacks = 0, 0, 0
    with ScriptedLLMServer(script) as server, Archive.open(tmp_path / "a.db") as archive:
        ctx, run = context(archive, server.api_base)
        for path in CASES:
            case, _ = load_case(path)
            answer = ask_json(
                ctx, case["role"], f"# Role: {case['role']}\nreply", SCHEMAS[case["role"]]
            )
            answered += answer.value is not None
        repaired = len(archive.events(run, "reply_repaired"))
        fallbacks = len(archive.events(run, "reply_fallback"))
        errors = archive.events(run, "reply_error")
        sent = server.count
    with capsys.disabled():
        print(f"\nJSON replies over HTTP: {answered}/{len(CASES)} answered in one turn "
              f"({repaired} by the repair turn), {fallbacks} fell back")  # fmt: skip
    assert sent == len(script)  # one repair turn for each refusal, none for the rest
    assert answered >= 0.95 * len(CASES) and fallbacks == len(CASES) - answered
    assert repaired == len(errors) == sum(load_case(p)[0]["expect"] == "refused" for p in CASES)


def test_a_reply_unread_twice_falls_back_counted_with_both_errors(tmp_path):
    with ScriptedLLMServer([Step.ok("I think memory."), Step.ok("Still memory, really.")]) as server, \
            Archive.open(tmp_path / "a.db") as archive:  # fmt: skip
        ctx, run = context(archive, server.api_base)
        answer = ask_json(ctx, "profiler_reader", "# Role: profiler_reader\nread", Diagnosis)
        repair_prompt = message_text(server.requests[1].body["messages"][-1])
        history = [m["role"] for m in server.requests[1].body["messages"]]
        fallbacks = [e.data for e in archive.events(run, "reply_fallback")]
    assert answer.value is None and not answer.call_failed
    assert history == ["system", "user", "assistant", "user"]  # the repair follows up the reply
    assert "no JSON object in the reply" in repair_prompt and '"bottleneck"' in repair_prompt
    assert len(fallbacks) == 1 and fallbacks[0]["role"] == "profiler_reader"
    assert "no JSON object" in fallbacks[0]["error"] and fallbacks[0]["first_error"]


def test_json_schema_goes_to_a_model_litellm_says_takes_one_and_nothing_to_an_unknown_one():
    """The provider's structured output where litellm knows the model has it (an OpenAI model
    served on loopback here), and no response_format for a model litellm does not know."""
    from hipevolve.agents.llm.client import LLMClient

    answer = '{"idea": "16-byte loads.", "transform": null}'
    with ScriptedLLMServer([Step.ok(answer), Step.ok(answer)]) as server:
        for model in ("openai/gpt-4o", MODEL):
            call = LLMClient(model, server.api_base, api_key="loopback", max_retries=0).complete(
                "optimizer", [{"role": "user", "content": "# Role: optimizer\nJSON"}], schema=Idea
            )
            assert call.ok, call.error
        known, unknown = (r.body for r in server.requests)
    structured = known["response_format"]
    assert structured["type"] == "json_schema" and structured["json_schema"]["name"] == "Idea"
    assert set(structured["json_schema"]["schema"]["properties"]) == {"idea", "transform"}
    assert "response_format" not in unknown
