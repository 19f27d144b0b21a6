"""`evolve tasks ...` and `evolve doctor` as a user runs them: real processes, no tracebacks."""

import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "kernelbench"


def evolve(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hipevolve", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def test_tasks_list_shows_the_builtin_library():
    out = evolve("tasks", "list")
    assert out.returncode == 0, out.stderr
    assert "softmax" in out.stdout


def test_unknown_task_is_one_line_naming_the_closest_matches():
    out = evolve("tasks", "show", "softmx")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0, out.stderr
    assert "unknown task 'softmx'" in out.stderr and "softmax" in out.stderr
    assert "Traceback" not in out.stderr


def test_tasks_show_prints_cases_roofline_bounds_and_reference():
    out = evolve("tasks", "show", "softmax", "--full")
    assert out.returncode == 0, out.stderr
    for text in ("attn_scores_4k", "lm_head_vocab", "H200", "MI300X", "class Model"):
        assert text in out.stdout


def test_tasks_show_prints_a_description_s_square_brackets_as_written():
    out = evolve("tasks", "show", "gated_delta_net")
    assert out.returncode == 0, out.stderr
    flat = " ".join(out.stdout.split())
    assert "cu_seqlens[i] to cu_seqlens[i+1]-1" in flat  # not read as rich markup


def test_tasks_show_is_a_screenful_or_two_and_full_adds_anchor_figures_and_the_source():
    short = evolve("tasks", "show", "gated_delta_net").stdout
    full = evolve("tasks", "show", "gated_delta_net", "--full").stdout
    shown = json.loads(evolve("tasks", "show", "gated_delta_net", "--json").stdout)
    reference = Path(shown["reference"]).read_text()
    assert len(short.splitlines()) <= 120 < len(full.splitlines())
    flat = " ".join(short.split())
    assert "class Model" not in short and "gated_delta_net --full` prints it" in flat
    assert "anchor: FlashQLA (CUDA graph, published) (NVIDIA H200): 6 figures, us" in flat
    assert all(line in full.splitlines() for line in reference.splitlines() if line.strip())


def test_kernelbench_folder_lists_as_tasks():
    out = evolve("tasks", "list", "--tasks-dir", str(DATA / "level_test"))
    assert out.returncode == 0, out.stderr
    for name in ("1_Square_matmul", "19_ReLU", "40_Conv_Scale_Add"):
        assert name in out.stdout


def test_kernelbench_references_run_through_tasks_check():
    out = evolve("tasks", "check", "--tasks-dir", str(DATA / "level_test"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert sum(ln.startswith("ok ") for ln in out.stdout.splitlines()) >= 3


def test_malformed_kernelbench_file_is_one_line_naming_file_and_what_is_missing():
    # skipped with a warning: the rest of its folder (here, the built-ins) still lists
    out = evolve("tasks", "list", "--tasks-dir", str(DATA / "malformed"))
    assert out.returncode == 0  # skipped with a warning: it does not hide the folder's others
    line = out.stderr.strip()
    assert line.startswith("warning: skipped ")
    assert "\n" not in line and "no_get_inputs.py" in line and "missing get_inputs" in line
    # named alone, the file is still an error
    alone = evolve("tasks", "list", "--tasks-dir", str(DATA / "malformed" / "no_get_inputs.py"))
    assert alone.returncode == 2 and "missing get_inputs" in alone.stderr


def test_reference_that_raises_reports_task_and_first_line_of_error():
    out = evolve("tasks", "check", "--tasks-dir", str(DATA / "raising"))
    assert out.returncode == 1
    assert "task raises: ValueError: shapes do not match: 3 vs 4" in out.stderr
    assert "second line" not in out.stderr and "Traceback" not in out.stderr


def test_tasks_dir_from_environment_variable(monkeypatch):
    import os

    env = {**os.environ, "HIPEVOLVE_TASKS": str(DATA / "level_test")}
    out = evolve("tasks", "list", env=env)
    assert out.returncode == 0 and "19_ReLU" in out.stdout


def test_missing_tasks_dir_is_one_line():
    out = evolve("tasks", "list", "--tasks-dir", "/nonexistent/kb")
    assert out.returncode == 2 and "does not exist" in out.stderr and "Traceback" not in out.stderr


def test_doctor_reports_every_piece_with_a_fix_for_missing_ones():
    out = evolve("doctor")
    assert "Traceback" not in out.stderr, out.stderr
    for piece in ("Python", "GPU", "hipcc", "nvcc", "AMD static compiler"):
        assert piece in out.stdout


def test_tasks_generate_writes_tasks_that_list_and_run(tmp_path):
    out = tmp_path / "gen"
    made = evolve("tasks", "generate", "--n", "3", "--seed", "1", "--mode", "compose",
                  "--mode", "constrain", "--out", str(out))
    assert made.returncode == 0, made.stderr
    assert "kept" in made.stdout and "Traceback" not in made.stderr
    names = [p.name for p in out.iterdir() if (p / "task.toml").is_file()]
    assert names
    checked = evolve("tasks", "check", "--tasks-dir", str(out))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_tasks_generate_unknown_mode_is_one_line(tmp_path):
    out = evolve("tasks", "generate", "--mode", "fuse", "--out", str(tmp_path / "g"))
    assert out.returncode == 2 and "unknown mode 'fuse'" in out.stderr
