"""Synthetic task generation: 50 candidates of seed 0 keep at least 45 distinct verified tasks that
load like any task folder; duplicates (same fx graph and shapes) and degenerate compositions are
rejected with their reasons; the same seed writes the same files."""

from __future__ import annotations

import random
import re
import tomllib
from pathlib import Path

import pytest

from hipevolve.core.taskspec import parse_task_toml
from hipevolve.problems import discover, load_task_folder
from hipevolve.problems.synthetic.generate import (
    GenerationReport,
    KeptTask,
    Rejection,
    admit,
    compose_candidate,
    generate_tasks,
    meets,
)
from hipevolve.problems.synthetic.ops import OPS


@pytest.fixture(scope="module")
def fifty(tmp_path_factory) -> tuple[GenerationReport, Path]:
    out = tmp_path_factory.mktemp("synthetic")
    return generate_tasks(n=50, seed=0, out_dir=out), out


def test_fifty_candidates_of_seed_zero_keep_at_least_45_distinct_verified_tasks(fifty):
    report, out = fifty
    print(report.summary())
    assert len(report.kept) + len(report.rejected) == 50
    assert len(report.kept) >= 45, [r.reason for r in report.rejected]
    assert len({k.name for k in report.kept}) == len(report.kept)
    assert len({k.graph_hash for k in report.kept}) == len(report.kept)
    assert all(r.reason for r in report.rejected)
    for mode in ("mutate", "compose", "constrain"):
        counts = report.per_mode[mode]
        assert counts.kept >= 1 and counts.kept + counts.rejected == counts.proposed
    on_disk = sorted(p.name for p in out.iterdir())
    assert on_disk == sorted(k.name for k in report.kept)  # no staging or rejected leftovers


def test_generated_tasks_load_through_discover_with_a_small_case_and_rooflines(fifty):
    report, out = fifty
    tasks = discover([out])
    for kept in report.kept:
        task = tasks[kept.name]
        assert task.origin == "user"
        assert task.small_cases and task.timed_cases
        assert all(c.roofline is not None for c in task.cases)
        data = tomllib.loads((out / kept.name / "task.toml").read_text())
        assert parse_task_toml(data, out / kept.name, "user") == task


def test_constrained_tasks_meet_their_constraint_on_the_timed_case(fifty):
    report, out = fifty
    constrained = [k for k in report.kept if k.mode == "constrain"]
    assert constrained
    for kept in constrained:
        task = load_task_folder(out / kept.name, "user")
        roof = task.timed_cases[0].roofline
        kind = kept.name.split("_con_")[1]
        text = task.description
        if kind == "memory_bound":
            bound = float(re.search(r"below ([\d.]+) FLOP", text).group(1))
            assert roof.flops / roof.bytes < bound
        elif kind == "intensity_band":
            low, high = map(float, re.search(r"\[([\d.]+), ([\d.]+)\) FLOP", text).groups())
            assert low <= roof.flops / roof.bytes < high
        else:
            low, high = map(float, re.search(r"\[([\d.]+), ([\d.]+)\) MiB", text).groups())
            assert low * 2**20 <= roof.bytes < high * 2**20


def test_same_seed_writes_the_same_tasks(tmp_path):
    first = generate_tasks(n=6, seed=7, out_dir=tmp_path / "a")
    second = generate_tasks(n=6, seed=7, out_dir=tmp_path / "b")
    assert [k.name for k in first.kept] == [k.name for k in second.kept]
    for kept in first.kept:
        for file in ("reference.py", "task.toml"):
            a = (tmp_path / "a" / kept.name / file).read_text()
            assert a == (tmp_path / "b" / kept.name / file).read_text()


def test_wl_hash_dedupe_rejects_a_renamed_copy_with_another_constant(tmp_path):
    seen: dict[str, str] = {}
    original = compose_candidate(random.Random(3), "orig", ops=["linear", "scale", "gelu"])
    assert isinstance(admit(original, tmp_path, seen), KeptTask)
    # Same graph and shapes, another name and another scale factor: still the same task.
    source = re.sub(r"y = y \* [\d.]+", "y = y * 0.125", original.source)
    assert source != original.source
    copy = original.model_copy(update={"name": "copy", "source": source})
    outcome = admit(copy, tmp_path, seen)
    assert isinstance(outcome, Rejection)
    assert outcome.reason.startswith(f"duplicate of {original.name}")
    assert not (tmp_path / "copy").exists()


def test_same_graph_on_other_shapes_is_not_a_duplicate(tmp_path):
    seen: dict[str, str] = {}
    a = compose_candidate(random.Random(3), "a", ops=["linear", "scale", "gelu"])
    b = compose_candidate(random.Random(4), "b", ops=["linear", "scale", "gelu"])
    assert a.cases != b.cases
    assert isinstance(admit(a, tmp_path, seen), KeptTask)
    assert isinstance(admit(b, tmp_path, seen), KeptTask)


def test_constant_composition_is_rejected_with_the_reason(tmp_path):
    # softmax over the single column left by a mean is 1.0 everywhere.
    candidate = compose_candidate(random.Random(0), "const", ops=["mean_last", "softmax"])
    outcome = admit(candidate, tmp_path, {})
    assert isinstance(outcome, Rejection)
    assert outcome.reason.startswith("constant"), outcome.reason


def test_input_insensitive_composition_is_rejected_with_the_reason(tmp_path):
    # relu of a log-softmax is 0, so the output is the residual alone: x does not matter.
    candidate = compose_candidate(
        random.Random(0), "blind", ops=["log_softmax", "relu", "residual_add"]
    )
    outcome = admit(candidate, tmp_path, {})
    assert isinstance(outcome, Rejection)
    assert outcome.reason == "insensitive: changing input 0 leaves the output unchanged"


def test_ops_library_covers_the_operators_chains_are_built_from():
    required = {
        "relu",
        "gelu",
        "silu",
        "sigmoid",
        "tanh",
        "scale",
        "add_bias",
        "residual_add",
        "clamp",
        "softmax",
        "log_softmax",
        "layernorm",
        "rmsnorm",
        "sum_last",
        "mean_last",
        "linear",
    }
    assert len(OPS) >= 14 and required <= set(OPS)
    assert all(op.dtypes for op in OPS.values())


def test_meets_reads_intensity_as_flops_per_byte():
    assert meets({"kind": "memory_bound", "max_intensity": 1.0}, 100.0, 50.0)
    assert not meets({"kind": "memory_bound", "max_intensity": 1.0}, 100.0, 150.0)
    assert meets({"kind": "intensity_band", "low": 16.0, "high": 64.0}, 10.0, 200.0)
    assert not meets({"kind": "bytes_range", "low": 2.0**20, "high": 2.0**22}, 2.0**22, 1.0)
