"""The LLM client behind the agents: one litellm call per turn, our own retries, hard budgets.

Any provider litellm knows works, including a local OpenAI-compatible server
(`openai/<name>` with `api_base`). litellm's and the OpenAI SDK's own retries are switched off
(num_retries=0, max_retries=0) so the policy here is the only retry layer, and a test can count
attempts at the server:
- retried, with exponential backoff: 429 (waiting what Retry-After says, capped), timeouts, and
  5xx answers the server actually sent;
- never retried: 400, context-window overflow, auth and other 4xx, a 200 whose body is not a
  completion (litellm reports it as a 500, but retrying a broken server's garbage wastes budget),
  missing credentials (litellm also reports those as a 500), connection refused.

Token and dollar budgets are checked before each call and charged from the response's usage; a
server that sends no usage (litellm then reports zeros) is charged an estimate (litellm's token
counter, or characters / 4), so the token budget still trips. An exhausted budget returns a
refusal, never raises. Each call keeps the provider's finish_reason ("length": cut off at
max_tokens), which the reply parser reads. With `stream` the reply comes as server-sent events
(a long reply then never idles past the timeout; usage is asked for with include_usage), and
`max_concurrent` bounds the requests in flight to one model. Every call, failed or not, returns an LLMCall
(a plain value: exceptions stay in this layer), which `record_call` stores in the archive.
Budgets are checked before a call starts, so concurrent callers can overshoot by at most the
calls already in flight.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt

from hipevolve.agents.llm.messages import text_of

if TYPE_CHECKING:
    from hipevolve.archive.store import Archive

log = logging.getLogger(__name__)

# Whoever imports litellm first decides whether it fetches its price map from GitHub at import
# (slow, and a search must not depend on the network): ask for the copy it ships, here as well
# as in load_litellm(), in case another module imports litellm before our first call.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# A local OpenAI-compatible server (vLLM, llama.cpp, SGLang) ignores the key, but the OpenAI SDK
# refuses to send a request without one; this is the value vLLM's own docs use.
PLACEHOLDER_KEY = "EMPTY"

Message = dict[str, Any]
CallStatus = Literal["ok", "error"]
ErrorClass = Literal[
    "budget_exhausted",
    "rate_limit",
    "timeout",
    "server_error",
    "bad_request",
    "context_overflow",
    "auth",
    "malformed_response",
    "connection",
    "other",
    "cancelled",  # the run's budget was spent while the reply was written: nothing could use it
]
TRANSIENT: frozenset[str] = frozenset({"rate_limit", "timeout", "server_error"})


class LLMCall(BaseModel):
    """One call to the model, as the archive keeps it (failed and refused calls included)."""

    model_config = ConfigDict(frozen=True)

    role: str  # the agent that asked (translator, mutator, ...)
    model: str
    prompt_hash: str  # sha256 of the messages as canonical JSON
    text: str  # the reply; "" when the call failed or the model said nothing
    tokens_in: int
    tokens_out: int
    cost_usd: float
    cost_known: bool  # False: litellm has no price for this model, cost_usd is 0
    latency_s: float  # wall time of the whole call, retries and backoff included
    attempts: int  # requests sent (0 for a budget refusal)
    status: CallStatus
    error_class: ErrorClass | None = None
    error: str | None = None
    finish_reason: str | None = None  # the provider's: "stop", "length" (cut off), ...
    tokens_estimated: bool = False  # the server sent no usage: tokens are our estimate

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def failed(
        cls,
        role: str,
        model: str,
        prompt_hash: str,
        error_class: ErrorClass,
        error: str,
        *,
        latency_s: float = 0.0,
        attempts: int = 0,
    ) -> LLMCall:
        """A call that brought no reply back (a budget refusal, a provider failure): no text,
        no tokens counted, nothing billed."""
        return cls(
            role=role,
            model=model,
            prompt_hash=prompt_hash,
            text="",
            tokens_in=0,
            tokens_out=0,
            cost_usd=0.0,
            cost_known=True,
            latency_s=latency_s,
            attempts=attempts,
            status="error",
            error_class=error_class,
            error=error,
        )


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    calls: int
    tokens_in: int
    tokens_out: int
    cost_usd: float


def prompt_hash(messages: Sequence[Message]) -> str:
    """sha256 of the messages as canonical JSON: the same prompt hashes alike across runs."""
    data = json.dumps(list(messages), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode()).hexdigest()


def load_litellm() -> ModuleType:
    """Imports litellm (3 s, so only when an LLM is used) without it phoning home.

    At import litellm fetches its model price map from GitHub unless told to use the copy it
    ships; a search must not depend on that, nor print litellm's "Give Feedback" banners.
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    return litellm


