"""bench/scaling.py without a GPU: how it splits the slots' time in each batch window, and the
slots that record it. The GPU part (1 and 2 GPUs, same candidates) runs as the bench."""

from __future__ import annotations

import sys
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
