"""bench/gdn_vs_fla.py: its pure helpers on the CPU (case and candidate parsing, roofline share,
ratios, trial budget, decode buffer rotation, error folding, the table), its command line without
a GPU, and (marked gpu) one decode case end to end with the seed and the reference."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
import torch
from bench_module import load_bench

from hipevolve.problems import get_task

bench = load_bench("gdn_vs_fla")
rows_bench = load_bench("gdn_rows")
TASKS = {bench.PREFILL: get_task(bench.PREFILL), bench.DECODE: get_task(bench.DECODE)}
L2_BYTES = 50 << 20


def test_roofline_pct_is_100_at_the_memory_bound_and_halves_at_twice_the_time():
    case = TASKS[bench.PREFILL].case("qwen_tp1_short")
    bound_us = case.roofline.bytes / bench.HBM_BYTES_PER_S * 1e6  # about 22 us (GDN.md)
    assert 21.5 < bound_us < 22.5
    assert bench.roofline_pct(case.roofline.bytes, bound_us) == pytest.approx(100.0)
    assert bench.roofline_pct(case.roofline.bytes, 2 * bound_us) == pytest.approx(50.0)
    assert bench.roofline_pct(case.roofline.bytes, None) is None


def test_speedup_above_one_means_faster_than_the_baseline():
    assert bench.speedup(890.0, 445.0) == pytest.approx(2.0)
    assert bench.speedup(890.0, 1780.0) == pytest.approx(0.5)
    assert bench.speedup(None, 10.0) is None and bench.speedup(10.0, None) is None


def test_trials_are_kept_when_they_fit_the_budget_and_cut_to_three_when_not():
    assert bench.trials_for(0.001, 30, 8.0) == 30
    assert bench.trials_for(0.5, 30, 8.0) == 16
    assert bench.trials_for(5.4, 30, 8.0) == 3  # the token loop on long_32 (GDN.md)
    assert bench.trials_for(5.4, 2, 8.0) == 2  # never more than asked


def test_decode_rotation_spans_more_than_the_l2_on_every_timed_case():
    for case in TASKS[bench.DECODE].timed_cases:
        i = case.inputs
        state_bytes = i["B"] * i["HV"] * i["K"] * i["V"] * 4
        sets = bench.input_sets(state_bytes)
        assert bench.MIN_SETS <= sets <= bench.MAX_SETS
        assert sets * state_bytes > 2 * L2_BYTES, case.name


def test_select_cases_defaults_to_every_timed_case_of_both_tasks():
    chosen = bench.select_cases([], TASKS)
    assert chosen[bench.PREFILL] == [
        "qwen_tp1_short", "qwen_tp1_batch", "mha_16", "long_32", "qwen35_tp8_32k", "qwen35_tp1_32k",
        "qwen35_tp4_varlen_8x4096", "qwen35_tp4_varlen_ragged"]
    assert chosen[bench.DECODE] == ["decode_b1", "decode_b32", "decode_b256"]
    picked = bench.select_cases(["long_32,decode_b1", "mha_16"], TASKS)
    assert picked == {bench.PREFILL: ["mha_16", "long_32"], bench.DECODE: ["decode_b1"]}


def test_select_cases_rejects_an_unknown_or_untimed_case():
    with pytest.raises(ValueError, match="unknown case small_gva_state"):
        bench.select_cases(["small_gva_state"], TASKS)


def test_parse_candidate_reads_an_optional_task_prefix():
    assert bench.parse_candidate("runs/a/best") == (bench.PREFILL, Path("runs/a/best"))
    assert bench.parse_candidate("decode=runs/b") == (bench.DECODE, Path("runs/b"))
    assert bench.parse_candidate("gated_delta_net_decode=x") == (bench.DECODE, Path("x"))
    with pytest.raises(ValueError, match="unknown task"):
        bench.parse_candidate("softmax=x")
    with pytest.raises(ValueError, match="names no folder"):
        bench.parse_candidate("decode=")


def test_rel_rms_measures_relative_error_and_worst_keeps_a_nan():
    ref = torch.ones(1000, dtype=torch.float64)
    assert bench.rel_rms(ref * 1.004, ref) == pytest.approx(4e-3)
    assert bench.rel_rms(torch.zeros(3), torch.zeros(3)) == 0.0
    assert math.isnan(bench.worst([1e-3, math.nan]))  # max() would return 1e-3 here
    assert bench.worst([1e-3, 2e-3]) == 2e-3


def _results():
    r = bench.Result
    return [
        r(bench.PREFILL, "FLA chunk", "mha_16", 278921216, 720.0, 180.0, 30, 30, 3.8e-3, 3e-3, True),
        r(bench.PREFILL, "PyTorch reference", "mha_16", 278921216, 763000.0, None, 3, 0, 1e-3,
          1e-7, True, graph_note="skipped: slow", note="3 trials (a call takes 0.76 s)"),
        r(bench.PREFILL, "seed chunked", "mha_16", 278921216, 360.0, 60.0, 30, 30, math.nan,
          1e-3, False),
        r(bench.PREFILL, "candidate", "mha_16", note=rows_bench.NO_CANDIDATE),
    ]  # fmt: skip


def test_table_shows_ratios_roofline_errors_and_why_rows_did_not_run():
    results = _results()
    bench.add_ratios(results)
    assert results[2].x_fla_eager == pytest.approx(2.0)
    assert results[2].x_fla_graph == pytest.approx(3.0)
    text = bench.format_table(bench.PREFILL, results, 5e-3)
    lines = text.splitlines()
    for column in ("eager us", "graph us", "xFLA eager", "xFLA graph", "%roof", "err o", "ok"):
        assert column in lines[1]
    seed = next(ln for ln in lines if ln.startswith("seed chunked"))
    assert "360.0" in seed and "60.0" in seed and "2.00" in seed and "3.00" in seed
    assert "NO" in seed and "nan" in seed
    assert "96.8" in seed  # 278.9 MB in 60 us is 96.8% of 4.8 TB/s
    reference = next(ln for ln in lines if ln.startswith("PyTorch reference"))
    assert "n/a" in reference and "9e-04" in reference  # a tiny ratio does not print as 0.00
    assert "candidate             mha_16          not run: no evolve run yet" in lines
    assert "  PyTorch reference, mha_16: graph: n/a (skipped: slow)" in lines
    assert "  PyTorch reference, mha_16: 3 trials (a call takes 0.76 s)" in lines


def test_flashqla_ratio_is_its_graph_time_over_ours_and_the_summary_counts_cases_within_tolerance():
    r = bench.Result
    results = [
        r(bench.PREFILL, "FLA chunk", "long_32", 1, 2200.0, 2100.0, ok=True),
        r(bench.PREFILL, "FlashQLA", "long_32", 1, 800.0, 750.0, ok=True),
        r(bench.PREFILL, "seed chunked", "long_32", 1, 1800.0, 1500.0, ok=True),
        r(bench.PREFILL, "FLA chunk", "mha_16", 1, 600.0, 530.0, ok=True),
        r(bench.PREFILL, "FlashQLA", "mha_16", 1, 240.0, 220.0, ok=True),
        r(bench.PREFILL, "seed chunked", "mha_16", 1, 200.0, 200.0, ok=False),  # fast, wrong
        r(bench.PREFILL, "FLA chunk", "qwen35_tp8_32k", 1, 950.0, 900.0, ok=True),
        r(bench.PREFILL, "FlashQLA", "qwen35_tp8_32k", 1, note="error: no sm90"),  # no time
        r(bench.PREFILL, "seed chunked", "qwen35_tp8_32k", 1, 500.0, 450.0, ok=True),
    ]  # fmt: skip
    bench.add_ratios(results)
    seed = {x.case: x for x in results if x.row == "seed chunked"}
    assert seed["long_32"].x_qla_graph == pytest.approx(0.5)
    assert seed["mha_16"].x_qla_graph == pytest.approx(1.1)
    assert seed["qwen35_tp8_32k"].x_qla_graph is None  # FlashQLA did not run there
    assert "xQLA graph" in bench.format_table(bench.PREFILL, results, 5e-3).splitlines()[1]
    (line,) = bench.anchor_summary(results, ["seed chunked", "candidate"])
    assert "long_32 0.50, mha_16 1.10" in line
    # mha_16 is faster than FlashQLA but outside the tolerance: it does not count
    assert line.endswith("at least 1.0 within the tolerance on 0 of 2 cases")


def test_json_rows_carry_the_roofline_shares():
    row = bench.as_json(_results()[0])
    assert row["roofline_pct_graph"] == pytest.approx(278921216 / 180e-6 / 4.8e12 * 100)
    json.dumps(row)


def test_command_line_rejects_bad_cases_and_candidate_folders(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--cases", "nope"])
    assert exit_info.value.code == 2
    assert "unknown case nope" in capsys.readouterr().err
    (tmp_path / "kernel.hip").write_text("")
    with pytest.raises(SystemExit):
        bench.parse_args(["--candidate", f"decode={tmp_path}"])
    assert "has no model.py" in capsys.readouterr().err
    (tmp_path / "model.py").write_text("")
    opts = bench.parse_args(["--candidate", f"decode={tmp_path}", "--cases", "decode_b1"])
    assert opts.candidates == {bench.DECODE: tmp_path}
    assert opts.selected == {bench.PREFILL: [], bench.DECODE: ["decode_b1"]}
    assert opts.tolerance[bench.DECODE] == 5e-3


def test_a_variant_is_the_seed_with_its_tunables_set_and_a_row_named_by_them(tmp_path, capsys):
    task, row, source = bench.parse_variant("TC_WCOLS=16,TC_BV=64", TASKS)
    seed = TASKS[bench.PREFILL].seeds[0]
    assert (task, row) == (bench.PREFILL, f"seed {seed.name} TC_WCOLS=16,TC_BV=64")
    original = (seed / "kernel.hip").read_text().splitlines()
    changed = [(a, b) for a, b in zip(original, source.splitlines(), strict=True) if a != b]
    assert changed == [("#define TC_BV 0", "#define TC_BV 64"),
                       ("#define TC_WCOLS 32", "#define TC_WCOLS 16")]  # fmt: skip
    assert bench.parse_variant("decode:BV=64", TASKS)[0] == bench.DECODE
    folders = bench.variant_folders([(task, row, source)], TASKS, tmp_path)
    folder = folders[f"{bench.PREFILL}:{row}"]
    assert (folder / "kernel.hip").read_text() == source
    assert (folder / "model.py").read_text() == (seed / "model.py").read_text()
    for bad, why in [("TC_WCOLS=17", "not among the declared 16, 32"),
                     ("NOPE=1", "NOPE is not a declared tunable"),
                     ("TC_WCOLS", "give NAME=VALUE pairs"),
                     ("softmax:BV=64", "unknown task")]:  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            bench.parse_args(["--variant", bad])
        assert exit_info.value.code == 2
        assert why in capsys.readouterr().err


def test_anchors_default_to_every_row_and_pick_rows_by_name_or_none(capsys):
    every = set(bench.ANCHOR_ROWS.values())
    opts = bench.parse_args([])
    assert opts.anchor_rows == every and not opts.graph_only and not opts.no_graph
    assert bench.parse_args(["--anchors", "all"]).anchor_rows == every
    assert bench.parse_args(["--anchors", "none"]).anchor_rows == frozenset()
    picked = bench.parse_args(["--anchors", "fla_chunk,flashqla", "--anchors", "flashinfer"])
    assert picked.anchor_rows == {"FLA chunk", "FlashQLA", "FlashInfer"}
    for bad, message in [("nope", "unknown anchor(s) nope"), ("none,flashqla", "none takes"),
                         ("all,fla_chunk", "all takes")]:  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            bench.parse_args(["--anchors", bad])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    rows = [rows_bench.Row(n, None) for n in [*every, "seed chunked", "candidate"]]
    kept = [r.name for r in bench.keep_rows(rows, picked.anchor_rows)]
    assert kept == [n for n in [*every, "seed chunked", "candidate"]
                    if n in picked.anchor_rows or n not in every]  # fmt: skip
    assert [r.name for r in bench.keep_rows(rows, frozenset())] == ["seed chunked", "candidate"]


def test_graph_only_skips_eager_timing_and_refuses_no_graph(capsys, monkeypatch):
    assert bench.parse_args(["--graph-only", "--anchors", "none"]).graph_only
    with pytest.raises(SystemExit) as exit_info:
        bench.parse_args(["--graph-only", "--no-graph"])
    assert exit_info.value.code == 2
    assert "leave nothing to time" in capsys.readouterr().err

    class Timer:  # what run_row asks of graph_timer.Timer, without a GPU
        def eager(self, call, sets, n):
            raise AssertionError("eager timing under --graph-only")

    opts = bench.parse_args(["--graph-only"])
    opts.no_graph = True  # no CUDA graph on the CPU: the row is only run and checked
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    ref = [torch.ones(2), torch.ones(3)]
    row = rows_bench.Row("seed chunked", lambda a: (torch.ones(2), torch.ones(3)))
    res = bench.Result(bench.PREFILL, row.name, "c", 0)
    bench.run_row(row, res, [[]], ref, Timer(), opts)
    assert res.eager_us is None and res.graph_us is None and res.ok


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown without a GPU")
def test_main_without_a_gpu_says_so_and_exits_2(capsys):
    assert bench.main(["--cases", "decode_b1"]) == 2
    assert "needs a GPU" in capsys.readouterr().err


@pytest.mark.gpu
def test_decode_b1_end_to_end_seed_and_reference_pass_and_are_timed(tmp_path, monkeypatch):
    monkeypatch.setenv("FLA_DISABLE_BACKEND_DISPATCH", "1")  # main sets it; keep it scoped
    out = tmp_path / "gdn.json"
    args = ["--cases", "decode_b1", "--trials", "5", "--out", str(out)]
    args += ["--build-cache", str(tmp_path / "cache")]
    bench.main(args)
    rows = {r["row"]: r for r in json.loads(out.read_text())["results"]}
    for name in ("seed recurrent", "PyTorch reference"):
        assert rows[name]["ok"] is True, rows[name]
        assert rows[name]["eager_us"] > 0 and rows[name]["eager_trials"] == 5
    assert rows["seed recurrent"]["graph_us"] > 0, rows["seed recurrent"]["graph_note"]
    assert rows["candidate"]["note"] == rows_bench.NO_CANDIDATE


@pytest.mark.gpu
def test_graph_trials_time_the_replay_on_the_gpu_without_the_host_launch():
    """A graph of one tiny kernel: the held trial times the replay on the GPU, less than a trial
    timed from an idle GPU, which also counts the host's launch; no hold runs out. A graph of
    eight such calls, divided by eight, costs less per call (one replay start for eight)."""
    x = torch.zeros(1, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x.add_(1)
    torch.cuda.synchronize()
    one, eight = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(one):
        x.add_(1)
    with torch.cuda.graph(eight):
        for _ in range(8):
            x.add_(1)
    timer = bench.Timer()
    held = timer.graph(one, 1, 20)
    per_call = timer.graph(eight, 8, 20)
    unheld = []
    for _ in range(20):
        start, end = timer._cold()
        start.record()
        one.replay()
        end.record()
        end.synchronize()
        unheld.append(start.elapsed_time(end) * 1e3)
    assert timer.late_holds == 0
    assert 0 < held < statistics.median(unheld), (held, unheld)
    assert 0 < per_call < held, (per_call, held)


def _flashinfer_contract(q, k, v, g, beta, scale, initial_state, output_final_state,
                         cu_seqlens):  # fmt: skip
    """FlashInfer's chunk_gated_delta_rule as its docstring and kernels define it, one token at
    a time: packed [tokens, heads, D] inputs, cu_seqlens required, g the decay alpha itself
    (its kernels take log2(alpha + 1e-10)), states [N, HV, V, K]."""
    assert q.dim() == 3 and cu_seqlens is not None and cu_seqlens.dtype == torch.int64
    assert output_final_state and bool((g > 0).all()) and bool((g <= 1).all())
    heads, group = v.shape[1], v.shape[1] // q.shape[1]
    o = torch.empty_like(v)
    state = initial_state.clone()
    for i in range(cu_seqlens.numel() - 1):
        for h in range(heads):
            s = state[i, h]  # [V, K]
            for t in range(int(cu_seqlens[i]), int(cu_seqlens[i + 1])):
                kt, qt = k[t, h // group], q[t, h // group]
                s = g[t, h] * s
                u = beta[t, h] * (v[t, h] - s @ kt)
                s = s + torch.outer(u, kt)
                o[t, h] = s @ (qt * scale)
            state[i, h] = s
    return o, state


def _ours(q, k, v, g, beta, h0, spans):
    """The task's recurrence in our layout (task.toml): h [K, V]; per token h = h * exp(g),
    u = beta * (v - h^T k), h = h + k u^T, o = h^T (q * K^-0.5). spans: (batch row, first
    token, end) of each sequence."""
    group, scale = v.shape[2] // q.shape[2], q.shape[-1] ** -0.5
    o, final = torch.empty_like(v), h0.clone()
    for n, (b, lo, hi) in enumerate(spans):
        for h in range(v.shape[2]):
            s = final[n, h]
            for t in range(lo, hi):
                kt, qt = k[b, t, h // group], q[b, t, h // group]
                s = s * g[b, t, h].exp()
                s = s + torch.outer(kt, beta[b, t, h] * (v[b, t, h] - s.T @ kt))
                o[b, t, h] = s.T @ (qt * scale)
            final[n, h] = s
    return o, final


@pytest.mark.parametrize("packed", [False, True])
def test_the_flashinfer_row_passes_the_decay_and_its_layouts_as_flashinfer_takes_them(
    monkeypatch, packed
):
    """The FlashInfer anchor row against FlashInfer's documented contract (a CPU stand-in: the
    library runs on sm90/sm100 only): the gate exp(g), not our log-space g; states transposed
    both ways; B sequences packed with their cu_seqlens."""
    import sys
    import types

    fake = types.ModuleType("flashinfer.gdn_prefill")
    fake.chunk_gated_delta_rule = _flashinfer_contract
    monkeypatch.setitem(sys.modules, "flashinfer", types.ModuleType("flashinfer"))
    monkeypatch.setitem(sys.modules, "flashinfer.gdn_prefill", fake)
    monkeypatch.setitem(sys.modules, "flash_qla", None)  # that row is not under test
    call = rows_bench.anchor_calls()["FlashInfer"]
    gen = torch.Generator().manual_seed(5)
    b, t, h, hv, d = (1, 9, 1, 2, 4) if packed else (2, 5, 1, 2, 4)
    q = torch.nn.functional.normalize(torch.randn(b, t, h, d, generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(b, t, h, d, generator=gen), dim=-1)
    v = torch.randn(b, t, hv, d, generator=gen)
    g = -torch.rand(b, t, hv, generator=gen)  # log decay
    beta = torch.rand(b, t, hv, generator=gen)
    spans = [(0, 0, 4), (0, 4, 9)] if packed else [(row, 0, t) for row in range(b)]
    h0 = torch.randn(len(spans), hv, d, d, generator=gen)
    given = [torch.tensor([0, 4, 9], dtype=torch.int64)] if packed else []
    o, final = call([q, k, v, g, beta, h0, *given])
    want_o, want_final = _ours(q, k, v, g, beta, h0, spans)
    assert torch.allclose(o, want_o, atol=1e-5) and torch.allclose(final, want_final, atol=1e-5)
