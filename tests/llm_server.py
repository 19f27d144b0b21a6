"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for testing the LLM client.

Each POST to /v1/chat/completions (or /chat/completions) takes the next Step of the script and
answers as it says: a completion, or one of the faults a real provider shows (429 with
Retry-After, 500/503, a stall past the client's timeout, 400, a context-length error, malformed
JSON, an empty reply). The server counts and keeps every request, so a test can assert how many
attempts reached it and when, and how many were in flight at once (max_in_flight). With
any_order=True a request takes the first remaining step meant for it (its `expect`), so
concurrent callers replay a transcript whatever order their requests arrive in. A request past the end of the script gets a 418, which no client
retries, so a test that under-scripts fails loudly instead of hanging.

    with ScriptedLLMServer([Step.rate_limit(retry_after=1), Step.ok("hi")]) as server:
        client = LLMClient("openai/test-model", api_base=server.api_base, ...)

Loopback only: the server binds 127.0.0.1 on a free port.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

StepKind = Literal[
    "ok", "rate_limit", "server_error", "stall", "bad_request", "context_overflow", "malformed"
]


@dataclass(frozen=True)
class Step:
    """One scripted answer. Build with the class methods; `kind` says which fault, if any."""

    kind: StepKind
    text: str | None = ""
    status: int = 200
    retry_after: str | None = None
    stall_s: float = 0.0
    prompt_tokens: int = 11
    completion_tokens: int = 7
    expect: str | None = None  # text the request's last message must contain, else 418
    usage: bool = True  # False: the completion carries no `usage` (some servers omit it)
    finish_reason: str = "stop"  # "length": the reply was cut off at max_tokens

    @classmethod
    def ok(
        cls,
        text: str | None,
        prompt_tokens: int = 11,
        completion_tokens: int = 7,
        expect: str | None = None,
        delay_s: float = 0.0,
        *,
        usage: bool = True,
        finish_reason: str = "stop",
    ) -> Step:
        """A completion; `text` "" or None is an empty reply (content "" or null). With `expect`,
        a request whose last message lacks that text gets a 418 (a replay out of step).
        `delay_s` holds the answer that long (a model's latency). `usage=False` leaves the usage
        out; `finish_reason` is what the server says ended the reply. A request with
        "stream": true gets the same answer as server-sent events."""
        return cls(
            "ok", text, 200, None, delay_s, prompt_tokens, completion_tokens, expect, usage,
            finish_reason,
        )  # fmt: skip

    @classmethod
    def rate_limit(cls, retry_after: float | str | None = None) -> Step:
        return cls(
            "rate_limit", status=429, retry_after=None if retry_after is None else str(retry_after)
        )

    @classmethod
    def server_error(cls, status: int = 500) -> Step:
        return cls("server_error", status=status)

    @classmethod
    def stall(cls, seconds: float, text: str = "late") -> Step:
        """Holds the request `seconds` before answering (a client with a shorter timeout gives up)."""
        return cls("stall", text=text, stall_s=seconds)

    @classmethod
    def bad_request(cls) -> Step:
        return cls("bad_request", status=400)

    @classmethod
    def context_overflow(cls) -> Step:
        return cls("context_overflow", status=400)

    @classmethod
    def malformed(cls) -> Step:
        """A 200 whose body is not JSON."""
        return cls("malformed")


@dataclass
class Request:
    """One request as the server saw it."""

    at: float  # time.monotonic() on arrival
    path: str
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class ScriptedLLMServer:
    """The server; a context manager that starts it in a thread and stops it on exit."""

    def __init__(self, script: list[Step], *, any_order: bool = False) -> None:
        """`any_order`: each request takes the first remaining step whose `expect` it matches
        (concurrent callers, whose requests arrive in no fixed order); else strictly in turn."""
        self._script = list(script)
        self._any_order = any_order
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self.requests: list[Request] = []
        self.in_flight = 0  # requests received and not yet answered
        self.max_in_flight = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True  # a stalled handler must not keep the tests alive
        # A short poll keeps shutdown (once per test) quick.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.requests)

    def __enter__(self) -> ScriptedLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # wakes stalled handlers
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _next(self, request: Request) -> Step | None:
        with self._lock:
            self.requests.append(request)
            if not self._script:
                return None
            if self._any_order:
                last = _last_message(request.body)
                for i, step in enumerate(self._script):
                    if step.expect is None or step.expect in last:
                        return self._script.pop(i)
            return self._script.pop(0)

    def _arrived(self, delta: int) -> None:
        with self._lock:
            self.in_flight += delta
            self.max_in_flight = max(self.max_in_flight, self.in_flight)


