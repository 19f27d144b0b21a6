"""Turning a model's reply into a native candidate: a pure function, every malformation named.

What is read before anything else:
- truncation: a reply the provider cut off (finish_reason "length" or "max_tokens"), one that
  ends inside a code block, a SEARCH block or a thinking block, is refused as `truncated`,
  never applied, whatever it holds;
- thinking: <think>, <thinking> and <reasoning> blocks (and an opening tag a chat template left
  out, and gpt-oss's analysis channel) are dropped, so a draft the model rejected while thinking
  is never applied;
- wrapping: an answer wrapped whole in a ```markdown block is unwrapped; a reply that is a JSON
  object of file -> content (bare or in a ```json block), or a JSON string holding a reply, is
  decoded.

Then the reply carries the candidate in one of three forms:
- edits against the parent's files: SEARCH/REPLACE blocks, or a unified diff (reply_edits.py;
  places found exactly or with whitespace drift, never ambiguously: reply_match.py);
- whole files as fenced blocks (reply_blocks.py): per file the last whole block counts, and a
  file the reply leaves out is the parent's;
- whole files as JSON (above).

Whatever the form, a file that comes out marking code as left out ("// ... unchanged ...", "#
rest of the code", a line of "...") where the parent has no such line is refused (elided_code,
reply_elision.py): it would compile as a different kernel. Several different whole files, or a
whole file followed by the original quoted for comparison, are read as reply_blocks.py says.

A reply that fits none becomes ok=False with a named error_class (FAULTS 27), a message the
repairer can quote, and the search goes on. Nothing in a reply is interpreted beyond locating
code: instructions in comments ("ignore the grader") pass through untouched to a verifier that
never reads them (FAULTS 29).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

from hipevolve.agents.llm.reply_blocks import FENCE, BlockError, fenced_blocks, kind, whole_files
from hipevolve.agents.llm.reply_edits import (
    SEARCH,
    EditError,
    apply_edits,
    has_unified_diff,
    search_replace_edits,
    unified_diff_edits,
)
from hipevolve.agents.llm.reply_elision import elided
from hipevolve.core.candidate import KERNEL_FILE, MODEL_FILE, Candidate

MAX_REPLY_BYTES = 256 * 1024
TRUNCATED_FINISH = frozenset({"length", "max_tokens", "max_output_tokens"})

ParseErrorClass = Literal[
    "empty_reply",
    "reply_too_large",
    "truncated",  # cut off by the provider, or ends inside a block
    "no_code_block",
    "not_whole_file",  # a fragment of a file where the whole file was needed
    "elided_code",  # a file (or an edit's new text) marks code as left out: "// ... unchanged"
    "several_ambiguous_blocks",
    "unterminated_fence",
    "nested_fence",
    "diff_does_not_apply",
    "ambiguous_edit",  # an edit's old text is found in several places
    "missing_file",  # one file given, no parent to take the other from
]
Form = Literal["blocks", "diff", "unified_diff", "json"]


class ParsedReply(BaseModel):
    """The outcome of parsing one reply: a candidate, or the class of what was wrong with it."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    candidate: Candidate | None = None
    error_class: ParseErrorClass | None = None
    message: str = ""
    form: Form | None = None  # how the reply carried the candidate


def parse_reply(
    text: str, parent: Candidate | None, finish_reason: str | None = None
) -> ParsedReply:
    """Parses a reply into a native candidate; the parent supplies files the reply leaves out.
    `finish_reason` is the provider's (None: not known)."""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_REPLY_BYTES:
        return _fail("reply_too_large", f"the reply is {size} bytes, over {MAX_REPLY_BYTES}")
    if (finish_reason or "").lower() in TRUNCATED_FINISH:
        return _fail(
            "truncated",
            f"the reply was cut off at the token limit (finish_reason {finish_reason!r}); "
            "send SEARCH/REPLACE edits instead of whole files",
        )
    if not text.strip():
        return _fail("empty_reply", "the reply is empty")
    answer = strip_thinking(text.replace("\r\n", "\n").replace("\r", "\n"))
    if answer is None:
        return _fail("truncated", "the reply ends inside its thinking (<think> never closes)")
    if not answer.strip():
        return _fail("empty_reply", "the reply holds only thinking, no answer")
    return _parse_answer(_unwrapped(answer.split("\n")), parent, depth=0)


