"""KernelBench-format files load as tasks with KernelBench's tolerances, and their references run."""

from pathlib import Path

import pytest
import torch

from hipevolve.core.errors import UserError
from hipevolve.core.reference import run_case
from hipevolve.problems import discover
from hipevolve.problems.check import run_reference
from hipevolve.problems.kernelbench import load_kernelbench_file

DATA = Path(__file__).parent / "data" / "kernelbench"


def test_every_file_of_a_folder_becomes_a_task_with_kernelbench_tolerance():
    tasks = {n: t for n, t in discover([DATA / "level_test"]).items() if t.origin == "kernelbench"}
    assert set(tasks) == {"1_Square_matmul", "19_ReLU", "40_Conv_Scale_Add"}
    for t in tasks.values():
        assert t.tolerance.kind == "kernelbench"
        assert t.tolerance.for_dtype("float32") == (1e-4, 1e-4)
        assert t.tolerance.for_dtype("float16") == (1e-2, 1e-2)
        assert t.tolerance.for_dtype("bfloat16") == (1e-2, 1e-2)


def test_a_single_file_loads_as_a_task():
    task = load_kernelbench_file(DATA / "level_test" / "19_ReLU.py")
    assert task.name == "19_ReLU" and task.description == "ReLU activation."


def test_references_run_with_constructor_arguments():
    task = discover([DATA / "level_test"])["40_Conv_Scale_Add"]
    run = run_reference(task, task.cases[0])
    assert run.ok, run.error
    assert run.outputs == ["[2, 8, 14, 14] float32"]


def test_reference_outputs_are_deterministic_for_a_seed_and_differ_across_seeds():
    task = discover([DATA / "level_test"])["40_Conv_Scale_Add"]
    a = run_case(task.reference, {}, {}, seed=1)[0]
    b = run_case(task.reference, {}, {}, seed=1)[0]
    c = run_case(task.reference, {}, {}, seed=2)[0]
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_malformed_file_names_the_file_and_what_is_missing():
    with pytest.raises(UserError) as e:
        load_kernelbench_file(DATA / "malformed" / "no_get_inputs.py")
    assert "no_get_inputs.py" in e.value.line() and "missing get_inputs" in e.value.line()


def test_syntax_error_names_the_file_and_line(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("class Model(:\n    pass\n")
    with pytest.raises(UserError) as e:
        load_kernelbench_file(bad)
    assert "broken.py" in e.value.line() and "line 1" in e.value.line()


def test_listing_does_not_execute_the_file(tmp_path):
    marker = tmp_path / "executed"
    (tmp_path / "side_effect.py").write_text(
        f"open({str(marker)!r}, 'w').write('x')\n"
        "class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n")
    discover([tmp_path])
    assert not marker.exists()


def test_user_task_cannot_shadow_a_builtin(tmp_path):
    (tmp_path / "softmax.py").write_text(
        "class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n")
    with pytest.raises(UserError, match="already taken"):
        discover([tmp_path])
