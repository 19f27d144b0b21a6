"""A prompt as parts, and the messages that carry it with the provider's cache markers.

A proposal's three calls (profiler_reader, optimizer, mutator) open with the same bytes: the
shared system prompt, the run's briefing, then the parent and the run's memory. Only each role's
own instructions differ, and they come last. Every stable part carries litellm's
`cache_control` marker on its content block, so a provider that caches prompts on request
(Anthropic) writes the prefix once and reads it on the next calls, and one that caches long
prefixes by itself (OpenAI) finds them identical; litellm strips the marker where the endpoint
cannot read it. A provider reads at most four markers a request (`MAX_MARKERS`): a long
conversation keeps its first three (the stable prefix) and its last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]
MARKER = {"type": "ephemeral"}
MAX_MARKERS = 4  # Anthropic's limit of cache breakpoints a request


@dataclass(frozen=True)
class Part:
    """One block of a prompt; `cached`: the prompt up to here is the same on other calls, so
    the provider should keep it (a cache marker ends it)."""

    text: str
    cached: bool = False


@dataclass(frozen=True)
class Prompt:
    """A user turn as parts: the stable prefix first, the role's own text last."""

    parts: tuple[Part, ...]

    @classmethod
    def of(cls, text: str) -> Prompt:
        return cls((Part(text),))

    def text(self) -> str:
        """The prompt as one text, exactly the bytes the parts carry."""
        return "".join(p.text for p in self.parts)

    def tail(self) -> str:
        """What follows the last cached part: the text only this call sends."""
        last = max((i for i, p in enumerate(self.parts) if p.cached), default=-1)
        return "".join(p.text for p in self.parts[last + 1 :])

    def message(self) -> Message:
        """The user message: one text block per part, a marker on each cached one."""
        return {"role": "user", "content": [_block(p) for p in self.parts if p.text]}


def as_prompt(prompt: str | Prompt) -> Prompt:
    return prompt if isinstance(prompt, Prompt) else Prompt.of(prompt)


def system_message(text: str) -> Message:
    """The system prompt as one cached block."""
    return {"role": "system", "content": [_block(Part(text, cached=True))]}


def text_of(message: Message) -> str:
    """A message's text, whether its content is a string or text blocks."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def within_marker_limit(messages: Sequence[Message]) -> list[Message]:
    """`messages` with at most MAX_MARKERS cache markers: the first MAX_MARKERS - 1 (the
    stable prefix) and the last (the conversation so far) are kept."""
    places = [
        (i, j)
        for i, m in enumerate(messages)
        if isinstance(m.get("content"), list)
        for j, b in enumerate(m["content"])
        if "cache_control" in b
    ]
    if len(places) <= MAX_MARKERS:
        return list(messages)
    drop = set(places[MAX_MARKERS - 1 : -1])
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m.get("content"), list):
            out.append(m)
            continue
        blocks = [
            {k: v for k, v in b.items() if k != "cache_control"} if (i, j) in drop else b
            for j, b in enumerate(m["content"])
        ]
        out.append({**m, "content": blocks})
    return out


def marked(message: Message) -> Message:
    """`message` with a cache marker on its last block (a conversation's latest turn)."""
    content = message.get("content")
    blocks = (
        [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    )
    if not blocks:
        return message
    return {**message, "content": [*blocks[:-1], {**blocks[-1], "cache_control": MARKER}]}


def _block(part: Part) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": part.text}
    if part.cached:
        block["cache_control"] = MARKER
    return block
