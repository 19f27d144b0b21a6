"""The roofline gate and shares hold at the peaks of the GPU the judge runs on: an honest
memory-bound kernel on an MI355X (8 TB/s) may beat MI300X's bound, and on an H100 (3.35 TB/s)
H200's bound lets a forged time through that the card itself could never reach."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "hostile"))

from test_hostile import HEALTHY, cpu_job  # noqa: E402

from hipevolve.core.hardware import H100, H200, MI300X, MI355X, by_device_name  # noqa: E402
from hipevolve.verifier.gpu.job import CaseJob, PeakRates, on_card  # noqa: E402
from hipevolve.verifier.gpu.judge.scorecard import Scorecard  # noqa: E402


@pytest.mark.parametrize(
    ("device_name", "card"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("AMD Instinct MI300X", "MI300X"),
        ("AMD Instinct MI300X VF", "MI300X"),
        ("AMD Instinct MI325X", "MI325X"),
        ("AMD Instinct MI355X", "MI355X"),
        ("NVIDIA A100-SXM4-80GB", None),
        ("", None),
    ],
)
def test_pytorchs_device_names_map_to_the_known_card(device_name: str, card: str | None) -> None:
    found = by_device_name(device_name)
    assert (found.name if found else None) == card


def _job_at(peak: PeakRates | None, bytes_moved: float):
    case = CaseJob(name="c", roofline={"bytes": bytes_moved, "flops": 0.0})
    return replace(cpu_job(HEALTHY), cases=(case,), peak=peak)


def _peak(gpu) -> PeakRates:
    return PeakRates(bytes_per_s=gpu.hbm_bytes_per_s, flops_per_s=gpu.bf16_flops_per_s)


def _gate(job, time_us: float) -> list[str]:
    card = Scorecard(job)
    card.case_out["c"] = {"case": "c", "correct": True, "time_us": time_us}
    return card.gates()


def test_a_job_takes_the_peaks_of_the_card_it_runs_on() -> None:
    job = _job_at(_peak(H200), 1e9)
    assert on_card(job, "NVIDIA H100 80GB HBM3").peak == _peak(H100)
    assert on_card(job, "AMD Instinct MI355X").peak == _peak(MI355X)
    assert on_card(job, "an unknown card").peak == _peak(H200)  # as the controller sent it
    assert on_card(_job_at(None, 1e9), "NVIDIA H200").peak is None  # no gate stays no gate


def test_an_honest_time_on_a_faster_card_is_not_suspect_and_a_forged_one_on_a_slower_is() -> None:
    gigabyte = 1e9
    # 150 us for 1 GB: 6.7 TB/s, 83% of an MI355X's 8 TB/s, past MI300X's 5.3 TB/s bound.
    mi300x_job = _job_at(_peak(MI300X), gigabyte)
    assert _gate(mi300x_job, 150.0), "MI300X's bound should flag it"
    assert _gate(on_card(mi300x_job, "AMD Instinct MI355X"), 150.0) == []
    # 250 us for 1 GB: 4.0 TB/s, under H200's bound, over what an H100 (3.35 TB/s) can move.
    h200_job = _job_at(_peak(H200), gigabyte)
    assert _gate(h200_job, 250.0) == []
    assert "beats the roofline" in _gate(on_card(h200_job, "NVIDIA H100 80GB HBM3"), 250.0)[0]
