"""bench/driver_calls.py: the ioctl tracer, on real processes (CPU only: a pipe's ioctls)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import driver_calls  # noqa: E402  (bench/ is a folder of scripts, not a package)

from hipevolve.verifier.isolate import judge_env  # noqa: E402

FIONREAD = "541b"
# Three ioctls, then a child that closes every descriptor past stderr as a sandbox does (zygote:
# closerange), opens a file (it gets the lowest free descriptor), and makes two more.
TRACED = r"""
import fcntl, os, sys, termios
r, w = os.pipe()
for _ in range(3):
    fcntl.ioctl(r, termios.FIONREAD, b"\0\0\0\0")
pid = os.fork()
if pid == 0:
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    r, w = os.pipe()
    for _ in range(2):
        fcntl.ioctl(r, termios.FIONREAD, b"\0\0\0\0")
    os._exit(0 if fd == 3 else 9)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""

needs_cc = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler"
)


@needs_cc
def test_every_ioctl_of_the_command_and_its_forks_is_traced_and_no_other_file_is_written(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "opened-after-closerange"
    log = tmp_path / "trace.log"
    code, pid = driver_calls.trace([sys.executable, "-c", TRACED, str(victim)], log)
    assert code == 0  # the child's file took descriptor 3: the tracer's sits out of reach
    t = driver_calls.load(log)
    assert t.command_pid == pid
    child = next(p for p, parent in t.forks.items() if parent == pid)
    counted = {p: sum(c[3] == FIONREAD for c in t.calls.get(p, [])) for p in (pid, child)}
    assert counted == {pid: 3, child: 2}
    assert victim.read_bytes() == b""  # never written into a descriptor it does not own
    summary = driver_calls.summarise(t)
    assert summary.roles["command"].count >= 5
    assert any(top.key == f"command U {FIONREAD} 0" and top.count == 5 for top in summary.top)


def test_sandboxes_are_split_at_their_longest_pause_and_processes_named_by_their_command(
    tmp_path: Path,
) -> None:
    ms = 1_000_000
    log = tmp_path / "trace.log"
    log.write_text(
        "\n".join(
            [
                "E 10 1 0 python|-m|hipevolve.verifier.gpu.judge.worker|--device|cuda:0",
                "E 11 10 0 python|-m|hipevolve.verifier.gpu.sandbox.zygote|5",
                "F 12 11 0",  # the zygote's child, which forks the sandbox
                "F 13 12 0",
                "I 10 0 2000000 F 2a 20801303",  # the judge
                *(f"I 13 {t * ms} {ms} F 2b 40" for t in (0, 2, 4)),  # context, kernels
                *(f"I 13 {t * ms} {3 * ms} U 21 0" for t in (500, 504)),  # the job, later
                "I 13 999",  # a line cut short by a kill
                "C 10",
            ]
        )
    )
    t = driver_calls.load(log)
    assert [driver_calls.role(p, t) for p in (10, 11, 13)] == ["judge", "zygote", "sandbox"]
    s = driver_calls.summarise(t, evaluations=1)
    assert s.roles["sandbox"].count == 5 and s.roles["judge"].ms == pytest.approx(2.0)
    assert (s.sandboxes, s.sandbox_start.count, s.sandbox_job.count) == (1, 3, 2)
    assert s.sandbox_job.ms == pytest.approx(6.0)
    assert s.top[0].key == "sandbox U 21 0" and s.top[0].us_per_call == pytest.approx(3000)
    later = driver_calls.summarise(t, evaluations=1, since_s=0.1)  # the job's two calls only
    assert later.roles["sandbox"].count == 2 and "judge" not in later.roles


def test_a_trace_that_does_not_exist_is_one_line_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="is not LOG:EVALUATIONS of a saved trace"):
        driver_calls.main(["--compare", f"{tmp_path / 'missing.log'}:48"])


@needs_cc
def test_a_command_that_cannot_run_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="cannot run 'no-such-command'"):
        driver_calls.main(["--log", str(tmp_path / "t.log"), "--", "no-such-command"])


def test_judges_and_their_sandboxes_inherit_the_tracer_from_the_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LD_PRELOAD", "/tmp/driver_calls.so")
    monkeypatch.setenv(driver_calls.FIFO_ENV, "/tmp/trace")
    env = judge_env(tmp_path)
    assert env["LD_PRELOAD"] == "/tmp/driver_calls.so"
    assert env[driver_calls.FIFO_ENV] == "/tmp/trace"
