"""`evolve tasks generate --model M`: the task_generator agent writes tasks over real HTTP (the
scripted server replaying tests/transcripts/tasks_generate.json), and they go through the
synthetic generator's own verification and WL-hash dedupe, in a child process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agents_support import transcript
from llm_server import ScriptedLLMServer, Step

from hipevolve.agents.roles.task_admission import AdmissionWorker
from hipevolve.agents.roles.task_generator import CALL_LOG
from hipevolve.problems import discover
from hipevolve.problems.synthetic.generate import KeptTask, Rejection
from hipevolve.problems.synthetic.render import Candidate

REPLIES = "tasks_generate"


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HIPEVOLVE_MODEL")}  # fmt: skip


def generate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hipevolve", "tasks", "generate", *args],
        capture_output=True, text=True, timeout=300, env=clean_env(),
    )  # fmt: skip


def test_model_written_tasks_are_verified_deduplicated_and_every_call_logged(tmp_path):
    out = tmp_path / "tasks"
    steps = [Step.ok(s["reply"], expect="# Role: task_generator") for s in transcript(REPLIES)]
    with ScriptedLLMServer(steps) as server:
        done = generate("--n", "6", "--seed", "0", "--from", "softmax", "--from", "rmsnorm",
                        "--out", str(out), "--model", "openai/test-model",
                        "--api-base", server.api_base)  # fmt: skip
        sent = server.count
    assert done.returncode == 0, done.stdout + done.stderr
    assert "kept 3, rejected 3 (mutate 1/2, compose 1/2, constrain 1/2)" in done.stdout
    assert sent == 6
    lines = [json.loads(line) for line in (out / CALL_LOG).read_text().splitlines()]
    assert [entry["k"] for entry in lines] == list(range(6))  # every call, in order
    assert all(e["call"]["status"] == "ok" and e["call"]["model"] == "openai/test-model"
               and e["call"]["tokens_in"] == 11 for e in lines)  # fmt: skip
    assert [e["source"] for e in lines] == ["rmsnorm", "softmax"] * 3
    reasons = {e["k"]: e["outcome"].get("rejected", {}).get("reason") for e in lines}
    assert reasons[2] == "duplicate of softmax (same fx graph WL hash and shapes)"
    assert reasons[3] == "constant: output 0 has one value in every element"
    assert reasons[4].startswith("reply malformed_json: the metadata is not valid JSON")
    kept = ["llm0_000_scaled_softmax", "llm0_001_add_layernorm", "llm0_005_gelu_gate_split"]
    assert sorted(p.name for p in out.iterdir()) == sorted([*kept, CALL_LOG])  # no leftovers
    for name in kept:
        assert f"kept {name}" in done.stdout
    tasks = discover([out])
    for name in kept:  # written like a synthetic task: loads, small case, rooflines measured
        task = tasks[name]
        assert task.small_cases and task.timed_cases
        assert all(c.roofline is not None for c in task.cases)
        assert task.reference.read_text().startswith("# Written by openai/test-model")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "nosuchprovider/some-model"], "unknown model 'nosuchprovider/some-model'"),
        (
            ["--model", "openai/local", "--api-base", "http://127.0.0.1:{port}/v1"],
            "cannot reach the model server at http://127.0.0.1:{port}/v1: connection refused",
        ),
        (["--api-base", "http://127.0.0.1:8000/v1"], "--api-base needs --model"),
    ],
)
def test_bad_model_settings_are_one_line_before_the_output_folder_exists(tmp_path, args, says):
    port = str(closed_port())
    out = tmp_path / "tasks"
    done = generate("--n", "2", "--out", str(out), *(a.replace("{port}", port) for a in args))
    line = done.stderr.strip()
    assert done.returncode == 2, done.stdout + done.stderr
    assert line.startswith("error: ") and "\n" not in line and "Traceback" not in done.stderr
    assert says.replace("{port}", port) in line
    assert not out.exists()


def draft(name: str, reference: str) -> Candidate:
    return Candidate(
        name=name, mode="mutate", description="a model's task", family="elementwise",
        source=reference, tolerance={"kind": "allclose", "atol": 1e-5, "rtol": 1e-5},
        cases=[{"name": "small", "init": {}, "inputs": {"n": 64}, "small": True, "timed": False},
               {"name": "big", "init": {}, "inputs": {"n": 1 << 20}, "timed": True}],
    )  # fmt: skip


TANH = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 2.0


def get_inputs(n: int = 1024):
    return [torch.randn(n)]


def get_init_inputs():
    return []
"""