class LLMClient:
    """Calls one model; thread-safe; keeps the running token and dollar totals."""

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        token_budget: int | None = None,
        cost_budget_usd: float | None = None,
        *,
        api_key: str | None = None,
        backoff_s: float = 1.0,
        backoff_max_s: float = 60.0,
        retry_after_cap_s: float = 60.0,
        spent: Usage | None = None,
        stream: bool = False,
        max_concurrent: int | None = None,
    ) -> None:
        """`spent` seeds the totals (on resume, from Archive.llm_usage) so budgets span runs;
        `max_concurrent` bounds this model's requests in flight (None: no bound)."""
        self.model = model
        self.api_base = api_base
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.token_budget = token_budget
        self.cost_budget_usd = cost_budget_usd
        self.api_key = api_key
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.retry_after_cap_s = retry_after_cap_s
        self.stream = stream
        self._slots = threading.BoundedSemaphore(max_concurrent) if max_concurrent else None
        self._lock = threading.Lock()
        self._usage = spent or Usage(calls=0, tokens_in=0, tokens_out=0, cost_usd=0.0)
        self._warned_unpriced = False

    @property
    def usage(self) -> Usage:
        with self._lock:
            return self._usage

    def budget_left(self) -> str | None:
        """Why no further call may start, or None while both budgets have room."""
        u = self.usage
        used = u.tokens_in + u.tokens_out
        if self.token_budget is not None and used >= self.token_budget:
            return f"token budget exhausted: {used} of {self.token_budget} tokens used"
        if self.cost_budget_usd is not None and u.cost_usd >= self.cost_budget_usd:
            return f"cost budget exhausted: ${u.cost_usd:.4f} of ${self.cost_budget_usd:.4f} spent"
        return None

    def complete(
        self,
        role: str,
        messages: Sequence[Message],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        schema: type[BaseModel] | None = None,
    ) -> LLMCall:
        """Asks the model; always returns an LLMCall (status error on failure or refusal).
        `schema`: the reply is that JSON object, asked of the provider as structured output
        where litellm says the model supports it (response_format)."""
        phash = prompt_hash(messages)
        base = {"role": role, "model": self.model, "prompt_hash": phash}
        refusal = self.budget_left()
        if refusal is not None:
            return LLMCall.failed(**base, error_class="budget_exhausted", error=refusal)
        litellm = load_litellm()
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "timeout": self.timeout_s,
            "num_retries": 0,  # litellm's retry layer: off, ours is the only one
            "max_retries": 0,  # the OpenAI SDK's retry layer: off too
        }
        if self.api_base:
            kwargs["api_base"] = self.api_base
        key = self._key(litellm)
        if key:
            kwargs["api_key"] = key
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if temperature is not None:
            kwargs["temperature"] = temperature
        if self.stream:
            kwargs |= {"stream": True, "stream_options": {"include_usage": True}}
        structured = response_format(litellm, self.model, schema) if schema else None
        if structured is not None:
            kwargs["response_format"] = structured

        attempts = 0

        def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            if self._slots is None:
                return self._request(litellm, kwargs)
            with self._slots:
                return self._request(litellm, kwargs)

        retrying = Retrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(lambda e: classify(e) in TRANSIENT),
            reraise=True,
            before_sleep=lambda s: log.info(
                "%s: %s, retrying (attempt %d)",
                self.model,
                _short(s.outcome.exception()),
                s.attempt_number + 1,
            ),
        )
        start = time.monotonic()
        try:
            response = retrying(attempt)
        except Exception as e:  # every provider failure becomes a value, never crosses layers
            return LLMCall.failed(
                **base,
                error_class=classify(e),
                error=_short(e),
                latency_s=time.monotonic() - start,
                attempts=attempts,
            )
        latency = time.monotonic() - start
        return self._charge(litellm, response, base, messages, latency, attempts)

    def _request(self, litellm: ModuleType, kwargs: dict[str, Any]) -> Any:
        """One request; a stream is read to its end and assembled into one response."""
        response = litellm.completion(**kwargs)
        if not self.stream:
            return response
        chunks = list(response)
        return litellm.stream_chunk_builder(chunks, messages=kwargs["messages"])

    def _key(self, litellm: ModuleType) -> str | None:
        if self.api_key:
            return self.api_key
        if self.api_base and litellm.validate_environment(self.model)["missing_keys"]:
            return PLACEHOLDER_KEY  # a self-hosted server: no key needed, the SDK wants one
        return None  # litellm reads the provider's variable (OPENAI_API_KEY, ...)

    def _wait(self, state: RetryCallState) -> float:
        """Retry-After when a 429 gives one (capped), else exponential backoff with jitter."""
        e = state.outcome.exception() if state.outcome else None
        if e is not None and classify(e) == "rate_limit":
            after = retry_after_s(e)
            if after is not None:
                return min(after, self.retry_after_cap_s)
        exponential = self.backoff_s * 2 ** (state.attempt_number - 1)
        # jitter spreads the retries of concurrent callers hit by the same outage
        return min(self.backoff_max_s, exponential + random.uniform(0, self.backoff_s))

    def _charge(
        self,
        litellm: ModuleType,
        response: Any,
        base: dict[str, str],
        messages: Sequence[Message],
        latency: float,
        attempts: int,
    ) -> LLMCall:
        choice = response.choices[0] if response and response.choices else None
        text = (choice.message.content or "") if choice else ""
        finish = getattr(choice, "finish_reason", None) if choice else None
        usage = getattr(response, "usage", None)
        tokens_in = int(getattr(usage, "prompt_tokens", 0) or 0)
        tokens_out = int(getattr(usage, "completion_tokens", 0) or 0)
        estimated = tokens_in == 0 and tokens_out == 0
        if estimated:  # the server sent no usage (litellm fills in zeros): count it ourselves
            tokens_in, tokens_out = estimate_tokens(litellm, self.model, messages, text)
        try:
            if estimated:  # completion_cost would price the zeros litellm filled in
                prompt_usd, reply_usd = litellm.cost_per_token(
                    model=self.model, prompt_tokens=tokens_in, completion_tokens=tokens_out
                )
                cost, cost_known = float(prompt_usd + reply_usd), True
            else:
                cost = float(litellm.completion_cost(completion_response=response))
                cost_known = True
        except Exception:  # litellm has no price for this model (a local server, a new model)
            cost, cost_known = 0.0, False
            if not self._warned_unpriced:
                self._warned_unpriced = True
                log.warning(
                    "litellm has no price for %s: its calls count as $0, so the dollar budget "
                    "does not limit them (the token budget still does)",
                    self.model,
                )
        with self._lock:
            u = self._usage
            self._usage = Usage(
                calls=u.calls + 1,
                tokens_in=u.tokens_in + tokens_in,
                tokens_out=u.tokens_out + tokens_out,
                cost_usd=u.cost_usd + cost,
            )
        return LLMCall(
            **base,
            text=text,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=cost,
            cost_known=cost_known,
            latency_s=latency,
            attempts=attempts,
            status="ok",
            finish_reason=finish,
            tokens_estimated=estimated,
        )


