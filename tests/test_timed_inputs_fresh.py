"""No timed call sees inputs another call saw, also where the memory budget holds fewer input
sets than there are calls (a large case: two sets of gated_delta_net's 32k cases fill the 1 GiB
default): a cache kept by the candidate across calls, keyed by its input's content, never hits.
Shown on the CPU with a plain C++ extension that keeps its outputs (red team round 8's 12, a
content cache) against the same extension without the cache, both replayed from their plans."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipevolve.core.candidate import load_candidate, write_candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.problems import get_task
from hipevolve.verifier.build import kernelbench
from hipevolve.verifier.gpu.job import CandidateJob
from hipevolve.verifier.isolate import job_for_task, run_worker

CACHING = Path(__file__).parent / "data" / "kernelbench" / "candidates" / "cpu_content_cache.py"
SET_BYTES = 64 * 1024 * 4  # softmax's small case: one float32 input of 64 x 1024


def timed(source: str, name: str, tmp_path: Path) -> float:
    """The candidate's median time on softmax's small case, timed as a search scores it
    (kernels only), with room for two input sets among its 2 + 12 calls."""
    candidate = load_candidate(CACHING).model_copy(update={"python_source": source, "name": name})
    built = kernelbench.build(candidate, "cpu", tmp_path / "cache", timeout_s=900)
    assert built.ok, built.log[-2000:]
    task = get_task("softmax")
    case = task.case("small").model_copy(update={"timed": True})
    settings = VerifierSettings(cache_dir=tmp_path / "cache", trials=12, warmup=2)
    job = job_for_task(
        task, CandidateJob(format="kernelbench", model=write_candidate(candidate, tmp_path / name),
                           library=built.folder),
        settings, device="cpu", cases=(case,), timing_budget_bytes=2 * SET_BYTES,
        kernels_only=True,
    )  # fmt: skip
    result = run_worker(job)
    assert result.status.value == "ok", result.message
    (out,) = result.case_results()
    assert out.correct and out.time_us
    return out.time_us


@pytest.mark.slow
def test_a_content_cache_across_timed_calls_never_hits_with_fewer_sets_than_calls(tmp_path):
    caching = CACHING.read_text()
    plain = caching.replace("return ext.softmax_cached(", "return ext.softmax_plain(")
    assert plain != caching
    honest = timed(plain, "plain", tmp_path)
    cached = timed(caching, "cached", tmp_path)
    # Every timed call computes: the cache's copy-back (some microseconds) never replaces the
    # work (milliseconds). With sets reused, 12 of the 14 calls would copy.
    assert cached > 0.5 * honest, (cached, honest)
