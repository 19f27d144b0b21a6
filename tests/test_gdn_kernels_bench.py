"""bench/gdn_kernels.py on the CPU: its command line (cases, variants, anchors, refusals) and the
kernel names it prints; without a GPU it says so and exits 2."""

from __future__ import annotations

import pytest
from bench_module import load_bench

kernels = load_bench("gdn_kernels")


def test_kernel_names_keep_their_template_arguments_and_drop_the_parameters():
    assert kernels.short("void gdn_tc_scan_rs<64, 3, 0>(unsigned short const*, int)") == (
        "gdn_tc_scan_rs<64, 3, 0>"
    )
    assert kernels.short("gdn_cp_plan(long const*, int)") == "gdn_cp_plan"
    assert kernels.short("tilelang_kkt_solve_kernel_kernel") == "tilelang_kkt_solve_kernel_kernel"


def test_the_command_line_takes_prefill_cases_variants_and_anchors():
    opts = kernels.parse_args(["--cases", "long_32,qwen35_tp8_32k", "--variant", "TC_RS=0",
                               "--anchor", "flashqla", "--calls", "2"])  # fmt: skip
    assert opts.cases == ["long_32", "qwen35_tp8_32k"]
    assert [row for _, row, _ in opts.variants] == ["seed chunked TC_RS=0"]
    assert opts.anchor == ["flashqla"] and opts.calls == 2
    every = kernels.parse_args([])
    assert "long_32" in every.cases and not any(c.startswith("decode") for c in every.cases)


@pytest.mark.parametrize(
    "argv, why",
    [
        (["--cases", "decode_b1"], "unknown case decode_b1"),
        (["--variant", "decode:BV=64"], "prefill tunables only"),
        (["--variant", "TC_RS=3"], "not among the declared"),
        (["--anchor", "fla"], "invalid choice"),
        (["--calls", "0"], "--calls must be >= 1"),
    ],
)
def test_the_command_line_refuses_what_it_cannot_run(argv, why, capsys):
    with pytest.raises(SystemExit) as exit_info:
        kernels.parse_args(argv)
    assert exit_info.value.code == 2
    assert why in capsys.readouterr().err


def test_without_a_gpu_it_says_so_and_exits_2(capsys, monkeypatch):
    monkeypatch.setattr(kernels.torch.cuda, "is_available", lambda: False)
    assert kernels.main(["--cases", "long_32"]) == 2
    assert "needs a GPU" in capsys.readouterr().err
