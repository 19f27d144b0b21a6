"""bench/offline_suite.py without a GPU: the table and its per-family aggregation on constructed
rows, and the default suite's task list. The GPU part (lower, search, time) runs as the bench."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import offline_suite as osu  # noqa: E402  (bench/ is a folder of scripts, not a package)


def timed(task: str, family: str, eager: float, compiled: float, kernel: float) -> osu.Row:
    return osu.Row(
        task=task, family=family, lowered=True, seed_status="ok", seed_correct=True,
        evaluations=10, case="big", eager_us=eager, compile_us=compiled, kernel_us=kernel,
    )  # fmt: skip


ROWS = [
    timed("gelu", "pointwise", eager=40.0, compiled=20.0, kernel=10.0),  # 4x, 2x
    timed("silu", "pointwise", eager=90.0, compiled=10.0, kernel=10.0),  # 9x, 1x
    timed("center", "fusion", eager=30.0, compiled=8.0, kernel=10.0),  # 3x, 0.8x
    timed("scale", "fusion", eager=20.0, compiled=5.0, kernel=10.0),  # 2x, 0.5x
    osu.Row(task="mm", family="fusion", lowered=False, reason="op t.default"),
    osu.Row(
        task="rowmax",
        family="reduction",
        lowered=True,
        seed_status="incorrect",
        seed_correct=False,
        evaluations=1,
        reason="seed incorrect: mismatch",
    ),  # fmt: skip
]


def by_family() -> dict[str, osu.FamilySummary]:
    return {s.family: s for s in osu.summarise(ROWS)}


def test_speedups_are_reference_time_over_kernel_time():
    row = ROWS[2]
    assert row.vs_eager == pytest.approx(3.0)
    assert row.vs_compile == pytest.approx(0.8)


def test_a_row_without_a_timed_kernel_has_no_speedup():
    assert ROWS[4].vs_eager is None and ROWS[4].vs_compile is None
    assert ROWS[5].vs_compile is None


def test_geometric_means_per_family_over_the_timed_tasks():
    families = by_family()
    assert families["pointwise"].geomean_vs_eager == pytest.approx(6.0)  # sqrt(4 * 9)
    assert families["pointwise"].geomean_vs_compile == pytest.approx(math.sqrt(2.0))
    fusion = families["fusion"]
    assert fusion.geomean_vs_eager == pytest.approx(math.sqrt(6.0))
    assert fusion.geomean_vs_compile == pytest.approx(math.sqrt(0.4))
    assert fusion.geomean_vs_compile < 1.0
    assert (fusion.timed, fusion.tasks) == (2, 3)


def test_coverage_counts_correct_seeds_per_family_unlowered_and_incorrect_ones_not():
    families = by_family()
    assert [(f, s.correct_seeds, s.tasks) for f, s in families.items()] == [
        ("pointwise", 2, 2),
        ("fusion", 2, 3),
        ("reduction", 0, 1),
    ]
    assert families["reduction"].geomean_vs_eager is None


def test_table_shows_every_task_and_the_family_lines():
    table = osu.format_table(ROWS)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["task", "family", "seed"]
    assert any(line.split()[:6] == ["center", "fusion", "yes", "10", "3.00x", "0.80x"]
               for line in lines)  # fmt: skip
    assert any(line.startswith("mm") and "unlowered" in line and "op t.default" in line
               for line in lines)  # fmt: skip
    assert (
        "fusion      coverage 2/3 (67%); vs eager 2.45x, vs torch.compile 0.63x "
        "(over 2 of 3 tasks)" in lines
    )
    assert "reduction   coverage 0/1 (0%); vs eager -, vs torch.compile - (over 0 of 1 tasks)" in (
        lines
    )


def test_task_toml_families_map_to_the_suite_families():
    assert osu.family_of("elementwise") == "pointwise"
    assert osu.family_of("reduction") == "reduction"
    assert osu.family_of("fusion") == "fusion"
    assert osu.family_of("matmul") == "gemm"
    assert osu.family_of("attention") == "attention"


def test_geomean_of_nothing_is_none_and_of_equal_values_is_that_value():
    assert osu.geomean([]) is None
    assert osu.geomean([1.5, 1.5, 1.5]) == pytest.approx(1.5)


def test_largest_case_is_the_one_with_the_most_input_bytes():
    assert osu.largest({"small": 10, "big": 4096, "mid": 512}) == "big"


def test_default_suite_is_the_builtins_and_every_lowering_test_task_and_all_resolve():
    names = osu.default_tasks()
    folders = sorted(p.name for p in osu.TEST_TASKS.iterdir() if p.is_dir())
    assert names == [*osu.BUILTIN, *folders]
    tasks = [osu.resolve_task(n) for n in names]
    assert [t.name for t in tasks] == names
    assert {osu.family_of(t.family) for t in tasks} == {"pointwise", "reduction", "fusion", "gemm"}


def judges_of(pid: int) -> list[int]:
    """Processes pid started that run the verifier's judge (hipevolve.verifier.gpu.judge.worker)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            parent = (proc / "stat").read_text().rsplit(")", 1)[1].split()[1]
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError):  # exited while listed
            continue
        if int(parent) == pid and b"hipevolve.verifier.gpu.judge.worker" in argv:
            found.append(int(proc.name))
    return found


@pytest.mark.gpu
def test_a_task_leaves_no_judge_running_for_the_next(tmp_path):
    """run_task closes its evaluator: judges kept from one task to the next held their cached
    device memory, and the sixth task of a run found the GPU full."""
    import os
    import time

    from hipevolve.core.config import VerifierSettings

    settings = VerifierSettings(cache_dir=tmp_path, trials=5, warmup=2)
    row = osu.run_task("gelu", 2, 0, settings)
    assert row.seed_correct and row.kernel_us, row
    deadline = time.monotonic() + 30
    while judges_of(os.getpid()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert judges_of(os.getpid()) == []
