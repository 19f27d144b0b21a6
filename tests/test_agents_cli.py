"""`evolve --model M [--api-base URL]`: bad model settings are one line before the run starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest


def evolve(tmp_path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HIPEVOLVE_MODEL")}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "hipevolve", "--task", "softmax", "--budget", "2",
         "--archive", str(tmp_path / "a.db"), *args],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,  # litellm: slow on a busy machine
    )  # fmt: skip


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "nosuchprovider/some-model"], "unknown model 'nosuchprovider/some-model'"),
        (["--model", "anthropic/claude-sonnet-4-5"], "needs ANTHROPIC_API_KEY"),
        (
            ["--model", "openai/local", "--api-base", "http://127.0.0.1:{port}/v1"],
            "cannot reach the model server at http://127.0.0.1:{port}/v1: connection refused",
        ),
        (["--api-base", "http://127.0.0.1:8000/v1"], "--api-base needs --model"),
    ],
)
def test_bad_model_settings_are_one_line_naming_which_before_the_archive_exists(
    tmp_path, args, says
):
    port = str(closed_port())
    out = evolve(tmp_path, *(a.replace("{port}", port) for a in args))
    line = out.stderr.strip()
    assert out.returncode == 2, out.stdout + out.stderr
    assert line.startswith("error: ") and "\n" not in line and "Traceback" not in out.stderr
    assert says.replace("{port}", port) in line
    assert not (tmp_path / "a.db").exists()
