"""The scripted model server of bench/llm_loop.py: an OpenAI-compatible server on 127.0.0.1
that answers each role with a realistic latency (times a scale) and a reply a model could write,
and counts every request's tokens (cl100k_base, or the estimate where it cannot load).

It caches prompts as a provider that caches on request does (Anthropic's rules): a request's
prefix up to a cache marker (`cache_control` on a content block) is written to the cache when
it is at least CACHE_MIN_TOKENS long; a later request whose prefix up to one of its markers is in
the cache reads it. `usage` says so as litellm reads it from such a provider: prompt_tokens all
of the input, prompt_tokens_details.cached_tokens the tokens read, cache_creation_input_tokens
those written; litellm prices the three at the model's rates.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hipevolve.app.prompt_show import count_tokens

LATENCY_S = {"profiler_reader": 5.0, "optimizer": 10.0, "mutator": 25.0, "repairer": 25.0,
             "translator": 25.0, "auditor": 8.0}  # fmt: skip
CACHE_MIN_TOKENS = 1024  # Sonnet's smallest cached prefix
_DEFINE = re.compile(r"^// @tunable (\w+): (.+)$\n(?:^//.*$\n)*^#define \1 (\S+)", re.M)


@dataclass
class Server:
    """Answers by role, with a latency; counts every request's tokens."""

    scale: float
    repeat_parent: bool = False
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    tokens: list[tuple[str, int, int]] = field(default_factory=list)  # role, in, out
    written: set = field(default_factory=set)  # configurations the mutator has written
    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0  # requests being answered now
    cached: set = field(default_factory=set)  # hashes of the prefixes in the cache
    # role, tokens read from the cache, tokens written to it (per request)
    caching: list[tuple[str, int, int]] = field(default_factory=list)

    def cache(self, messages: list[dict]) -> tuple[int, int, int]:
        """(input tokens, read from the cache, written to it) of a request, and its marked
        prefixes now in the cache."""
        blocks = [(text, marked) for m in messages for text, marked in _blocks(m)]
        total = sum(count_tokens(t) for t, _ in blocks)
        prefixes, text, size = [], "", 0
        for block, marked in blocks:
            text, size = text + block, size + count_tokens(block)
            if marked and size >= CACHE_MIN_TOKENS:
                prefixes.append((hash(text), size))
        with self.lock:
            read = max((n for h, n in prefixes if h in self.cached), default=0)
            last = prefixes[-1][1] if prefixes else 0
            self.cached.update(h for h, _ in prefixes)
        return total, read, max(0, last - read)

    def reply(self, messages: list[dict]) -> tuple[str, str]:
        prompt = "".join(t for t, _ in _blocks(messages[-1]))
        found = _ROLE.search(prompt)
        role = found.group(1) if found else "unknown"
        if role == "repairer" and len(messages) > 2:  # a follow-up turn: the conversation's code
            prompt = conversation_code(messages)
        if role == "profiler_reader":
            text = json.dumps({"bottleneck": "latency", "summary": "few waves in flight per CU."})
        elif role == "optimizer":
            text = json.dumps({"idea": "try another tile configuration", "transform": None})
        elif role == "auditor":
            text = json.dumps({"shortcut": False, "reasons": "nothing skipped"})
        else:
            text = self._edit(prompt)
        return role, text

    def _edit(self, prompt: str) -> str:
        """One tunable of the parent moved to a value that makes a configuration this server
        has not written before (a model that remembers its attempts); the parent's own line
        when it only repeats."""
        found = _DEFINE.findall(prompt)
        if self.repeat_parent or not found:
            name, values, current = found[0] if found else ("X", "1", "1")
            line = f"#define {name} {current}"
            return f"kernel.hip\n<<<<<<< SEARCH\n{line}\n=======\n{line}\n>>>>>>> REPLACE\n"
        parent = {n: c for n, _, c in found}
        moves = [(n, v.strip()) for n, vs, c in found for v in vs.split(",") if v.strip() != c]
        with self.lock:
            self.rng.shuffle(moves)
            fresh = [(n, v) for n, v in moves
                     if tuple(sorted({**parent, n: v}.items())) not in self.written]  # fmt: skip
            name, value = (fresh or moves)[0]
            self.written.add(tuple(sorted({**parent, name: value}.items())))
        return (f"kernel.hip\n<<<<<<< SEARCH\n#define {name} {parent[name]}\n=======\n"
                f"#define {name} {value}\n>>>>>>> REPLACE\n")  # fmt: skip

    def serve(self) -> ThreadingHTTPServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                role, text = owner.reply(body["messages"])
                tokens_in, read, written = owner.cache(body["messages"])
                tokens_out = count_tokens(text)
                with owner.lock:
                    owner.tokens.append((role, tokens_in, tokens_out))
                    owner.caching.append((role, read, written))
                    owner.in_flight += 1
                time.sleep(LATENCY_S.get(role, 5.0) * owner.scale)
                with owner.lock:
                    owner.in_flight -= 1
                data = json.dumps({
                    "id": "bench", "object": "chat.completion", "created": 0, "model": "bench",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                              "total_tokens": tokens_in + tokens_out,
                              "prompt_tokens_details": {"cached_tokens": read},
                              "cache_read_input_tokens": read,
                              "cache_creation_input_tokens": written},
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # quiet
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        return httpd


_ROLE = re.compile(r"^# Role: (\w+)$", re.M)


def _blocks(message: dict) -> list[tuple[str, bool]]:
    """A message's text blocks, each with whether a cache marker ends it."""
    content = message.get("content")
    if isinstance(content, str):
        return [(content, False)]
    return [(b.get("text", ""), "cache_control" in b) for b in content or []
            if isinstance(b, dict)]  # fmt: skip


_EDIT = re.compile(r"^#define (\w+) (\S+)\n=======\n#define \1 (\S+)$", re.M)


def conversation_code(messages: list[dict]) -> str:
    """The tunables of the code a repair turn is about: the first prompt's parent with this
    server's own earlier edits (its replies in the conversation) applied, as tunable lines."""
    texts = [("".join(t for t, _ in _blocks(m)), m["role"]) for m in messages]
    first = next((t for t, role in texts if role == "user" and _DEFINE.search(t)), "")
    values = {n: (vs, c) for n, vs, c in _DEFINE.findall(first)}
    for text, role in texts:
        if role == "assistant":
            for name, _, new in _EDIT.findall(text):
                if name in values:
                    values[name] = (values[name][0], new)
    return "".join(f"// @tunable {n}: {vs}\n#define {n} {c}\n" for n, (vs, c) in values.items())