def response_format(
    litellm: ModuleType, model: str, schema: type[BaseModel]
) -> dict[str, Any] | None:
    """The provider's structured output for `schema`, as far as litellm knows the model: its JSON
    schema where litellm says the model takes one, JSON mode where it takes a response_format,
    None for a model litellm does not know (a self-hosted server may reject the parameter; the
    tolerant reader and the repair turn still stand behind every reply)."""
    try:
        if litellm.supports_response_schema(model=model):
            return {
                "type": "json_schema",
                "json_schema": {"name": schema.__name__, "schema": schema.model_json_schema()},
            }
        known = model in litellm.model_cost or model.split("/", 1)[-1] in litellm.model_cost
        if known and "response_format" in (litellm.get_supported_openai_params(model=model) or []):
            return {"type": "json_object"}
    except Exception:  # litellm cannot place the model: ask for nothing special
        return None
    return None


def priced(model: str, tokens_in: int, tokens_out: int) -> tuple[float, bool]:
    """(dollars, known) for these tokens at litellm's list price of `model`, uncached; (0, False)
    where litellm has no price for it."""
    litellm = load_litellm()
    try:
        prompt_usd, reply_usd = litellm.cost_per_token(
            model=model, prompt_tokens=tokens_in, completion_tokens=tokens_out
        )
    except Exception:  # no price for this model (a local server, a new model)
        return 0.0, False
    return float(prompt_usd + reply_usd), True


