"""A corpus of realistic replies (tests/data/replies/): at least 95% parsed right, none silently wrong.

Each file is one reply as a model answers this project's tasks, against a real seed of
problems/softmax or problems/gated_delta_net, with a TOML header between `+++` lines:
    parent = "softmax"            # the task whose seed the reply edits
    finish_reason = "stop"        # what the provider said ("length": cut off)
    expect = "ok"                 # or "refused: <error class>"
    [[edits]]                     # ok: the files are the parent's with these exact replacements
    file = "kernel.hip"
    old = '''...'''
    new = '''...'''
Right: the candidate's files equal the expected ones, or the refusal has the expected class.
Silently wrong: a candidate came out whose files differ from the expected (or one came out of a
reply that must be refused). Lost: refused where a candidate was expected, or refused for
another reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from reply_corpus_support import load_case

from hipevolve.agents.llm.replies import parse_reply
from hipevolve.core.candidate import KERNEL_FILE, MODEL_FILE, Candidate

CORPUS = Path(__file__).parent / "data" / "replies"
SEEDS = Path(__file__).parents[1] / "problems"
SEED_OF = {"softmax": "softmax/seeds/tunable", "gated_delta_net": "gated_delta_net/seeds/chunked"}
# The seeds' files as the corpus's replies were written against: the softmax kernel.hip of 0bd6ee6
# (the seed has since grown tunables, which turned their expected edits stale; its model.py is
# unchanged), and the gated_delta_net seed of b755b20 (packed sequences came after it).
DATA = Path(__file__).parent / "data"
PINNED = {
    "softmax": {KERNEL_FILE: DATA / "reply_softmax_kernel.hip"},
    "gated_delta_net": {KERNEL_FILE: DATA / "reply_gdn_kernel.hip",
                        MODEL_FILE: DATA / "reply_gdn_model.txt"},
}  # fmt: skip


def parent_of(task: str) -> Candidate:
    folder, pinned = SEEDS / SEED_OF[task], PINNED.get(task, {})
    return Candidate(
        format="native",
        hip_source=pinned.get(KERNEL_FILE, folder / KERNEL_FILE).read_text(),
        python_source=pinned.get(MODEL_FILE, folder / MODEL_FILE).read_text(),
        name=f"{task}-seed",
    )


def expected_files(case: dict, parent: Candidate) -> dict[str, str]:
    files = {KERNEL_FILE: parent.hip_source, MODEL_FILE: parent.python_source}
    for edit in case.get("edits", []):
        assert files[edit["file"]].count(edit["old"]) == 1, f"expectation does not place {edit}"
        files[edit["file"]] = files[edit["file"]].replace(edit["old"], edit["new"], 1)
    return files


def judge(path: Path) -> str:
    """right, lost or silently_wrong, for one reply of the corpus."""
    case, reply = load_case(path)
    parent = parent_of(case["parent"])
    parsed = parse_reply(reply, parent, case["finish_reason"] or None)
    if case["expect"].startswith("refused: "):
        if parsed.ok:
            return "silently_wrong"
        return "right" if parsed.error_class == case["expect"].removeprefix("refused: ") else "lost"
    if not parsed.ok:
        return "lost"
    got = {KERNEL_FILE: parsed.candidate.hip_source, MODEL_FILE: parsed.candidate.python_source}
    return "right" if got == expected_files(case, parent) else "silently_wrong"


CASES = sorted(CORPUS.glob("*.md"))


def test_corpus_has_at_least_sixty_reply_shapes_on_both_tasks():
    assert len(CASES) >= 60
    tasks = {load_case(p)[0]["parent"] for p in CASES}
    assert tasks == {"softmax", "gated_delta_net"}
    refusals = [p for p in CASES if load_case(p)[0]["expect"] != "ok"]
    assert 10 <= len(refusals) < len(CASES) // 2  # both sides of the line are exercised


def test_corpus_parsed_right_at_least_95_percent_and_never_silently_wrong(capsys):
    verdicts = {p.name: judge(p) for p in CASES}
    right = sum(v == "right" for v in verdicts.values())
    wrong = sorted(n for n, v in verdicts.items() if v == "silently_wrong")
    lost = sorted(n for n, v in verdicts.items() if v == "lost")
    with capsys.disabled():
        print(f"\nreply corpus: {right}/{len(verdicts)} parsed right "
              f"({100 * right / len(verdicts):.1f}%), lost {lost}, silently wrong {wrong}")  # fmt: skip
    assert not wrong, f"silently wrong: {wrong}"
    assert right >= 0.95 * len(verdicts), f"lost: {lost}"


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus_expectation_is_consistent_with_its_parent(path):
    """Every expected edit places exactly once in its parent (the expectation itself is sound)."""
    case, _ = load_case(path)
    assert case["expect"] == "ok" or case["expect"].startswith("refused: ")
    assert (case["expect"] == "ok") == bool(case.get("edits"))
    expected_files(case, parent_of(case["parent"]))
