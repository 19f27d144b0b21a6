"""Writes the replayed transcripts of three more agent runs on softmax (see tests/test_agents_gaps.py).

    python tests/transcripts/make_agent_runs.py      # rewrite them

- softmax_translate.json: a copy of softmax without seed kernels; the first reply is the
  translator's candidate (the softmax seed kernel and its model.py as whole files), then one
  proposal (profiler_reader, optimizer, mutator) that evolves it.
- softmax_wrong_result.json: one proposal whose mutator kernel compiles but halves every output
  (WRONG_MARK, the stand-in evaluator scores it incorrect with a mismatch summary), then the
  repairer's fix.
- softmax_concurrent.json: two generations of four proposals, each mutator reply a different
  tunable setting given as a whole ```hip block (so it applies to any parent, in any order).
"""

from __future__ import annotations

import json

from make_softmax_run import HERE, SEED, diagnosis, hip_reply, idea, variant

WRONG_MARK = "0.5f / s"  # the halved normaliser of the wrong-result kernel
MEMORY = diagnosis("memory", "two passes over each row; 16-byte loads only at VEC 8 for bf16.")


def proposal(thought: str, reply: str) -> list[dict[str, str]]:
    return [
        {"role": "profiler_reader", "reply": MEMORY},
        {"role": "optimizer", "reply": idea(thought)},
        {"role": "mutator", "reply": reply},
    ]


def translate() -> list[dict[str, str]]:
    model = (SEED.parent / "model.py").read_text()
    first = (f"A two-pass online softmax, one group of threads per row.\n\n```hip\n"
             f"{SEED.read_text()}```\n\n```python\n{model}```\n")  # fmt: skip
    return [{"role": "translator", "reply": first}] + proposal(
        "Larger blocks keep more loads in flight per row.",
        hip_reply(variant(BLOCK=512), "BLOCK 512."),
    )


def wrong_result() -> list[dict[str, str]]:
    wrong = variant(BLOCK=512).replace(
        "const float inv = 1.0f / s;", f"const float inv = {WRONG_MARK};"
    )
    assert wrong.count(WRONG_MARK) == 1
    return proposal(
        "Larger blocks, and a cheaper normaliser.",
        hip_reply(wrong, "BLOCK 512 with a cheaper normaliser."),
    ) + [
        {"role": "repairer",
         "reply": hip_reply(variant(BLOCK=512), "The normaliser must be 1 / sum; restored.")}
    ]  # fmt: skip


CONCURRENT = [
    {"BLOCK": 512}, {"VEC": 8}, {"UNROLL": 2}, {"BLOCK": 128},
    {"BLOCK": 512, "VEC": 8}, {"VEC": 2}, {"UNROLL": 4}, {"BLOCK": 1024},
]  # fmt: skip


def concurrent() -> list[dict[str, str]]:
    steps: list[dict[str, str]] = []
    for values in CONCURRENT:
        words = ", ".join(f"{k} {v}" for k, v in values.items())
        steps += proposal(f"Try {words}.", hip_reply(variant(**values), f"{words}."))
    return steps


if __name__ == "__main__":
    for name, steps in (("softmax_translate", translate()), ("softmax_wrong_result", wrong_result()),
                        ("softmax_concurrent", concurrent())):  # fmt: skip
        (HERE / f"{name}.json").write_text(json.dumps(steps, indent=1) + "\n")