def _handler_for(server: ScriptedLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

        def do_GET(self) -> None:  # /v1/models: what a preflight may probe
            self._send(200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]})

        def do_POST(self) -> None:
            server._arrived(+1)
            try:
                self._post()
            finally:
                server._arrived(-1)

        def _post(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                body = {"_unparsed": raw.decode(errors="replace")}
            request = Request(time.monotonic(), self.path, body, dict(self.headers.items()))
            step = server._next(request)
            if step is None:
                self._send(
                    418, _error("script exhausted: the test sent more requests than it scripted")
                )
                return
            if step.expect is not None and step.expect not in _last_message(body):
                self._send(418, _error(f"replay out of step: expected a request with "
                                       f"{step.expect!r}"))  # fmt: skip
                return
            self._answer(step, body)

        def _answer(self, step: Step, body: dict[str, Any]) -> None:
            model = body.get("model", "test-model")
            if step.kind in ("ok", "stall"):
                if step.stall_s and server._closing.wait(step.stall_s):
                    return
                if body.get("stream"):
                    self._send_raw(200, _stream(model, step, body), "text/event-stream")
                    return
                self._send(200, _completion(model, step))
            elif step.kind == "rate_limit":
                headers = {"Retry-After": step.retry_after} if step.retry_after else {}
                self._send(
                    429, _error("Rate limit reached, slow down", "rate_limit_exceeded"), headers
                )
            elif step.kind == "server_error":
                self._send(step.status, _error(f"upstream failure {step.status}", "server_error"))
            elif step.kind == "bad_request":
                self._send(400, _error("Invalid value for 'temperature'", "invalid_request_error"))
            elif step.kind == "context_overflow":
                message = (
                    "This model's maximum context length is 8192 tokens. However, your messages "
                    "resulted in 9100 tokens. Please reduce the length of the messages."
                )
                self._send(400, _error(message, "invalid_request_error", "context_length_exceeded"))
            elif step.kind == "malformed":
                self._send_raw(200, b'{"id": "chatcmpl-x", "choices": [ {"mess', "application/json")

        def _send(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            self._send_raw(status, json.dumps(payload).encode(), "application/json", headers)

        def _send_raw(
            self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None
        ) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a stall past its timeout): nothing to answer

    return Handler


def _last_message(body: dict[str, Any]) -> str:
    messages = body.get("messages") or [{}]
    return message_text(messages[-1])


def message_text(message: dict[str, Any]) -> str:
    """A request message's text: its content, or its text blocks joined (cache-marked parts)."""
    content = message.get("content", "")
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return content if isinstance(content, str) else json.dumps(content)


def _completion(model: str, step: Step) -> dict[str, Any]:
    answer = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": step.text},
                "finish_reason": step.finish_reason,
            }
        ],
    }
    if step.usage:
        answer["usage"] = _usage(step)
    return answer


def _usage(step: Step) -> dict[str, int]:
    return {
        "prompt_tokens": step.prompt_tokens,
        "completion_tokens": step.completion_tokens,
        "total_tokens": step.prompt_tokens + step.completion_tokens,
    }


def _stream(model: str, step: Step, body: dict[str, Any]) -> bytes:
    """The completion as OpenAI's server-sent events: the text in pieces, then the finish reason,
    then (when asked with stream_options.include_usage and the step has it) the usage."""

    def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        chunk = {"id": "chatcmpl-scripted", "object": "chat.completion.chunk",
                 "created": int(time.time()), "model": model, "choices": choices, **extra}  # fmt: skip
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    text = step.text or ""
    pieces = [text[i : i + 64] for i in range(0, len(text), 64)]
    out = [
        event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    ]
    out += [event([{"index": 0, "delta": {"content": p}, "finish_reason": None}]) for p in pieces]
    out.append(event([{"index": 0, "delta": {}, "finish_reason": step.finish_reason}]))
    if step.usage and (body.get("stream_options") or {}).get("include_usage"):
        out.append(event([], usage=_usage(step)))
    return b"".join(out) + b"data: [DONE]\n\n"


def _error(
    message: str, type_: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}