def estimate_tokens(
    litellm: ModuleType, model: str, messages: Sequence[Message], text: str
) -> tuple[int, int]:
    """(prompt, reply) tokens by litellm's counter for the model, else characters / 4."""
    try:
        return (
            int(litellm.token_counter(model=model, messages=list(messages))),
            int(litellm.token_counter(model=model, text=text)) if text else 0,
        )
    except Exception:  # no tokenizer for this model here: the usual rule of thumb
        chars = sum(len(text_of(m)) for m in messages)
        return max(1, chars // 4), len(text) // 4


# ----------------------------------------------------------------------------- failures


def classify(e: BaseException) -> ErrorClass:
    """Names a litellm failure; TRANSIENT ones are retried."""
    litellm = load_litellm()

    message = str(e)
    if isinstance(e, litellm.ContextWindowExceededError):  # before BadRequestError: a subclass
        return "context_overflow"
    if isinstance(e, litellm.RateLimitError):
        return "rate_limit"
    if isinstance(e, litellm.Timeout):
        return "timeout"
    if isinstance(e, litellm.AuthenticationError | litellm.PermissionDeniedError):
        return "auth"
    if isinstance(e, litellm.BadRequestError | litellm.NotFoundError):
        return "bad_request"
    if isinstance(e, litellm.APIConnectionError):
        return "connection"
    status = getattr(e, "status_code", None)
    if isinstance(status, int) and status >= 500:
        # litellm reports two local failures as 500s: say what they are, and don't retry them.
        if "Missing credentials" in message or "api_key client option" in message:
            return "auth"
        if "Received response" in message or "Empty or invalid response" in message:
            return "malformed_response"
        return "server_error"
    if isinstance(status, int) and 400 <= status < 500:
        return "bad_request"
    return "other"


def retry_after_s(e: BaseException) -> float | None:
    """Seconds a 429 asks us to wait (Retry-After as seconds or an HTTP date; retry-after-ms)."""
    headers = getattr(e, "litellm_response_headers", None)
    if not headers:
        response = getattr(e, "response", None)
        headers = getattr(response, "headers", None)
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _short(e: BaseException | None) -> str:
    """One line of the error, without litellm's repeated class-name prefixes."""
    text = " ".join(str(e).split())
    for prefix in ("litellm.",):
        text = text.removeprefix(prefix)
    return text[:500]


# ----------------------------------------------------------------------------- archive


def record_call(archive: Archive, run: int, call: LLMCall) -> int | None:
    """Stores a call in the archive's accounting; returns its row id.

    A budget refusal, or a call cancelled before it was sent, sent nothing and is not stored. A failed call is stored with its (zero)
    tokens, and its error class and message go to the run's events, since the llm_calls table
    keeps no status.
    """
    if call.error_class == "budget_exhausted" or (
        call.error_class == "cancelled" and not call.attempts
    ):
        return None
    row = archive.record_llm_call(
        run,
        role=call.role,
        model=call.model,
        prompt_hash=call.prompt_hash,
        tokens_in=call.tokens_in,
        tokens_out=call.tokens_out,
        cost_usd=call.cost_usd,
        latency_s=call.latency_s,
    )
    if not call.ok:
        archive.log_event(
            run,
            "llm_error",
            {
                "llm_call": row,
                "role": call.role,
                "error_class": call.error_class,
                "error": call.error,
                "attempts": call.attempts,
            },
        )
    return row


def spent_in(archive: Archive, run: int) -> Usage:
    """The run's LLM usage so far, to seed LLMClient(spent=...) on resume."""
    u = archive.llm_usage(run)
    return Usage(calls=u.calls, tokens_in=u.tokens_in, tokens_out=u.tokens_out, cost_usd=u.cost_usd)