def _parse_answer(lines: list[str], parent: Candidate | None, depth: int) -> ParsedReply:
    decoded = _json_reply("\n".join(lines))
    if isinstance(decoded, str) and depth == 0:
        return _parse_answer(_unwrapped(decoded.replace("\r\n", "\n").split("\n")), parent, 1)
    if isinstance(decoded, dict):
        return _from_files(decoded, parent, "json")
    blocks = fenced_blocks(lines)
    if isinstance(blocks, BlockError) and blocks.error_class == "truncated":
        return _fail("truncated", blocks.message)
    if any(SEARCH.match(line) for line in lines):
        if not isinstance(blocks, BlockError):
            whole = [
                b for b in blocks if kind(b) and not any(map(SEARCH.match, b.body.split("\n")))
            ]
            if whole:
                return _fail(
                    "several_ambiguous_blocks",
                    f"the reply has both SEARCH/REPLACE edits and a whole-file block (line "
                    f"{whole[0].start}); give one or the other",
                )
        return _edited(search_replace_edits(lines), parent, "diff")
    if has_unified_diff(lines):
        return _edited(unified_diff_edits(lines), parent, "unified_diff")
    if isinstance(blocks, BlockError):
        return _fail(blocks.error_class, blocks.message)  # type: ignore[arg-type]
    native = parent is not None and parent.format == "native"
    files = whole_files(blocks, _parent_files(parent) if native else None)
    if isinstance(files, BlockError):
        return _fail(files.error_class, files.message)  # type: ignore[arg-type]
    return _from_files(files, parent, "blocks")


def _parent_files(parent: Candidate | None) -> dict[str, str]:
    return {KERNEL_FILE: parent.hip_source or "", MODEL_FILE: parent.python_source or ""}


def _fail(error_class: ParseErrorClass, message: str) -> ParsedReply:
    return ParsedReply(ok=False, error_class=error_class, message=message)


def _build(hip: str, python: str, form: Form, parent: Candidate | None) -> ParsedReply:
    native = parent is not None and parent.format == "native"
    before = _parent_files(parent) if native else {}
    for name, text, code in ((KERNEL_FILE, hip, "hip"), (MODEL_FILE, python, "python")):
        marker = elided(text, before.get(name), code)
        if marker is not None:
            line, what = marker
            return _fail(
                "elided_code",
                f"{name} line {line} leaves code out ({what[:80]!r}): every line of a whole "
                "file must be written out; give the whole file, or SEARCH/REPLACE edits of only "
                "the lines that change",
            )
    digest = hashlib.sha256(f"{hip}\0{python}".encode()).hexdigest()[:12]
    candidate = Candidate(
        format="native", hip_source=hip, python_source=python, name=f"reply-{digest}"
    )
    return ParsedReply(ok=True, candidate=candidate, form=form)


def _from_parent(parent: Candidate | None, name: str) -> str | None:
    if parent is None or parent.format != "native":
        return None
    return parent.hip_source if name == KERNEL_FILE else parent.python_source


def _from_files(files: dict[str, str], parent: Candidate | None, form: Form) -> ParsedReply:
    hip = files.get(KERNEL_FILE) or _from_parent(parent, KERNEL_FILE)
    python = files.get(MODEL_FILE) or _from_parent(parent, MODEL_FILE)
    if hip is None or python is None:
        missing = KERNEL_FILE if hip is None else MODEL_FILE
        return _fail(
            "missing_file",
            f"the reply has no {missing} and there is no native parent to take it from",
        )
    return _build(hip, python, form, parent)


