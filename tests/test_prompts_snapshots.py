"""Every prompt the agents build, pinned to an expected file under tests/snapshots/.

A difference fails the test. After an intended change, regenerate and review the diff:
    HIPEVOLVE_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_prompts_snapshots.py
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from hipevolve.agents import proposal
from hipevolve.agents.context import AgentContext
from hipevolve.agents.roles import (
    auditor,
    mutator,
    optimizer,
    profiler_reader,
    repairer,
    translator,
)
from hipevolve.agents.state import AgentLimits, Failure
from hipevolve.agents.structured_call import repair_prompt
from hipevolve.core.candidate import load_candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, StaticFacts, Status
from hipevolve.evolution.child import Proposal
from hipevolve.problems import get_task
from hipevolve.problems.kernelbench import load_kernelbench_file
from hipevolve.prompts.render import render, schema_text, system_prompt

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
REPO = Path(__file__).resolve().parents[1]
PARENT = load_candidate(REPO / "prompts" / "examples" / "softmax_native")
# A KernelBench file: its cases name no inputs (they are sized in get_inputs() and by module
# constants), so the translator's prompt lists the tensors its reference builds.
KERNELBENCH = REPO / "tests" / "data" / "kernelbench" / "gpu_sized" / "7_Scaled_Bias.py"
# An elite that differs from the parent by one line, as inspirations do.
INSPIRATION = PARENT.model_copy(
    update={
        "hip_source": PARENT.hip_source.replace(
            "constexpr int kCachedItems = 4;", "constexpr int kCachedItems = 8;"
        )
    }
)
FACTS = StaticFacts(kernel="softmax_cached", target="gfx942", vgprs=48, sgprs=24, lds_bytes=128,
                    occupancy=8, global_loads={"dwordx4": 4}, lds_ops=6)  # fmt: skip
EVALUATION = Evaluation(
    status=Status.ok, task="softmax", backend="rocm", static=(FACTS,),
    cases=(CaseResult(case="attn_scores_4k", correct=True, time_us=180.0, ref_time_us=270.0,
                      roofline_fraction=0.55),),
)  # fmt: skip


def context() -> AgentContext:
    # Prompts read only the task and the limits; no run is needed to build them.
    return AgentContext(task=get_task("softmax"), workshop=None, limits=AgentLimits(),  # type: ignore[arg-type]
                        ensemble=None, rng=random.Random(0))  # fmt: skip


def state(**extra) -> dict:
    return {"proposal": Proposal(island=0, parent=None), "parent": PARENT,
            "parent_evaluation": EVALUATION, "diagnosis": "memory: 55% of the roofline.",
            "idea": "Keep rows in LDS for one pass.", **extra}  # fmt: skip


def prompts() -> dict[str, str]:
    ctx = context()
    inspirations = proposal.inspirations_text(PARENT, [(7, INSPIRATION, EVALUATION)])
    compile_failure = Failure(kind="compile_error", message="does not compile",
                              detail="kernel.hip(12): error: identifier \"x\" is undefined")  # fmt: skip
    return {
        "system": system_prompt(),
        "system_translator": system_prompt("translator"),
        "profiler_reader": profiler_reader.prompt(ctx, state(), inspirations).text(),
        "optimizer": optimizer.prompt(ctx, state(), inspirations).text(),
        "mutator": mutator.prompt(ctx, state(), inspirations).text(),
        "repairer": repairer.prompt(ctx, state(candidate=PARENT, failure=compile_failure)),
        "repairer_turn": repairer.follow_up(ctx, state(
            base=PARENT, failure=Failure(kind="parse_error", message="truncated: the reply was "
                                         "cut off at the token limit (finish_reason 'length')"))),
        "translator": translator.prompt(ctx),
        "translator_kernelbench": translator.prompt(AgentContext(
            task=load_kernelbench_file(KERNELBENCH), workshop=None, limits=AgentLimits(),  # type: ignore[arg-type]
            ensemble=None, rng=random.Random(0))),
        "auditor": auditor.prompt(ctx, state(candidate=PARENT, evaluation=EVALUATION)),
        "json_repair": repair_prompt("profiler_reader", "field bottleneck: Input should be "
                                     "'memory', 'latency', 'registers', 'lds', 'launch', "
                                     "'compute' or 'unknown'", profiler_reader.Diagnosis),
        "task_generator": render("task_generator", task_name="softmax",
                                 task_description=ctx.task.description,
                                 reference=ctx.reference_source(),
                                 schema=schema_text(auditor.Verdict, json_reply=True)),
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(prompts()))
def test_prompt_matches_its_snapshot(name):
    text = prompts()[name]
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("HIPEVOLVE_UPDATE_SNAPSHOTS"):
        path.write_text(text)
    assert path.exists(), f"no snapshot {path}; run HIPEVOLVE_UPDATE_SNAPSHOTS=1 pytest {__file__}"
    assert text == path.read_text(), (
        f"prompt {name} differs from {path}; if intended: "
        f"HIPEVOLVE_UPDATE_SNAPSHOTS=1 python -m pytest {__file__}"
    )


def test_system_prompt_carries_cdna_facts_and_the_translator_alone_a_valid_example():
    for role in ("", "profiler_reader", "optimizer", "mutator", "repairer", "translator"):
        text = system_prompt(role)
        for fact in ("64 lanes", "64 KB per workgroup on gfx942", "160 KB on gfx950", "MFMA",
                     "buffer_load", "XCD", 'extern "C" hipError_t'):  # fmt: skip
            assert fact in text, (role, fact)
        example = PARENT.hip_source.strip() in text and PARENT.python_source.strip() in text
        assert example == (role == "translator"), role


def test_no_system_prompt_says_how_to_answer_so_none_contradicts_a_roles_reply_format():
    for role in ("profiler_reader", "optimizer", "mutator", "repairer", "translator", "auditor"):
        text = system_prompt(role)
        assert "SEARCH" not in text and "JSON" not in text and "How to answer" not in text, role


def test_the_json_roles_are_never_told_to_write_code_or_files():
    for name in ("profiler_reader", "optimizer"):
        own = (
            {"profiler_reader": profiler_reader, "optimizer": optimizer}[name]
            .prompt(context(), state())
            .tail()
        )
        assert "Reply with one JSON object and nothing else" in own, name
        for words in ("SEARCH/REPLACE", "whole files", "```hip"):
            assert words not in own, (name, words)


def test_a_proposals_three_prompts_share_their_prefix_byte_for_byte():
    ctx, s = context(), state()
    s["shared"] = proposal.parent_text(ctx, s)
    sent = [m.prompt(ctx, s) for m in (profiler_reader, optimizer, mutator)]
    prefixes = {p.text()[: len(p.text()) - len(p.tail())] for p in sent}
    assert len(prefixes) == 1 and PARENT.hip_source.strip() in prefixes.pop()
    for p in sent:  # briefing, parent, memory: each marked for the provider's cache
        assert [part.cached for part in p.parts] == [True, True, True, False]
        assert PARENT.hip_source.strip() not in p.tail()


def test_every_role_prompt_names_its_role_for_the_replay_server():
    for name, text in prompts().items():
        # a follow-up turn of its role
        role = {"repairer_turn": "repairer", "json_repair": "profiler_reader",
                "translator_kernelbench": "translator"}.get(name, name)  # fmt: skip
        if name.startswith("system"):
            continue
        own = text if name not in ("profiler_reader", "optimizer", "mutator") else text[
            text.index("# Role: "):]  # fmt: skip
        assert own.startswith(f"# Role: {role}\n"), name
        assert text.count("# Role: ") == 1, name
