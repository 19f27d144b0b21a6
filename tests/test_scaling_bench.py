"""bench/scaling.py without a GPU: how it splits the slots' time in each batch window, and the
slots that record it. The GPU part (1 and 2 GPUs, same candidates) runs as the bench. Also
bench/cross_gpu_contention.py's one-line refusal where fewer than two GPUs are visible."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import scaling  # noqa: E402  (bench/ is a folder of scripts, not a package)


def test_slot_spans_split_each_window_into_busy_and_three_kinds_of_idle() -> None:
    windows = [(0.0, 10.0), (10.0, 20.0)]
    spans = [
        ("0", 1.0, 4.0),  # batch 1, GPU 0: idle 1 before, 2 between, 1 after
        ("0", 6.0, 9.0),
        ("1", 0.5, 8.0),  # batch 1, GPU 1: idle 0.5 before, 2 after
        ("0", 12.0, 20.0),  # batch 2, GPU 0: idle 2 before
    ]  # batch 2, GPU 1: no job, idle the whole window
    s = scaling.slot_spans(spans, windows, ("0", "1"), judged=17.0)
    assert s.busy == pytest.approx(3 + 3 + 7.5 + 8)
    assert s.judged == 17.0
    assert s.before_first == pytest.approx(1 + 0.5 + 2 + 10)
    assert s.between == pytest.approx(2)
    assert s.after_last == pytest.approx(1 + 2)
    # every second of every slot's windows is counted once
    assert s.busy + s.before_first + s.between + s.after_last == pytest.approx(2 * 20)


def test_timed_slots_record_every_job_with_its_slot_and_duration() -> None:
    with scaling.TimedSlots("cpu", (), standby=1) as slots:
        futures = [slots.submit(lambda slot: time.sleep(0.05) or slot.device) for _ in range(3)]
        assert [f.result() for f in futures] == ["", "", ""]
    assert len(slots.spans) == 3
    assert all(d == "" and z - a >= 0.05 for d, a, z in slots.spans)
    starts = sorted(a for _, a, _ in slots.spans)
    assert all(b - a >= 0.05 for a, b in zip(starts, starts[1:], strict=False))  # one slot


@pytest.mark.parametrize("window", [1, 2, 3])
def test_in_batches_evaluates_at_most_window_batches_at_once_and_keeps_their_order(window) -> None:
    running, most, lock = [0], [0], threading.Lock()

    def evaluate(batch: list[int]) -> list[int]:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.03 if batch[0] % 4 else 0.06)  # every other batch slower
        with lock:
            running[0] -= 1
        return [-c for c in batch]

    windows: list[tuple[float, float]] = []
    results = scaling.in_batches(evaluate, list(range(20)), 2, windows, window)
    assert results == [-c for c in range(20)]
    assert most[0] == window
    # One window per batch when they take turns; the whole run's when they overlap.
    assert len(windows) == (10 if window == 1 else 1)
    assert all(a < b for a, b in windows)


def _phase(gpus: int, round_: int, evaluations: int, wall_s: float) -> scaling.Phase:
    return scaling.Phase(
        label=f"local, {gpus} GPU", gpus=gpus, cache="warm", round=round_,
        evaluations=evaluations, wall_s=wall_s, statuses=[], standby=3, stages={},
    )  # fmt: skip


def test_pooled_ratio_divides_all_evaluations_over_all_wall_time_not_the_mean_of_rounds() -> None:
    phases = [
        _phase(1, 0, 60, 30.0),  # 2 per second
        _phase(2, 0, 60, 15.0),  # 4: 2.0x
        _phase(1, 1, 60, 20.0),  # 3
        _phase(2, 1, 60, 20.0),  # 3: 1.0x
        _phase(2, 0, 60, 1.0).model_copy(update={"label": "ray, 2 GPU workers"}),  # not local
    ]
    pooled, each = scaling.pooled_ratio(phases, "warm", 1, 2)
    assert each == pytest.approx([2.0, 1.0])
    assert pooled == pytest.approx((120 / 35) / (120 / 50))  # 1.43x, not the rounds' mean 1.5x
    assert scaling.pooled_ratio(phases, "cold", 1, 2)[1] == []


def test_contention_bench_with_fewer_than_two_gpus_says_so_in_one_line() -> None:
    import subprocess

    import torch

    if torch.cuda.device_count() >= 2:
        pytest.skip("two GPUs here: the bench would run in full")
    script = Path(__file__).resolve().parent.parent / "bench" / "cross_gpu_contention.py"
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr.strip() == (
        "cross_gpu_contention plays two GPUs against each other: fewer are visible"
    )


def test_phases_saved_as_json_load_back_equal(tmp_path: Path) -> None:
    spans = scaling.Spans(busy=9.0, judged=8.5, before_first=0.5, between=0.0, after_last=0.5)
    phases = [
        scaling.Phase(label="local, 1 GPU", gpus=1, cache="warm", round=r, evaluations=48,
                      wall_s=18.7 + r, statuses=["ok"] * 48, standby=3,
                      stages={"check": 0.15, "total": 0.36}, spans=spans)
        for r in range(2)
    ]  # fmt: skip
    out = tmp_path / "phases.json"
    scaling.save_phases(out, phases[:1])
    assert scaling.load_phases(out) == phases[:1]
    scaling.save_phases(out, phases)  # the next phase rewrites the file with both
    assert scaling.load_phases(out) == phases


def test_warm_up_runs_until_every_slot_served_each_of_its_judges_and_forgets_their_spans() -> None:
    """A slot turns through standby + 1 judges (taking one starts another): each must have
    served a job before timing starts, and nothing of the warm-up may count in the phase."""
    with scaling.TimedSlots("cpu", ("a", "b"), standby=1) as slots:
        calls: list[list[int]] = []

        def evaluate(batch: list[int]) -> list[str]:
            calls.append(batch)
            futures = [slots.submit(lambda slot: time.sleep(0.02) or slot.device) for _ in batch]
            return [f.result() for f in futures]

        done = scaling.warm_up(slots, evaluate, [10, 11, 12], standby=1)
        assert min(slots.served["a"], slots.served["b"]) >= 2
        assert len(done) == sum(slots.served.values())
        assert all(len(b) == 2 for b in calls)  # a batch per round of the two slots
        assert [c for b in calls for c in b][:3] == [10, 11, 12]  # the candidates, in turn
        assert slots.spans == []
        slots.submit(lambda slot: None).result()
        assert len(slots.spans) == 1  # the timed jobs after it are recorded
