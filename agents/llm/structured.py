"""Reading a JSON answer (a diagnosis, an idea, a verdict) from a model's reply: a pure function.

The model's thinking is dropped first (replies.strip_thinking: a draft answer it rejected while
thinking is never taken). The first `{...}` object in the reply (bare or fenced) is validated
against the role's schema; anything else is a named failure the caller records, falling back to
its offline policy.
"""

from __future__ import annotations

import json
import re
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from hipevolve.agents.llm.replies import strip_thinking

T = TypeVar("T", bound=BaseModel)
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


def parse_json_reply(text: str, schema: type[T]) -> T | str:
    """The reply as `schema`, or one line saying why it is not one."""
    answer = strip_thinking(text.replace("\r\n", "\n"))
    if answer is None:
        return "the reply ends inside its thinking (<think> never closes)"
    text = answer
    if not text.strip():
        return "empty reply"
    fenced = _FENCED.search(text)
    candidates = [fenced.group(1)] if fenced else []
    start, end = text.find("{"), text.rfind("}")
    if start >= 0 and end > start:
        candidates.append(text[start : end + 1])
    if not candidates:
        return "no JSON object in the reply"
    error = ""
    for raw in candidates:
        try:
            return schema.model_validate(json.loads(raw))
        except json.JSONDecodeError as e:
            error = f"not valid JSON: {e}"
        except ValidationError as e:
            first = e.errors()[0]
            error = f"field {'.'.join(map(str, first['loc']))}: {first['msg']}"
    return error
