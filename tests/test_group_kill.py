"""The judge's group kill (verifier/gpu/judge/channel.py) reaches only a group the judge leads.

A judge leads its process group (isolate.py starts it in a session of its own), so killing
every other process of the group kills what the candidate started and nothing else. A Channel
driven from a process that does not lead its group (a test, in the test runner's group) once
killed the runner's shell with it: CI ended with exit 137 in the middle of the suite. Here the
non-leader runs in a session of its own made for the test, beside a sibling and under a
leader, so a regression kills only those.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

# The session's leader: a sibling (sleep) in its group, then the process that drives a Channel.
LEADER = textwrap.dedent(
    """
    import subprocess, sys
    sibling = subprocess.Popen(["sleep", "60"])
    inner = subprocess.run([sys.executable, "-c", sys.argv[1], sys.argv[2]])
    alive = sibling.poll() is None
    sibling.kill()
    print(f"inner {inner.returncode} sibling {'alive' if alive else 'killed'}")
    """
)
# Not its group's leader: starts a sandbox process, kills it the way a stage's error does.
INNER = textwrap.dedent(
    """
    import os, sys
    from hipevolve.verifier.gpu.judge.channel import Channel, kill_group_except_self
    assert os.getpgid(0) != os.getpid(), "must not lead its group"
    assert kill_group_except_self() == []
    chan = Channel(sys.argv[1], "cpu")
    chan.kill()
    assert chan.proc.poll() is not None, "the channel's own sandbox survived"
    """
)


def test_a_channel_outside_a_judge_kills_its_sandbox_and_nothing_else_of_its_group(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", LEADER, INNER, str(tmp_path / "sandbox")],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,  # the group a regression would kill is this one
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "inner 0 sibling alive", done.stderr[-2000:]
