"""Same code, comments and layout aside (verifier/screen/same_code.py), on real sources: the
Gated DeltaNet prefill seed and the softmax seed, reformatted by hand the ways a model's reply
reformats (comments dropped or reworded, re-indented, operators re-spaced, lines re-wrapped)
are the same code; a changed value, a changed operator, a changed string literal or a macro
turned object-like are not."""

from __future__ import annotations

import re

from gdn_seed_support import PREFILL_SEED, with_define

from hipevolve.core.candidate import load_candidate
from hipevolve.problems import get_task
from hipevolve.verifier.screen.same_code import same_code, token_form

GDN = load_candidate(PREFILL_SEED)
SOFTMAX = load_candidate(get_task("softmax").seeds[0])
MERGE = "    s = s * exp_of(m - mx) + s2 * exp_of(m2 - mx);"


def _hip(candidate, text: str):
    return candidate.model_copy(update={"hip_source": text})


def test_a_seed_without_comments_and_reindented_is_the_same_code():
    source = GDN.hip_source
    bare = re.sub(r"^\s*//.*\n", "", source, flags=re.M)  # comment lines gone
    bare = re.sub(r"^( +)", lambda m: "\t" * (len(m.group(1)) // 4), bare, flags=re.M)
    assert bare != source and same_code(GDN, _hip(GDN, bare))


def test_operators_respaced_and_a_line_rewrapped_are_the_same_code():
    assert MERGE in SOFTMAX.hip_source
    respaced = SOFTMAX.hip_source.replace(
        MERGE, "    s = s*exp_of(m-mx)   /* merged */\n        + s2*exp_of(m2-mx);")
    child = _hip(SOFTMAX, respaced)
    assert child.source_hash != SOFTMAX.source_hash  # the exact hash tells them apart
    assert same_code(SOFTMAX, child)


def test_a_changed_value_or_operator_is_other_code():
    assert not same_code(GDN, _hip(GDN, with_define(GDN.hip_source, "BV", 64)))
    flipped = SOFTMAX.hip_source.replace(MERGE, MERGE.replace("m - mx", "mx - m"))
    assert not same_code(SOFTMAX, _hip(SOFTMAX, flipped))


def test_tokens_stay_whole_where_spacing_changes_them():
    assert token_form("int y = a - -b;") != token_form("int y = a--b;")
    assert token_form('const char* s = "a  b";') != token_form('const char* s = "a b";')
    assert token_form("#define F(x) (x)\n") != token_form("#define F (x) (x)\n")
    assert token_form("int x = a+b; // note\n") == token_form("int x = a + b;\n")


def test_model_py_counts_but_its_comments_do_not():
    noted = SOFTMAX.model_copy(update={"python_source": "# a note\n" + SOFTMAX.python_source})
    other = SOFTMAX.model_copy(update={"python_source": SOFTMAX.python_source + "\nX = 1\n"})
    assert same_code(SOFTMAX, noted) and not same_code(SOFTMAX, other)
