"""Token counts on a machine that cannot load cl100k_base (no cache tiktoken can read, no network:
the GPU machines) are an estimate, not a crash."""

from __future__ import annotations

import os
import subprocess
import sys

COUNT = (
    "from hipevolve.agents.llm.tokens import count_tokens\n"
    "print(count_tokens('__global__ void k(float* x) { x[threadIdx.x] = 0.0f; }' * 10))\n"
)


def _count(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", COUNT], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})  # fmt: skip


def test_without_a_readable_tokenizer_or_a_network_the_count_is_an_estimate(tmp_path):
    # an empty cache and a proxy nobody listens on: tiktoken's download really fails
    done = _count({"TIKTOKEN_CACHE_DIR": str(tmp_path), "HTTPS_PROXY": "http://127.0.0.1:9",
                   "HTTP_PROXY": "http://127.0.0.1:9"})  # fmt: skip
    assert done.returncode == 0, done.stderr
    text_bytes = len(b"__global__ void k(float* x) { x[threadIdx.x] = 0.0f; }") * 10
    assert int(done.stdout) == -(-text_bytes // 4)
    assert "token counts are estimates" in done.stderr


def test_with_litellms_copy_the_count_is_cl100k_base():
    done = _count({})
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 230 and "estimates" not in done.stderr  # cl100k_base's count
