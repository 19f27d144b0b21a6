"""profiler_reader: static AMD facts and measurements -> a short bottleneck diagnosis."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import Field

from hipevolve.agents import proposal
from hipevolve.agents.context import AgentContext
from hipevolve.agents.llm.messages import Prompt
from hipevolve.agents.llm.structured import JsonReply
from hipevolve.agents.state import ProposalState
from hipevolve.agents.structured_call import ask_json
from hipevolve.core.evaluation import Evaluation, StaticFacts
from hipevolve.prompts.render import render, schema_text

ROLE = "profiler_reader"
Bottleneck = Literal["memory", "latency", "registers", "lds", "launch", "compute", "unknown"]


class Diagnosis(JsonReply):
    """The kernel's main bottleneck, named, with the numbers that show it."""

    bottleneck: Bottleneck = Field(
        description="memory, latency, registers, lds, launch, compute or unknown"
    )
    summary: str = Field(description="two or three sentences quoting the facts")

    key_synonyms = {
        "bottleneck type": "bottleneck",
        "main bottleneck": "bottleneck",
        "limiter": "bottleneck",
        "bound": "bottleneck",
        "category": "bottleneck",
        "diagnosis": "summary",
        "explanation": "summary",
        "evidence": "summary",
        "reason": "summary",
        "reasoning": "summary",
        "details": "summary",
        "analysis": "summary",
    }
    # What the prompt's own words and a model's usual ones for each bottleneck mean.
    value_synonyms = {
        "bottleneck": {
            "memory bandwidth": "memory",
            "bandwidth": "memory",
            "hbm": "memory",
            "dram": "memory",
            "global memory": "memory",
            "memory throughput": "memory",
            "roofline": "memory",
            "occupancy": "latency",
            "low occupancy": "latency",
            "too few waves": "latency",
            "latency hiding": "latency",
            "memory latency": "latency",
            "stalls": "latency",
            "register": "registers",
            "register pressure": "registers",
            "vgpr": "registers",
            "vgprs": "registers",
            "spills": "registers",
            "spill": "registers",
            "register spills": "registers",
            "scratch": "registers",
            "shared memory": "lds",
            "local data share": "lds",
            "lds bank conflicts": "lds",
            "bank conflicts": "lds",
            "launch overhead": "launch",
            "kernel launch": "launch",
            "launches": "launch",
            "alu": "compute",
            "math": "compute",
            "flops": "compute",
            "mfma": "compute",
            "arithmetic": "compute",
            "tensor cores": "compute",
            "none": "unknown",
            "unclear": "unknown",
        }
    }

    def text(self) -> str:
        return f"{self.bottleneck}: {self.summary}"


def measurements_text(evaluation: Evaluation | None) -> str:
    if evaluation is None or not evaluation.cases:
        return "(not measured)"
    lines = []
    for c in evaluation.cases:
        parts = [f"- {c.case}: {'correct' if c.correct else 'WRONG'}"]
        if c.time_us is not None:
            parts.append(f"{c.time_us:.1f} us")
        if c.speedup is not None:
            parts.append(f"{c.speedup:.2f}x the reference")
        if c.roofline_fraction is not None:
            parts.append(f"{100 * c.roofline_fraction:.0f}% of the memory roofline")
        lines.append(", ".join(parts))
    return "\n".join(lines)


def offline(evaluation: Evaluation | None) -> Diagnosis:
    """A rule-based reading of the facts: spills, occupancy, vector width, roofline."""
    facts = evaluation.static if evaluation else ()
    if any(f.spills for f in facts):
        worst = max(facts, key=lambda f: f.spills)
        return Diagnosis(
            bottleneck="registers",
            summary=f"{worst.kernel} spills {worst.spills} registers to scratch "
            f"({worst.vgprs} {_registers(worst)}): cut live values or split the kernel.",
        )
    if any(0 < f.occupancy <= 2 for f in facts):
        low = min((f for f in facts if f.occupancy), key=lambda f: f.occupancy)
        return Diagnosis(
            bottleneck="latency",
            summary=f"{low.kernel} runs {low.occupancy} {_residents(low)} ({low.vgprs} "
            f"{_registers(low)}, LDS {low.lds_bytes} B): too few to hide memory latency.",
        )
    narrow = [f for f in facts if f.global_loads and max(map(_bits, f.global_loads)) < 128]
    if narrow:
        return Diagnosis(
            bottleneck="memory",
            summary=f"{narrow[0].kernel} issues no 128-bit loads "
            f"({', '.join(sorted(narrow[0].global_loads))}): widen accesses to 16 bytes.",
        )
    fractions = [
        c.roofline_fraction
        for c in (evaluation.cases if evaluation else ())
        if c.roofline_fraction is not None
    ]
    if fractions and min(fractions) < 0.6:
        return Diagnosis(
            bottleneck="memory",
            summary=f"the slowest case reaches {100 * min(fractions):.0f}% of the memory "
            "roofline: fewer passes over memory and more bytes in flight per wave.",
        )
    return Diagnosis(bottleneck="unknown", summary="no static facts or roofline to read.")


def _registers(fact: StaticFacts) -> str:
    return "registers/thread" if fact.platform == "cuda" else "VGPRs"


def _residents(fact: StaticFacts) -> str:
    return "warps per scheduler" if fact.platform == "cuda" else "waves per SIMD"


def _bits(width: str) -> int:
    digits = "".join(ch for ch in width if ch.isdigit())
    return int(digits) if digits else 0


def prompt(ctx: AgentContext, state: ProposalState, inspirations: str | None = None) -> Prompt:
    """The proposal's shared head (the briefing gives the device, its bounds and the
    tolerance; the parent part its results per case and static facts), then the reading asked."""
    own = render("profiler_reader", schema=schema_text(Diagnosis, json_reply=True))
    return proposal.proposal_prompt(ctx, state, own, inspirations)


def node(ctx: AgentContext) -> Callable[[ProposalState], dict]:
    def profiler_reader(state: ProposalState) -> dict:
        """Diagnosis of the parent: the model's reading, or the rule-based one."""
        fallback = offline(state.get("parent_evaluation"))
        if not ctx.uses_model(ROLE):
            return {"diagnosis": fallback.text()}
        shared = {"shared": proposal.parent_text(ctx, state)}
        answer = ask_json(ctx, ROLE, prompt(ctx, {**state, **shared}), Diagnosis)
        if answer.value is None:
            stop = {"stopped": answer.stopped} if answer.call_failed else {}
            return {"diagnosis": fallback.text(), **shared, **stop}
        return {"diagnosis": answer.value.text(), **shared}

    return profiler_reader
