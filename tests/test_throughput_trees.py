"""The two-tree throughput bench (bench/verifier_throughput.py --baseline-tree, throughput_trees.py):
its argument handling, the folder that makes another tree's code importable, the gated_delta_net
candidates, the order of the phases and the table. CPU only; the GPU run is the lead's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from bench_module import load_bench

from hipevolve.core.candidate import load_candidate

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench" / "verifier_throughput.py"
trees = load_bench("throughput_trees")


def _bench(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def archived_tree(tmp_path_factory) -> Path:
    """This commit's files in a folder of their own, as `git worktree add` would lay them out."""
    tree = tmp_path_factory.mktemp("tree")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD"], capture_output=True,
                             check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def test_a_missing_baseline_tree_is_one_line_naming_the_fix(tmp_path):
    done = _bench("--baseline-tree", str(tmp_path / "nowhere"))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"--baseline-tree {tmp_path / 'nowhere'}: no such folder (git worktree add it first)"
    ]


def test_a_folder_that_is_no_hipevolve_checkout_is_refused_in_one_line(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\n')
    done = _bench("--baseline-tree", str(tmp_path))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "not a hipevolve checkout" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_task_the_side_by_side_bench_does_not_know_is_refused_in_one_line():
    done = _bench("--baseline-tree", str(ROOT), "--tasks", "softmax,conv2d")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "knows softmax and gated_delta_net" in done.stderr


def test_the_baseline_tree_options_default_to_both_tasks_and_the_baseline_seed():
    bench = load_bench("verifier_throughput")
    args = bench._parse_args(["--baseline-tree", "base0dc"])
    assert args.baseline_tree == Path("base0dc")
    assert args.tasks == "softmax,gated_delta_net"
    assert (args.gdn_candidates, args.gdn_seed) == (4, "baseline")
    assert bench._parse_args([]).baseline_tree is None  # the KernelBench-style bench as before


def test_the_shim_makes_a_judge_started_outside_any_tree_run_the_named_trees_code(
    archived_tree, tmp_path
):
    shim = trees.shim(trees.check_tree(archived_tree), tmp_path / "shim")
    # As the pipeline starts a judge: `python -m`, in a folder of its own.
    code = (
        "import pathlib, hipevolve.verifier.gpu.judge.worker as w, hipevolve.problems as p\n"
        "print(pathlib.Path(w.__file__).resolve())\n"
        "print(pathlib.Path(p.get_task('softmax').reference).resolve())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env={"PYTHONPATH": str(shim), "PATH": "/usr/bin:/bin"},
                          check=True, timeout=120)  # fmt: skip
    worker, reference = done.stdout.split()
    assert Path(worker) == archived_tree / "verifier" / "gpu" / "judge" / "worker.py"
    assert Path(reference) == archived_tree / "problems" / "softmax" / "reference.py"


def test_gdn_candidates_are_the_seed_then_distinct_configurations_that_load(tmp_path):
    seed = ROOT / trees.GDN_SEED
    folders = trees.gdn_candidates(seed, tmp_path, 4)
    assert len(folders) == 4
    sources = [(f / "kernel.hip").read_text() for f in folders]
    assert sources[0] == (seed / "kernel.hip").read_text()
    assert len(set(sources)) == 4
    assert "#define BV 16" in sources[1]
    names = [load_candidate(f).name for f in folders]
    assert names[0] == "gdn_seed" and len(set(names)) == 4
    assert len(trees.gdn_candidates(seed, tmp_path / "all", 99)) == len(trees.GDN_CONFIGS)


def test_both_trees_judge_only_the_cases_the_baseline_tree_defines_too(tmp_path):
    ours = trees.case_names(ROOT, "gated_delta_net")
    assert "qwen35_tp4_varlen_ragged" in ours and "long_32" in ours
    old = tmp_path / "problems" / "gated_delta_net"
    old.mkdir(parents=True)
    old.joinpath("task.toml").write_text(
        'name = "gated_delta_net"\n[[cases]]\nname = "small_gva_state"\n[[cases]]\nname = "long_32"\n'
    )
    assert trees.case_names(tmp_path, "gated_delta_net") == ["small_gva_state", "long_32"]
    with pytest.raises(trees.TreeError, match="no readable task.toml"):
        trees.case_names(tmp_path, "softmax")


def test_cold_phases_come_before_warm_ones_and_each_task_starts_with_each_tree_once():
    order = trees.schedule(["softmax", "gated_delta_net"])
    assert [c for _, c, _, _ in order] == ["cold"] * 4 + ["warm"] * 4
    firsts = [order[i][3] for i in range(0, 8, 2)]
    assert firsts == ["this", "baseline", "baseline", "this"]
    assert {(c, t) for _, c, t, _ in order} == {
        (c, t) for c in ("cold", "warm") for t in ("softmax", "gated_delta_net")
    }
    assert all({order[i][3], order[i + 1][3]} == {"this", "baseline"} for i in range(0, 8, 2))
    alone = trees.schedule(["softmax"])
    assert [tree for *_, tree in alone] == ["this", "baseline", "baseline", "this"]


def test_each_round_repeats_the_schedule_with_the_trees_order_swapped():
    order = trees.schedule(["softmax"], rounds=2)
    assert [r for r, *_ in order] == [0] * 4 + [1] * 4
    assert [tree for *_, tree in order] == ["this", "baseline", "baseline", "this"] * 1 + [
        "baseline",
        "this",
        "this",
        "baseline",
    ]


def test_the_ratio_over_rounds_is_their_median_and_each_rounds_is_shown():
    three = {"a": "ok", "b": "incorrect", "c": "compile_error"}
    walls = [(60.0, 60.0), (50.0, 60.0), (75.0, 60.0)]  # this, baseline: 1.0, 1.2, 0.8
    phases = [
        _phase(tree, "softmax", "cold", wall, three).model_copy(update={"round": r})
        for r, pair in enumerate(walls)
        for tree, wall in zip(("this", "baseline"), pair, strict=True)
    ]
    assert trees.round_ratios(phases)["softmax cold"] == pytest.approx([1.0, 1.2, 0.8])
    assert trees.ratios(phases) == {"softmax cold": pytest.approx(1.0)}
    assert trees.ratio_lines(phases) == [
        "ratio this/baseline, softmax cold: 1.00 (median of 3 rounds: 1.00, 1.20, 0.80)  goal met"
    ]
    assert trees.table(phases).splitlines()[0].endswith("round")


def _phase(tree: str, task: str, cache: str, wall: float, statuses: dict) -> object:
    seconds = {n: {"record": 0.2 if tree == "baseline" else 0.1, "check": 1.0} for n in statuses}
    return trees.TreePhase(tree=tree, task=task, cache=cache, wall_s=wall, statuses=statuses,
                           seconds=seconds)  # fmt: skip


def test_the_report_gives_each_trees_rate_the_ratio_against_the_goal_and_disagreements():
    three = {"a": "ok", "b": "incorrect", "c": "compile_error"}
    phases = [
        _phase("this", "softmax", "cold", 60.0, three),  # 3 a minute
        _phase("baseline", "softmax", "cold", 45.0, three),  # 4 a minute
        _phase("baseline", "gated_delta_net", "warm", 60.0, {"s": "ok"}),
        _phase("this", "gated_delta_net", "warm", 60.0, {"s": "suspect"}),
    ]
    assert phases[0].per_minute == 3.0 and phases[1].per_minute == 4.0
    assert trees.ratios(phases) == {"softmax cold": 0.75, "gated_delta_net warm": 1.0}
    # issue 47's goals: no fewer softmax evaluations a minute, twice the GDN ones
    faster = [
        _phase("this", "softmax", "warm", 30.0, three),
        _phase("baseline", "softmax", "warm", 60.0, three),
        _phase("this", "gated_delta_net", "cold", 30.0, {"s": "ok"}),
        _phase("baseline", "gated_delta_net", "cold", 60.0, {"s": "ok"}),
    ]
    assert trees.ratio_lines(phases + faster) == [
        "ratio this/baseline, softmax cold: 0.75  below the 1.00 goal",
        "ratio this/baseline, gated_delta_net warm: 1.00  below the 2.00 goal",
        "ratio this/baseline, softmax warm: 2.00  goal met",
        "ratio this/baseline, gated_delta_net cold: 2.00  goal met",
    ]
    table = trees.table(phases).splitlines()
    assert [line.split()[:3] for line in table[2:]] == [
        ["gated_delta_net", "warm", "this"],
        ["gated_delta_net", "warm", "baseline"],
        ["softmax", "cold", "this"],
        ["softmax", "cold", "baseline"],
    ]
    assert table[4].split()[3:6] == ["3", "60.0", "3.00"]
    assert trees.stage_lines(phases)[0] == (
        "softmax cold (this/baseline): check 1.000/1.000, record 0.100/0.200"
    )
    assert trees.disagreements(phases) == ["gated_delta_net warm s: this suspect, baseline ok"]


def test_the_overheads_bench_refuses_counts_below_one_in_one_line():
    bench = ROOT / "bench" / "verifier_overheads.py"
    done = subprocess.run([sys.executable, str(bench), "--reps", "0"], capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith("--reps and --calls: at least 1; --judge-candidates: at least 0")
    )
    args = load_bench("verifier_overheads")._parse_args([])
    assert (args.reps, args.calls, args.judge_candidates) == (10, 100, 8)


@pytest.mark.skipif(
    __import__("hipevolve.verifier.build.amd_static", fromlist=["x"]).find_toolchain() is None,
    reason="the static backend needs the AMD static toolchain",
)
def test_a_phase_of_this_tree_evaluates_through_the_run_evaluator_and_says_so(tmp_path):
    """This tree's phase evaluates as its runs do (the run evaluator; on the static backend
    nothing is timed, so no baseline either) and the phase says how it evaluated."""
    manifest = __import__("json").loads((trees.CANDIDATES / "manifest.json").read_text())
    folders = [trees.CANDIDATES / c["native"] for c in manifest["candidates"][:2]]
    shim = trees.shim(ROOT, tmp_path / "shim")
    phase = trees.run_phase("this", ROOT, shim, "softmax", folders, tmp_path / "cache", "cold",
                            None, "static", tmp_path / "this.json")  # fmt: skip
    assert phase.mode == "as a run: nothing timed on this backend" and phase.start_s >= 0
    assert len(phase.statuses) == 2 and phase.wall_s > 0