def _edited(edits: list | EditError, parent: Candidate | None, form: Form) -> ParsedReply:
    if isinstance(edits, EditError):
        return _fail(edits.error_class, edits.message)  # type: ignore[arg-type]
    if parent is None or parent.format != "native" or parent.hip_source is None:
        return _fail(
            "diff_does_not_apply",
            "edits need a native parent to apply to; reply with whole files",
        )
    if not edits:
        return _fail("no_code_block", "the reply has no complete edit")
    files = apply_edits({KERNEL_FILE: parent.hip_source, MODEL_FILE: parent.python_source}, edits)
    if isinstance(files, EditError):
        return _fail(files.error_class, files.message)  # type: ignore[arg-type]
    return _build(files[KERNEL_FILE], files[MODEL_FILE], form, parent)


# ----------------------------------------------------------------------------- thinking

_THINK = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_CLOSE = re.compile(r"</(think|thinking|reasoning)>", re.IGNORECASE)
_FINAL = "<|channel|>final<|message|>"
_HARMONY_END = re.compile(r"<\|(?:return|end|call)\|>\s*$")


def strip_thinking(text: str) -> str | None:
    """The answer without the model's thinking; None when the reply ends while still thinking."""
    if "<|channel|>" in text:  # gpt-oss (harmony) channels left in place by the server
        if _FINAL not in text:
            return None
        text = _HARMONY_END.sub("", text.rsplit(_FINAL, 1)[1])
    text = _THINK.sub("", text)
    if _OPEN.search(text):
        return None  # opened and never closed
    closes = list(_CLOSE.finditer(text))
    if closes:  # the template sent the opening tag: everything before the close is thinking
        text = text[closes[-1].end() :]
    return text


# ----------------------------------------------------------------------------- wrappers


def _unwrapped(lines: list[str]) -> list[str]:
    """Lines without a ```markdown fence around the whole answer (whose inner fences would
    otherwise close it early)."""
    opening = next((k for k, x in enumerate(lines) if FENCE.match(x)), None)
    if opening is None:
        return lines
    info = FENCE.match(lines[opening])["info"].lower()  # type: ignore[index]
    if info not in ("markdown", "md"):
        return lines
    closing = max((k for k, x in enumerate(lines) if x.strip()), default=opening)
    if closing == opening or not re.fullmatch(r"\s*(`{3,}|~{3,})\s*", lines[closing]):
        return lines
    inner = next((FENCE.match(x) for x in lines[opening + 1 : closing] if FENCE.match(x)), None)
    if inner is None or not inner["info"]:
        return lines  # a markdown block that closes on its own: not a wrapper
    return lines[:opening] + lines[opening + 1 : closing] + lines[closing + 1 :]


_KEYS = {
    KERNEL_FILE: ("kernel.hip", "kernel.cu", "kernel", "hip", "kernel_hip", "hip_source"),
    MODEL_FILE: ("model.py", "model", "python", "model_py", "python_source"),
}


def _json_reply(text: str) -> dict[str, str] | str | None:
    """A reply that is JSON: file -> content (the files), or a string (a reply, encoded)."""
    body = text.strip()
    fenced = re.fullmatch(r"(`{3,}|~{3,})[ \t]*(json)?[ \t]*\n(.*)\n\1", body, re.DOTALL)
    if fenced:
        body = fenced[3]
    if not body or body[0] not in '{"':
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if isinstance(value, str):
        return value
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("files"), dict):
        value = value["files"]
    files = {}
    for key, content in value.items():
        base = str(key).lower().rsplit("/", 1)[-1]
        for name, aliases in _KEYS.items():
            if base in aliases and isinstance(content, str) and content.strip():
                files[name] = content if content.endswith("\n") else content + "\n"
    return files or None
