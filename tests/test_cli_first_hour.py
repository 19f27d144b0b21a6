"""The first hour as a user (issue 35): output that reads at 80 columns and in a pipe, --json and
--version, and every mistake answered in one line, cheap checks first. Real processes; a real
terminal (a pty) where the terminal matters; a real read-only folder (a read-only bind mount in
a mount namespace of its own when run as root, whom permission bits do not stop)."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer

from hipevolve.archive.store import Archive
from hipevolve.core.candidate import load_candidate
from hipevolve.core.errors import UserError

TESTS = Path(__file__).parent
DATA = TESTS / "data"
HEALTHY = DATA / "candidates" / "healthy_native_softmax"
EVOLVE = [sys.executable, "-m", "hipevolve"]


def evolve(*args: str | Path, cwd: Path | None = None, env: dict | None = None):
    env = {**os.environ, "COLUMNS": "80", **(env or {})}
    return subprocess.run([*EVOLVE, *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)  # fmt: skip


def on_a_terminal(*args: str, columns: int = 80, stderr: bool = False) -> str:
    """What `evolve ARGS` prints on a real terminal `columns` wide (stdout; with `stderr`, both)."""
    parent, child = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm", "NO_COLOR": "1"}
    proc = subprocess.Popen([*EVOLVE, *args], stdout=child,
                            stderr=child if stderr else subprocess.DEVNULL, env=env)  # fmt: skip
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(parent, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(parent)
    return b"".join(chunks).decode(errors="replace")


def one_line_error(out: subprocess.CompletedProcess, *needles: str) -> str:
    assert out.returncode == 2, out.stdout + out.stderr
    line = out.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, out.stderr
    for needle in needles:
        assert needle in line, line
    return line


def read_only(folder: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """Runs argv with `folder` read-only (its permission bits restored after)."""
    env = {**os.environ, "COLUMNS": "80"}
    if os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("running as root without unshare: no way to make a folder read-only")
        script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
        argv = ["unshare", "-m", "sh", "-c", script, str(folder), *argv]
        return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    folder.chmod(0o555)
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    finally:
        folder.chmod(0o755)


# ----------------------------------------------------------------------------- output


def test_tasks_list_is_one_line_per_task_on_an_80_column_terminal():
    screen = [ln for ln in on_a_terminal("tasks", "list").splitlines() if ln.strip()]
    listed = json.loads(evolve("tasks", "list", "--json").stdout)
    assert len(screen) == 1 + len(listed), screen  # a header, then one line per task
    assert all(len(ln.rstrip()) <= 80 for ln in screen), [ln for ln in screen if len(ln) > 80]
    assert {ln.split()[0] for ln in screen[1:]} == {t["name"] for t in listed}


def test_tasks_list_in_a_pipe_is_one_whole_line_per_task():
    out = evolve("tasks", "list")
    lines = out.stdout.splitlines()
    listed = json.loads(evolve("tasks", "list", "--json").stdout)
    assert len(lines) == 1 + len(listed)
    for task in listed:  # descriptions whole, not cut at 80 columns, for grep
        assert any(ln.startswith(task["name"] + " ") and ln.endswith(task["description"])
                   for ln in lines), task["name"]  # fmt: skip


def test_tasks_show_keeps_every_reference_line_whole_in_a_pipe_and_on_a_terminal():
    reference = Path(json.loads(evolve("tasks", "show", "softmax", "--json").stdout)["reference"])
    long_lines = [ln for ln in reference.read_text().splitlines() if len(ln) > 70]
    assert long_lines, "the softmax reference has no long line to check"
    piped = evolve("tasks", "show", "softmax", "--full").stdout.splitlines()
    for line in long_lines:
        assert line in piped
    screen = on_a_terminal("tasks", "show", "softmax", "--full")
    flat = " ".join(screen.split())  # wrapped lines joined: every word is still there
    for line in long_lines:
        assert " ".join(line.split()) in flat or all(w in flat for w in line.split())


def test_json_of_tasks_show_and_doctor_parse_and_say_what_the_text_says():
    shown = json.loads(evolve("tasks", "show", "softmax", "--json").stdout)
    assert shown["name"] == "softmax" and "class Model" in shown["reference_source"]
    assert {c["name"] for c in shown["cases"]} >= {"small", "attn_scores_4k"}
    out = evolve("doctor", "--json")
    doctor = json.loads(out.stdout)
    assert {c["name"] for c in doctor["checks"]} >= {"Python", "GPU", "nvcc (cuda backend)"}
    assert out.returncode == (0 if doctor["usable"] else 1)


def test_doctor_does_not_call_nvcc_usable_beside_a_torch_without_cuda():
    import torch

    from hipevolve.verifier.build.nvidia import find_nvcc

    if find_nvcc() is None or torch.version.cuda is not None:
        pytest.skip("needs nvcc beside a torch without CUDA (as on this CPU-only machine)")
    checks = {c["name"]: c for c in json.loads(evolve("doctor", "--json").stdout)["checks"]}
    nvcc = checks["nvcc (cuda backend)"]
    assert not nvcc["ok"] and "not a CUDA build" in nvcc["detail"] and nvcc["fix"]


def test_version_prints_the_package_version():
    from hipevolve import __version__

    out = evolve("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"hipevolve {__version__}"


def test_every_command_s_help_summary_is_one_paragraph_without_hard_line_breaks():
    from hipevolve.app.cli import app

    def walk(command: click.Command, name: str):
        yield name, command
        for sub_name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, f"{name} {sub_name}")

    root = typer.main.get_command(app)
    for name, command in walk(root, "evolve"):
        if name == "evolve":
            continue
        first = (command.help or "").split("\n\n")[0]
        assert "\n" not in first.strip(), f"`{name} --help` breaks its summary: {first!r}"


@pytest.mark.parametrize("args, step", [
    (("doctor",), "doctor: checking"),
    (("tasks", "check", "softmax"), "tasks check: softmax small"),
])  # fmt: skip
def test_slow_steps_show_progress_on_a_terminal_and_nothing_extra_in_a_pipe(args, step):
    assert step in on_a_terminal(*args, stderr=True)
    piped = evolve(*args)
    assert step not in piped.stdout + piped.stderr


def test_tasks_check_prints_each_reference_run_as_a_line():
    out = evolve("tasks", "check", "softmax", "gelu")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [ln.split()[:3] for ln in lines[:2]] == [["ok", "softmax", "small:"],
                                                    ["ok", "gelu", "small:"]]  # fmt: skip
    assert lines[-1] == "2 of 2 reference runs ok"


def test_setup_sh_refuses_an_unknown_option_in_one_line_before_installing_anything():
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(["bash", str(root / "scripts" / "setup.sh"), "--isolate"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip() == "setup.sh: unknown option --isolate (use --dev, --isolated)"


def _apt_get_under_a_held_lock(tmp_path: Path, hold_s: float, wait_s: int):
    """scripts/apt_get.sh running `apt-get update` on a private apt state (no sources: nothing
    is fetched) whose package lists' lock this process holds (apt's fcntl lock) for hold_s."""
    import fcntl
    import threading
    import time

    if shutil.which("apt-get") is None:
        pytest.skip("no apt-get here")
    for sub in ("lists/partial", "cache/archives/partial", "parts"):
        (tmp_path / sub).mkdir(parents=True)
    lock = os.open(tmp_path / "lists" / "lock", os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(lock, fcntl.LOCK_EX)
    if hold_s < float("inf"):
        threading.Timer(hold_s, os.close, [lock]).start()
    root = Path(__file__).resolve().parent.parent
    argv = ["bash", str(root / "scripts" / "apt_get.sh"), "-o", f"Dir::State::Lists={tmp_path}/lists",
            "-o", f"Dir::Cache={tmp_path}/cache", "-o", "Dir::Etc::SourceList=/dev/null",
            "-o", f"Dir::Etc::SourceParts={tmp_path}/parts", "update", "-qq"]  # fmt: skip
    start = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "APT_LOCK_WAIT_S": str(wait_s)})  # fmt: skip
    finally:
        if hold_s == float("inf"):
            os.close(lock)
    return done, time.monotonic() - start


def test_setup_s_apt_get_waits_for_another_apt_to_release_its_lock(tmp_path):
    done, took = _apt_get_under_a_held_lock(tmp_path, hold_s=3.0, wait_s=60)
    assert done.returncode == 0, done.stderr
    assert took >= 3.0
    said = done.stderr.strip()
    assert "\n" not in said and "Could not get lock" in said and "waiting up to 60 s" in said


def test_setup_s_apt_get_gives_up_with_apt_s_own_error_after_its_wait(tmp_path):
    done, took = _apt_get_under_a_held_lock(tmp_path, hold_s=float("inf"), wait_s=3)
    assert done.returncode != 0 and 3.0 <= took < 60
    assert "waiting up to 3 s" in done.stderr and "E: Unable to lock directory" in done.stderr


def test_setup_runs_every_apt_get_through_the_waiting_wrapper():
    import re

    root = Path(__file__).resolve().parent.parent
    for script in ("setup.sh", "install_amd_toolchain.sh"):
        text = (root / "scripts" / script).read_text()
        assert re.search(r"(\$sudo_cmd|as_root) bash (scripts/apt_get\.sh|\"\$APT_GET\")", text)
        assert not re.search(r"(\$sudo_cmd|as_root) apt-get\b", text), script


def test_ci_runs_the_readme_s_test_command_and_it_shows_progress():
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    command = next(ln.split("&& ", 1)[1] for ln in readme.splitlines()
                   if ln.strip().startswith("bash scripts/setup.sh --dev &&"))  # fmt: skip
    assert "console_output_style=count" in command
    assert f"{command} || status=$?" in (root / ".ci" / "run").read_text()


# ----------------------------------------------------------------------------- one-line errors


@pytest.mark.parametrize(
    "args",
    [
        ("export", "--task", "softmax", "--out", "{file}"),
        ("export", "--dataset", "{file}"),
        ("export", "--task", "softmax", "--out", "{file}/sub"),
        ("export", "--dataset", "/proc/hipevolve-no/ds"),
        ("report", "1", "--out", "{file}/report.html"),
        ("report", "1", "--out", "/proc/hipevolve-no/report.html"),
        ("tasks", "generate", "--n", "1", "--out", "{file}"),
        ("tasks", "generate", "--n", "1", "--out", "/proc/hipevolve-no/tasks"),
    ],
)
def test_an_output_that_cannot_be_written_is_one_line_naming_the_flag(tmp_path, args):
    file = tmp_path / "taken.txt"
    file.write_text("mine\n")
    with Archive.open(tmp_path / "a.db") as archive:
        archive.start_run("softmax", {}, seed=0, budget=1)
    argv = [a.replace("{file}", str(file)) for a in args]
    out = evolve(*argv, "--archive", tmp_path / "a.db") if argv[0] != "tasks" else evolve(*argv)
    flag = "--dataset" if "--dataset" in argv else "--out"
    one_line_error(out, flag)
    assert file.read_text() == "mine\n"


def test_a_valid_archive_in_a_read_only_folder_opens_read_only_not_as_corrupt(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    with Archive.open(folder / "runs.db") as archive:
        run = archive.start_run("softmax", {}, seed=0, budget=4)
        archive.finish_run(run)
    code = ("import sys; from pathlib import Path; from hipevolve.archive.store import Archive\n"
            "with Archive.open(Path(sys.argv[1]), create=False, read_only=True) as a:\n"
            "    print([(r.id, r.task) for r in a.runs()])\n")  # fmt: skip
    out = read_only(folder, [sys.executable, "-c", code, str(folder / "runs.db")])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[(1, 'softmax')]"
    report = read_only(folder, [*EVOLVE, "report", "1", "--archive", str(folder / "runs.db"),
                                "--out", str(tmp_path / "r.html")])  # fmt: skip
    assert "corrupt" not in report.stderr and "Traceback" not in report.stderr, report.stderr


def test_the_main_job_with_a_new_archive_in_a_read_only_folder_is_one_line(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    out = read_only(folder, [*EVOLVE, "--task", "softmax", "--budget", "2", "--archive",
                             str(folder / "new.db")])  # fmt: skip
    one_line_error(out, "cannot write in", "--archive")
    assert not (folder / "new.db").exists()


def test_a_missing_archive_to_resume_is_named_before_any_model_or_gpu(tmp_path):
    out = evolve("--task", "softmax", "--resume", "1", "--archive", tmp_path / "none.db",
                 "--model", "openai/gpt-4.1", env={"OPENAI_API_KEY": ""})  # fmt: skip
    one_line_error(out, "no archive at", "none.db")


def test_resuming_with_a_budget_below_what_the_run_spent_is_refused(tmp_path):
    """A real run (the evolve command line on the stand-in evaluator) spends 6 evaluations; a
    resume with --budget 3 is refused in one line, and one with --budget 8 goes on to 8."""
    from golden_runs import CHILD
    from standin import TASK_NAME, write_task_folder

    tasks, db = write_task_folder(tmp_path), tmp_path / "runs.db"

    def run(*flags: str) -> subprocess.CompletedProcess:
        argv = [sys.executable, "-c", CHILD, str(TESTS), str(tmp_path / "log"), "--task",
                TASK_NAME, "--tasks-dir", str(tasks), "--archive", str(db), *flags]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)

    first = run("--budget", "6", "--seed", "1")
    assert first.returncode == 0, first.stdout + first.stderr
    with Archive.open(db, read_only=True) as archive:
        assert archive.count_evaluations(1) == 6
    one_line_error(run("--resume", "1", "--budget", "3"), "--budget 3 is below the 6 evaluations")
    more = run("--resume", "1", "--budget", "8")
    assert more.returncode == 0, more.stdout + more.stderr
    with Archive.open(db, read_only=True) as archive:
        assert archive.count_evaluations(1) == 8


@pytest.mark.parametrize("flag,value", [("--token-budget", "-5"), ("--cost-budget", "-1")])
def test_a_negative_llm_budget_is_refused_in_one_line(tmp_path, flag, value):
    out = evolve("--task", "softmax", "--budget", "2", "--archive", tmp_path / "a.db", flag, value)
    one_line_error(out)
    assert not (tmp_path / "a.db").exists()


def test_a_model_without_its_key_is_refused_without_importing_litellm():
    code = ("import sys\nfrom hipevolve.agents.llm.preflight import check_model\n"
            "from hipevolve.core.errors import UserError\n"
            "try:\n    check_model('anthropic/claude-sonnet-4-5')\n"
            "except UserError as e:\n    print(e.line())\n"
            "print('litellm' in sys.modules)\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)  # fmt: skip
    first, imported = out.stdout.strip().splitlines()
    assert "needs ANTHROPIC_API_KEY" in first and imported == "False"


def test_a_misspelt_provider_is_answered_with_the_closest_one():
    from hipevolve.agents.llm.preflight import check_model

    with pytest.raises(UserError) as refused:
        check_model("antropic/claude-sonnet-4-5")
    assert "did you mean anthropic/claude-sonnet-4-5" in refused.value.line()


def test_a_missing_candidate_path_is_one_line(tmp_path):
    one_line_error(evolve("verify", tmp_path / "nope", "--task", "softmax"), "no such file")


def test_a_candidate_file_linking_out_of_its_folder_is_refused(tmp_path):
    folder = tmp_path / "cand"
    shutil.copytree(HEALTHY, folder)
    elsewhere = tmp_path / "elsewhere.hip"
    shutil.move(folder / "kernel.hip", elsewhere)
    (folder / "kernel.hip").symlink_to(elsewhere)
    with pytest.raises(UserError, match="outside the candidate folder"):
        load_candidate(folder)
    (folder / "kernel.hip").unlink()
    (folder / "kernel.hip").symlink_to("model.py")  # a link inside the folder is its own file
    assert load_candidate(folder).format == "native"


# ----------------------------------------------------------------------------- task folders


def test_one_malformed_task_file_is_a_warning_and_the_others_still_load(tmp_path):
    kb = DATA / "kernelbench"
    shutil.copy(kb / "malformed" / "no_get_inputs.py", tmp_path)
    shutil.copy(kb / "level_test" / "19_ReLU.py", tmp_path)
    out = evolve("tasks", "list", "--tasks-dir", tmp_path)
    assert out.returncode == 0, out.stderr
    assert "19_ReLU" in out.stdout
    warning = out.stderr.strip()
    assert "\n" not in warning and "no_get_inputs.py" in warning and "missing get_inputs" in warning


BROKEN = "class Model(:\n"  # a syntax error on line 1


def _one_warning_naming_the_broken_file(stderr: str) -> None:
    warnings = [ln for ln in stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1, stderr
    assert "broken.py" in warnings[0] and "not valid Python (line 1" in warnings[0]
    assert "Traceback" not in stderr


def test_a_file_with_a_syntax_error_stops_no_command_on_the_folder_s_other_tasks(tmp_path):
    """translate, verify and the search load a tasks folder as `tasks list` does: the broken
    file is one warning line, and the folder's other tasks (and the built-ins) still work."""
    kb = tmp_path / "kb"
    kb.mkdir()
    shutil.copy(DATA / "kernelbench" / "level_test" / "19_ReLU.py", kb)
    (kb / "broken.py").write_text(BROKEN)
    translated = evolve("translate", "19_ReLU", "--tasks-dir", kb, "--out", tmp_path / "relu")
    assert translated.returncode == 0, translated.stderr
    _one_warning_naming_the_broken_file(translated.stderr)
    verified = evolve("verify", HEALTHY, "--task", "softmax", "--tasks-dir", kb, "--backend",
                      "static")  # fmt: skip
    assert "compiled on softmax" in verified.stdout, verified.stdout + verified.stderr
    _one_warning_naming_the_broken_file(verified.stderr)
    from golden_runs import CHILD
    from standin import TASK_NAME, write_task_folder

    tasks = write_task_folder(tmp_path)
    (tasks / "broken.py").write_text(BROKEN)
    searched = subprocess.run([sys.executable, "-c", CHILD, str(TESTS), str(tmp_path / "log"),
                               "--task", TASK_NAME, "--tasks-dir", str(tasks), "--archive",
                               str(tmp_path / "runs.db"), "--budget", "2"],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert searched.returncode == 0, searched.stdout + searched.stderr
    _one_warning_naming_the_broken_file(searched.stderr)


@pytest.mark.parametrize("command", [("translate", "broken", "--out", "{tmp}/out"),
                                     ("verify", str(HEALTHY), "--task", "broken"),
                                     ("tasks", "show", "broken"),
                                     ("--task", "broken", "--budget", "1")])  # fmt: skip
def test_asking_for_the_broken_task_itself_is_one_line_naming_its_file_and_problem(
    tmp_path, command
):
    (tmp_path / "broken.py").write_text(BROKEN)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    line = one_line_error(evolve(*argv, "--tasks-dir", tmp_path, "--archive", tmp_path / "a.db")
                          if argv[0] == "--task" else evolve(*argv, "--tasks-dir", tmp_path),
                          "broken.py: not valid Python (line 1")  # fmt: skip
    assert "unknown task" not in line
    assert not (tmp_path / "out").exists()


def test_a_folder_of_folders_finds_its_tasks_recursively(tmp_path):
    kb = DATA / "kernelbench" / "level_test"
    for level, name in (("level1", "19_ReLU.py"), ("level2", "40_Conv_Scale_Add.py")):
        (tmp_path / "root" / level).mkdir(parents=True)
        shutil.copy(kb / name, tmp_path / "root" / level)
    listed = json.loads(evolve("tasks", "list", "--json", "--tasks-dir", tmp_path / "root").stdout)
    assert {"19_ReLU", "40_Conv_Scale_Add"} <= {t["name"] for t in listed}


def test_without_a_gpu_driver_the_search_is_refused_without_importing_torch_or_ray():
    from hipevolve.app.evaluator_choice import GPU_DEVICE_NODES

    if any(Path(n).exists() for n in GPU_DEVICE_NODES):
        pytest.skip("this machine has a GPU driver's device node")
    code = ("import sys\nfrom hipevolve.app.run_job import gpu_evaluator\n"
            "from hipevolve.core.config import load_settings\n"
            "from hipevolve.core.errors import UserError\n"
            "from hipevolve.problems import get_task\n"
            "for ray in (None, 'auto'):\n"
            "    settings = load_settings({'verifier': {'ray': ray}})\n"
            "    try:\n        gpu_evaluator(get_task('softmax'), settings, 'auto')\n"
            "    except UserError as e:\n        print(e.line())\n"
            "print('torch' in sys.modules, 'ray' in sys.modules)\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=env)  # fmt: skip
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3, out.stdout + out.stderr
    assert all(ln.startswith("no usable GPU here") for ln in lines[:2])
    if not Path("/tmp/ray/ray_current_cluster").exists():  # else --ray auto joins that cluster
        assert lines[2] == "False False"


def test_a_rejection_prints_its_reason_once(tmp_path):
    folder = tmp_path / "imports_time"
    shutil.copytree(HEALTHY, folder)
    model = folder / "model.py"
    model.write_text(model.read_text().replace("import torch\n", "import torch\nimport time\n", 1))
    out = evolve("verify", folder, "--task", "softmax", "--backend", "static")
    assert out.returncode == 1, out.stderr
    assert out.stdout.count("imports time") == 1, out.stdout
