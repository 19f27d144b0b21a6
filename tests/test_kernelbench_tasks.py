"""KernelBench files as tasks on a CPU: a reduced case that keeps the structure, the dataset root
in --tasks-dir, and one malformed file that does not block its folder (problems/kernelbench.py,
problems/__init__.py, core/reference.module_globals)."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from hipevolve.app.cli import app
from hipevolve.core.reference import load_module, module_globals
from hipevolve.problems import discover
from hipevolve.problems.check import cases_to_check, run_reference
from hipevolve.problems.kernelbench import (
    MAX_DIM,
    REDUCED,
    SIZE_BUDGET,
    load_kernelbench_file,
    reduced_globals,
)

DATA = Path(__file__).parent / "data" / "kernelbench"
SCALED_BIAS = DATA / "gpu_sized" / "7_Scaled_Bias.py"


def test_a_gpu_sized_file_gets_a_small_untimed_reduced_case_beside_its_default_one():
    task = load_kernelbench_file(SCALED_BIAS)
    assert [c.name for c in task.cases] == ["default", REDUCED]
    default, reduced = task.cases
    assert default.timed and not default.small and not default.globals
    assert reduced.small and not reduced.timed
    assert cases_to_check(task) == (reduced,)
    assert reduced.globals == {"batch_size": "2", "features": str(MAX_DIM)}  # 65536 >> 8


def test_the_reduced_case_runs_on_the_cpu_with_dependent_constants_following():
    task = load_kernelbench_file(SCALED_BIAS)
    run = run_reference(task, cases_to_check(task)[0])
    assert run.ok, run.error
    assert run.outputs == [f"[2, {MAX_DIM}] float32"]  # bias_shape followed features
    module = load_module(task.reference)
    assert module.features == 65536 and module.bias_shape == (65536,)  # restored after


def test_equal_constants_stay_equal_and_tuples_stay_tuples():
    task = load_kernelbench_file(DATA / "gpu_sized" / "8_Hinge_Like.py")
    reduced = task.cases[1].globals
    assert reduced["batch_size"] == "256" and reduced["input_shape"] == "(256,)"
    run = run_reference(task, task.cases[1])
    assert run.ok, run.error


def test_structural_constants_keep_their_value():
    reduced = reduced_globals({"kernel_size": 3, "stride": 2, "dim": 1, "n": 1 << 20})
    assert set(reduced) == {"n"} and int(reduced["n"]) <= MAX_DIM


def test_a_small_value_that_divides_a_large_one_still_divides_it_when_reduced():
    # GroupNorm's 8 groups of 24 channels (KernelBench level 2, 23_Conv3d_GroupNorm_Mean) and
    # 16 groups of 64: the shift stops where the channels would no longer split into groups
    for constants in (
        {"batch_size": 128, "in_channels": 3, "out_channels": 24, "D": 24, "H": 32, "W": 32,
         "kernel_size": 3, "num_groups": 8},
        {"batch_size": 128, "in_channels": 8, "out_channels": 64, "height": 128, "width": 128,
         "kernel_size": 3, "num_groups": 16, "maxpool_kernel_size": 4},
    ):  # fmt: skip
        reduced = {k: int(v) for k, v in reduced_globals(constants).items()}
        channels = reduced.get("out_channels", constants["out_channels"])
        assert channels % constants["num_groups"] == 0, reduced
        assert reduced["batch_size"] < 128  # still reduced where it is safe


def test_a_small_file_gets_no_reduced_case():
    task = load_kernelbench_file(DATA / "level_test" / "19_ReLU.py")
    assert [c.name for c in task.cases] == ["default"]


def test_module_globals_restores_a_constant_that_an_expression_recomputed():
    module = load_module(SCALED_BIAS)
    with module_globals(module, {"features": "8"}) as m:
        assert m.features == 8 and m.bias_shape == (8,)
    assert module.features == 65536 and module.bias_shape == (65536,)


def _dataset(root: Path) -> Path:
    for level, name in (("level1", "19_ReLU.py"), ("level2", "40_Conv_Scale_Add.py")):
        (root / level).mkdir(parents=True)
        shutil.copy(DATA / "level_test" / name, root / level / name)
    (root / "changelog").mkdir()
    (root / "changelog" / "notes.txt").write_text("not a task")
    return root


def test_the_dataset_root_finds_every_level(tmp_path):
    root = _dataset(tmp_path / "KernelBench")
    found = {n for n, t in discover([root]).items() if t.origin == "kernelbench"}
    assert found == {"19_ReLU", "40_Conv_Scale_Add"}


def test_one_malformed_file_is_skipped_with_a_warning_and_its_folder_still_loads(tmp_path):
    root = _dataset(tmp_path / "KernelBench")
    shutil.copy(DATA / "malformed" / "no_get_inputs.py", root / "level1" / "no_get_inputs.py")
    skipped = []
    found = discover([root], warn=skipped.append)
    assert {"19_ReLU", "40_Conv_Scale_Add"} <= set(found)
    assert len(skipped) == 1 and "no_get_inputs.py" in skipped[0]
    assert "missing get_inputs" in skipped[0] and "\n" not in skipped[0]


def test_tasks_list_on_the_dataset_root_warns_in_one_line(tmp_path):
    root = _dataset(tmp_path / "KernelBench")
    (root / "level2" / "broken.py").write_text("class Model(:\n")
    result = CliRunner().invoke(app, ["tasks", "list", "--tasks-dir", str(root)])
    assert result.exit_code == 0, result.output
    assert "19_ReLU" in result.output and "40_Conv_Scale_Add" in result.output
    warnings = [ln for ln in result.output.splitlines() if ln.startswith("warning: skipped")]
    assert len(warnings) == 1 and "broken.py" in warnings[0] and "line 1" in warnings[0]
    assert "Traceback" not in result.output


def test_every_occurrence_of_a_size_counts_toward_the_budget():
    # height = width = 128 with a batch of 128: 128 * 64 * 128 * 128 elements before
    reduced = reduced_globals({"batch_size": 128, "in_channels": 64, "height": 128,
                               "width": 128, "kernel_size": 3})  # fmt: skip
    sizes = [int(reduced[n]) for n in ("batch_size", "in_channels", "height", "width")]
    assert sizes == [16, 8, 16, 16], reduced  # one shift for all: ratios kept, equal stay equal
    assert 16 * 8 * 16 * 16 <= SIZE_BUDGET < 128 * 64 * 128 * 128
    assert "kernel_size" not in reduced


def test_a_level_3_mamba2_reference_that_imports_einops_runs_on_its_reduced_case():
    """KernelBench's 48_Mamba2ReturnY imports einops: setup installs it (pyproject.toml)."""
    task = load_kernelbench_file(DATA / "einops" / "48_Mamba2ReturnY.py")
    runs = [run_reference(task, case) for case in cases_to_check(task)]
    assert runs and all(r.ok for r in runs), [r.error for r in runs]
