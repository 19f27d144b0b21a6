"""The judge's zygote (verifier/gpu/sandbox/zygote.py) forks each sandbox (and each recorder) with
torch imported. The sandbox it forks is a new process, a child of the judge in the judge's process
group, with the judge's environment and its own folder; a candidate cannot reach the zygote; a dead
zygote costs only speed (the judge spawns its sandboxes again)."""

from __future__ import annotations

import ast
import os
import signal
import sys
from pathlib import Path

from hipevolve.core.evaluation import Status
from hipevolve.verifier.gpu import confine
from hipevolve.verifier.isolate import StandbyPool, run_worker

sys.path.insert(0, str(Path(__file__).parent / "hostile"))
from test_hostile import HEALTHY, HERE, cpu_job  # noqa: E402

WHERE_AM_I = """
import ctypes, os
import torch.nn as nn

with open("/proc/self/stat", "rb") as f:
    PPID, PGID = (int(x) for x in f.read().rsplit(b")", 1)[1].split()[1:3])
FACTS = dict(
    pid=os.getpid(),
    ppid=PPID,
    pgid=PGID,
    home_is_cwd=os.environ.get("HOME") == os.getcwd(),
    tmp_in_cwd=os.environ.get("TMPDIR", "").startswith(os.getcwd()),
    dumpable=ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),  # PR_GET_DUMPABLE
    fds=sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
)

class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError(repr(FACTS))
"""


def zygote_of(judge_pid: int) -> int:
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if b"hipevolve.verifier.gpu.sandbox.zygote" in cmdline and ppid == judge_pid:
            return int(pid)
    raise AssertionError(f"judge {judge_pid} has no zygote")


def test_sandbox_is_a_fresh_fork_child_of_the_judge_in_its_group_with_its_own_folder(
    tmp_path: Path,
) -> None:
    model = tmp_path / "where_am_i.py"
    model.write_text(WHERE_AM_I)
    result = run_worker(cpu_job(model))
    assert result.status is Status.runtime_error and "{" in result.message, result.message
    facts = ast.literal_eval(
        result.message[result.message.index("{") : result.message.rindex("}") + 1]
    )
    # A KernelBench file's Python runs only in its recorder (record_kb.py), forked by the same
    # zygote as a sandbox: the facts are that process's, the one the judge reports
    assert facts["pid"] == result.sandbox_pid
    assert facts["ppid"] == result.judge_pid  # re-parented to the judge, a subreaper
    assert facts["pgid"] == result.judge_pid  # the controller's group kill reaches it
    assert facts["home_is_cwd"] and facts["tmp_in_cwd"]
    assert facts["dumpable"] == 1  # as a spawned sandbox is; the zygote is not
    assert facts["fds"][:4] == [0, 1, 2, 3]


def test_a_candidate_cannot_reach_the_zygote_and_the_next_sandbox_is_forked_by_it() -> None:
    with StandbyPool(size=0, device="cpu") as pool:  # no spare judge: the same one serves again
        attack = run_worker(cpu_job(HERE / "zygote_takeover.py"), pool.take(), pool=pool)
        if confine.landlock_abi() < 6 and attack.message.startswith("RuntimeError: reached="):
            # Landlock refuses signals out of the sandbox from ABI 6 on; before it the zygote
            # can be killed, which costs speed only (the next test).
            assert ast.literal_eval(attack.message.split("=")[1].split(" (stage")[0]) == ["kill"]
            return
        assert attack.status is Status.ok and attack.reusable, attack.message
        healthy = run_worker(cpu_job(HEALTHY), pool.take(), pool=pool)
        assert healthy.status is Status.ok, healthy.message
        assert healthy.judge_pid == attack.judge_pid
        assert "sandbox:forked" in healthy.flags  # the zygote lives


def test_a_zygote_killed_from_outside_costs_speed_not_results() -> None:
    with StandbyPool(size=0, device="cpu") as pool:
        first = run_worker(cpu_job(HEALTHY), pool.take(), pool=pool)
        assert first.status is Status.ok and first.reusable, first.message
        os.kill(zygote_of(first.judge_pid), signal.SIGKILL)
        # The judge forks the second job's sandbox after its first answer, so before, during or
        # after the kill (during: a sandbox the dying zygote forked holds the old message pipe,
        # and the spawned one must not hear it); the third job's sandbox is spawned.
        flags = []
        for _ in range(2):
            result = run_worker(cpu_job(HEALTHY), pool.take(), pool=pool)
            assert result.status is Status.ok, result.message
            assert result.judge_pid == first.judge_pid
            flags.append([f.split(":")[0 if f.startswith("zygote") else 1] for f in result.flags
                          if f.startswith(("sandbox:", "zygote failed"))])  # fmt: skip
        # A spawned one says why: the zygote's socket had closed.
        spawned = ["spawned", "zygote failed"]
        assert flags[0] in (["forked"], spawned) and flags[1] == spawned, flags