def test_a_hanging_reference_is_killed_and_the_next_task_is_still_admitted(tmp_path):
    hangs = "while True:\n    pass\n" + TANH
    # The 4 s bound is the hung admission's alone: a fresh worker's first admission (torch.fx's
    # first trace, torch's first ops) may take longer than that on a loaded 2-core machine.
    with AdmissionWorker(tmp_path, timeout_s=120.0) as worker:
        worker.admit(draft("warm", TANH.replace("tanh", "sigmoid")), {})  # started, torch imported
        first = worker._proc.pid  # type: ignore[union-attr]
        worker.timeout_s = 4.0
        start = time.monotonic()
        hung = worker.admit(draft("hangs", hangs), {})
        took = time.monotonic() - start
        worker.timeout_s = 120.0
        with pytest.raises(ProcessLookupError):
            os.killpg(first, 0)  # the hung child and its group are gone
        seen: dict[str, str] = {}
        kept = worker.admit(draft("tanh2", TANH), seen)
        listed = worker.existing_hashes()  # what a second run dedupes against, traced there
    assert isinstance(hung, Rejection) and hung.reason.startswith("slow: admission ran past 4 s")
    assert 4.0 <= took < 4.0 + 30.0  # killed at its bound, not left to run (slack: a busy machine)
    assert isinstance(kept, KeptTask) and seen == {kept.graph_hash: "tanh2"}
    assert listed[kept.graph_hash] == "tanh2" and set(listed.values()) == {"warm", "tanh2"}
    assert not (tmp_path / ".staging" / "hangs").exists()


def test_a_model_reference_cannot_read_api_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    reads = "import os\nKEY = os.environ['OPENAI_API_KEY']\n" + TANH
    with AdmissionWorker(tmp_path) as worker:
        outcome = worker.admit(draft("reads_key", reads), {})
    assert isinstance(outcome, Rejection)
    assert "KeyError" in outcome.reason and "sk-secret" not in outcome.reason


SNAPSHOT = Path(__file__).resolve().parent / "snapshots" / "task_generator_model.txt"


def test_task_generator_prompt_matches_its_snapshot():
    from hipevolve.agents.roles.task_generator import prompt
    from hipevolve.problems import get_task

    text = prompt(get_task("softmax"), "compose", ["softmax", "rmsnorm"])
    if os.environ.get("HIPEVOLVE_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(text)
    assert text == SNAPSHOT.read_text(), f"task_generator prompt differs from {SNAPSHOT}"
    assert text.startswith("# Role: task_generator\n") and "Mode: compose." in text


GOOD = transcript(REPLIES)[0]["reply"]


@pytest.mark.parametrize(
    ("reply", "error_class"),
    [
        ("  \n", "empty_reply"),
        (GOOD.split("```python")[0], "no_reference_block"),
        (GOOD + "\n```python\nprint(1)\n```\n", "several_reference_blocks"),
        ("```python\n" + TANH + "```\n", "no_metadata"),
        (GOOD.replace('"small": true', '"small": false'), "invalid_metadata"),
        (GOOD.replace('"name": "scaled_softmax"', '"name": "Scaled Softmax"'), "invalid_metadata"),
    ],
)
def test_malformed_task_replies_are_named(reply, error_class):
    from hipevolve.agents.llm.task_reply import parse_task_reply

    assert parse_task_reply(GOOD).ok
    parsed = parse_task_reply(reply)
    assert not parsed.ok and parsed.error_class == error_class, parsed.message
