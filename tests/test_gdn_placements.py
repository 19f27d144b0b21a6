"""bench/gdn_placements.py: pad sizes, the command line and the table line on the CPU, and (marked
gpu) a two-placement run of qwen_tp1_short with FLA and the seed."""

from __future__ import annotations

import pytest
import torch
from bench_module import load_bench

bench = load_bench("gdn_placements")


def test_every_placement_shifts_later_buffers_by_a_different_odd_number_of_pages():
    sizes = [bench.pad_bytes(i) for i in range(8)]
    assert len(set(sizes)) == 8 and min(sizes) > 0
    steps = {(b - a) // 4096 for a, b in zip(sizes, sizes[1:], strict=False)}
    assert steps == {7919}  # one odd page count: no power-of-two stride between placements


def test_summary_line_gives_median_min_max_and_the_ratio_to_flas_median():
    line = bench.summary_line("qwen_tp1_short", "seed chunked", [250.0, 260.0, 255.0], 257.5)
    assert line.split()[3:7] == ["255.0", "250.0", "260.0", f"{257.5 / 255.0:.3f}"]
    assert line.endswith("250.0 260.0 255.0")


def test_command_line_rejects_unknown_cases_bad_counts_and_incomplete_folders(tmp_path, capsys):
    for argv, says in [
        (["--cases", "decode_b1"], "unknown case(s) ['decode_b1']"),
        (["--placements", "0"], "must be >= 1"),
        (["--candidate", str(tmp_path)], "needs kernel.hip and model.py"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            bench.parse_args(argv)
        assert exit_info.value.code == 2
        assert says in capsys.readouterr().err
    opts = bench.parse_args(["--cases", "qwen_tp1_short,mha_16", "--placements", "3"])
    assert opts.cases == ["qwen_tp1_short", "mha_16"] and opts.placements == 3


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_main_without_a_gpu_says_so_and_exits_2(capsys):
    assert bench.main(["--placements", "1"]) == 2
    assert "needs a GPU" in capsys.readouterr().err


@pytest.mark.gpu
def test_two_placements_time_fla_and_the_seed_on_the_gpu(monkeypatch, capsys):
    pytest.importorskip("fla")
    monkeypatch.setenv("FLA_DISABLE_BACKEND_DISPATCH", "1")
    assert bench.main(["--placements", "2", "--trials", "3"]) == 0
    rows = [
        line.split() for line in capsys.readouterr().out.splitlines() if "qwen_tp1_short" in line
    ]
    assert [r[1] for r in rows] == ["FLA", "seed"]
    for row in rows:
        median, low, high = (float(x) for x in row[3:6])
        assert 0 < low <= median <= high
        assert len(row) == 3 + 4 + 2  # case, two-word row, median min max ratio, 2 placements
