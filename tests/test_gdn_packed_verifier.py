"""Packed sequences (gated_delta_net's cu_seqlens input) through the whole verifier on the cpu
backend: a judge, a recorded plan replayed with the int64 offsets among its inputs, and the
checks. A candidate that honours the sequence bounds is ok on every small case; one that runs
the packed tokens as one sequence is incorrect, and only on the packed case."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipevolve.core.candidate import load_candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import Status
from hipevolve.problems import get_task
from hipevolve.verifier.pipeline import Prepared, run_prepared
from hipevolve.verifier.slots import Slots

STAND_IN = Path(__file__).parent / "data" / "candidates" / "gdn_tokens_torch.py"


def judged(candidate, tmp_path: Path):
    task = get_task("gated_delta_net")
    cases = tuple(c for c in task.cases if c.small)
    settings = VerifierSettings(cache_dir=tmp_path, trials=5, warmup=1)
    with Slots("cpu", (), standby=0) as slots:
        return run_prepared(Prepared(candidate=candidate), task, settings, "cpu",
                            slots.slots[0].judges, cases=cases, do_timing=False)  # fmt: skip


@pytest.mark.slow
def test_packed_sequences_reach_the_candidate_and_their_bounds_are_checked(tmp_path):
    honest = load_candidate(STAND_IN)
    result = judged(honest, tmp_path / "honest")
    assert result.status is Status.ok, result.message
    assert "small_varlen_ragged" in {c.case for c in result.cases}
    assert any(f.startswith("plan:kb-executor") for f in result.flags)
    # every token taken as sequence 0's: the state runs on across the bounds
    text = honest.python_source.replace(
        "owner = (torch.searchsorted(cu_seqlens, torch.arange(t), right=True) - 1)[None]",
        "owner = torch.zeros(1, t, dtype=torch.int64)")  # fmt: skip
    assert text != honest.python_source
    one_sequence = honest.model_copy(update={"python_source": text, "name": "one_sequence"})
    result = judged(one_sequence, tmp_path / "one")
    assert result.status is Status.incorrect, result.message
    wrong = [c.case for c in result.cases if not c.correct]
    assert wrong == ["small_varlen_ragged"], result.cases
