"""Writes softmax_run.json: the replayed transcript of an agent run on the softmax task.

    python tests/transcripts/make_softmax_run.py      # rewrite the transcript

Every candidate in it is the softmax seed kernel (problems/softmax/seeds/tunable, correct for
every tunable setting) with other tunable values, given as a whole ```hip block, so the replies
apply to whichever parent the selection draws; one reply breaks the build on purpose (an
undeclared identifier) and the repairer's reply fixes it; one mutator reply carries no code
(a parse error) and the repairer's reply after it is a real candidate; one profiler_reader reply
is not JSON, nor is its reply to the repair turn, so that role falls back to its offline rule.
Each step names the role whose prompt it answers; the scripted server refuses a request for
another role.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = HERE.parents[1] / "problems" / "softmax" / "seeds" / "tunable" / "kernel.hip"


def variant(**values: int) -> str:
    source = SEED.read_text()
    for name, value in values.items():
        source, n = re.subn(rf"^#define {name} \d+$", f"#define {name} {value}", source,
                            flags=re.MULTILINE)  # fmt: skip
        assert n == 1, name
    return source


def hip_reply(source: str, words: str) -> str:
    return f"{words}\n\n```hip\n{source}```\n"


def diagnosis(bottleneck: str, summary: str) -> str:
    return json.dumps({"bottleneck": bottleneck, "summary": summary})


def idea(text: str) -> str:
    return "```json\n" + json.dumps({"idea": text, "transform": None}) + "\n```"


BROKEN_MARK = "undeclared_scale"
BROKEN = variant(UNROLL=2).replace("const float inv = ", "const float inv = undeclared_scale * ", 1)


def steps() -> list[dict[str, str]]:
    s: list[dict[str, str]] = []

    def proposal(diag: str | tuple[str, ...], thought: str, reply: str) -> None:
        for text in (diag,) if isinstance(diag, str) else diag:  # a reply, then the repair turn's
            s.append({"role": "profiler_reader", "reply": text})
        s.append({"role": "optimizer", "reply": idea(thought)})
        s.append({"role": "mutator", "reply": reply})

    mem = diagnosis("memory", "two passes over each row; 16-byte loads only at VEC 8 for bf16.")
    proposal(
        mem,
        "Larger blocks keep more loads in flight per row.",
        hip_reply(variant(BLOCK=512), "BLOCK 512: twice the loads in flight per row."),
    )
    proposal(mem, "16-byte bf16 accesses.", "I would widen the loads to 8 elements per access.")
    assert BROKEN.count("undeclared_scale") == 1
    s.append({"role": "repairer", "reply": hip_reply(variant(VEC=8), "VEC 8, as whole files.")})
    proposal(
        diagnosis("latency", "one load in flight per thread per step."),
        "Two vector loads in flight per thread.",
        hip_reply(BROKEN, "UNROLL 2, with a scale."),
    )
    s.append(
        {
            "role": "repairer",
            "reply": hip_reply(variant(UNROLL=2), "The scale was undeclared; removed."),
        }
    )
    proposal(
        ("not json at all", "still not json"),
        "Two rows per block for the short rows.",
        hip_reply(variant(ROWS=2), "ROWS 2."),
    )
    proposal(mem, "Smaller blocks, wider loads.", hip_reply(variant(BLOCK=128, VEC=8), "Both."))
    proposal(
        mem,
        "All three together.",
        hip_reply(variant(BLOCK=512, VEC=8, UNROLL=2), "BLOCK 512, VEC 8, UNROLL 2."),
    )
    return s


if __name__ == "__main__":
    (HERE / "softmax_run.json").write_text(json.dumps(steps(), indent=1) + "\n")
