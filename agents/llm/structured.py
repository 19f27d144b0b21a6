"""Reading a JSON answer (a diagnosis, an idea, a verdict) from a model's reply: a pure function.

The model's thinking is dropped first (replies.strip_thinking: a draft answer it rejected while
thinking is never taken). Then the answer itself is found by parsing, not by its outermost braces:
- every `{` of the reply is tried as the start of a JSON object (a brace in prose before the
  object, or a second object after it, is no obstacle); an object that does not decode as JSON
  is repaired where the slip is a common one (json_repair.py: single quotes, trailing commas,
  comments, Python's True/None, unquoted keys, a missing comma) and said so in `repairs`;
- of the objects found, those that validate against the role's schema count, the outermost of
  them (an answer wrapped as {"diagnosis": {...}} is the inner one); one answer, or the same
  answer twice, is taken; several different answers are taken only when the prose before the
  last says it corrects the others ("Actually", "Corrected:"), else the reply is refused as
  ambiguous; objects that only split one answer's fields are merged;
- a reply with no object at all may still label the fields line by line (`Bottleneck: memory`);
- an answer whose text is a placeholder ("...", "<idea>") or empty is no answer.
Near-miss fields are coerced by the schema itself (JsonReply below): a key in another case or
under a synonym, a list where a string is expected (joined), an enum value in another case or
spelling or under a synonym ("memory bandwidth" -> memory). Anything else is a named failure the
caller can send back to the model (one repair turn) before falling back to its offline policy.
"""

from __future__ import annotations

import json
import re
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError, model_validator

from hipevolve.agents.llm.json_repair import balanced_end, repaired
from hipevolve.agents.llm.replies import strip_thinking

T = TypeVar("T", bound=BaseModel)
MAX_STARTS = 400  # `{` positions tried; a reply with more is prose around code, not an answer
_PLACEHOLDER = re.compile(
    r"^\s*(?:\.{2,}|…|<[^<>]*>|\[[^\[\]]*\]|string|str|text|tbd|todo)?\s*$", re.IGNORECASE
)
# Prose before a later answer that says it replaces the earlier ones.
_CORRECTS = re.compile(
    r"\b(actually|wait|oops|correct(?:ed|ion)|fix(?:ed)?|mistake|revised|updated|final|"
    r"instead|on second thought|scratch that|let me redo)\b",
    re.IGNORECASE,
)
_ALTERNATIVE = re.compile(
    r"\b(alternative(?:ly)?|option|another (?:idea|approach|option|reading)|second idea|"
    r"variant|if that fails)\b",
    re.IGNORECASE,
)
_LABELLED = re.compile(
    r"^[\s>*_#`\-•\d.)]*\"?(?P<key>[A-Za-z][A-Za-z _-]{0,30}?)\"?[\s*_`]*"
    r"[:=][\s*_`]*(?P<value>.*)$"
)


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


class JsonReply(BaseModel):
    """A schema a model answers in JSON, read tolerantly: before validation, keys are matched to
    fields by name in any case or spelling or by `key_synonyms`, a list or object where a string
    is expected is joined into one, and a Literal field's value is matched to its allowed values
    in any case or spelling, by `value_synonyms`, or by the one allowed value it names."""

    key_synonyms: ClassVar[dict[str, str]] = {}  # normalised key -> field name
    value_synonyms: ClassVar[dict[str, dict[str, str]]] = {}  # field -> phrase -> allowed value

    @model_validator(mode="before")
    @classmethod
    def _near_miss(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        by_key = {_norm(name): name for name in fields} | {
            _norm(k): v for k, v in cls.key_synonyms.items()
        }
        out: dict[str, Any] = {}
        for key, value in data.items():
            name = key if key in fields else by_key.get(_norm(str(key)))
            if name is not None and (name not in out or key == name):
                out[name] = value
        for name, value in list(out.items()):
            out[name] = _coerced(fields[name].annotation, value, cls.value_synonyms.get(name, {}))
        return out


def _coerced(annotation: Any, value: Any, synonyms: dict[str, str]) -> Any:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return _literal(value, args, synonyms)
    text_field = annotation is str or (str in args and type(None) in args)
    if not text_field:
        return value
    optional = type(None) in args
    if optional and isinstance(value, str) and _norm(value) in ("", "none", "null", "n a", "na"):
        return None
    if isinstance(value, list):
        return _joined([v for v in value if v not in (None, "")])
    if isinstance(value, dict):
        return _joined([f"{k}: {v}" for k, v in value.items()])
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _joined(items: list[Any]) -> str:
    texts = [str(x).strip() for x in items]
    sentences = all(t.endswith((".", "!", "?")) for t in texts)
    return (" " if sentences else "; ").join(texts)


def _literal(value: Any, allowed: tuple[Any, ...], synonyms: dict[str, str]) -> Any:
    """The allowed value `value` means, or `value` unchanged (pydantic then names the choices)."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if not isinstance(value, str) or value in allowed:
        return value
    plain = {_norm(str(a)): a for a in allowed}
    phrases = plain | {_norm(k): v for k, v in synonyms.items()}
    norm = _norm(value)
    bare = re.sub(r"\s*\b(bound|bottleneck(?:ed)?|limited|issue|problem)$", "", norm)
    for key in (norm, bare):
        if key in phrases:
            return phrases[key]
    named = {v for p, v in phrases.items() if re.search(rf"\b{re.escape(p)}\b", norm)}
    return named.pop() if len(named) == 1 else value


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Reading(Generic[T]):
    """What a reply held: the answer (None when there is none) or why not, and the slips
    repaired to read it ("single quotes", "trailing comma", ...)."""

    answer: T | None
    error: str = ""
    repairs: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Found:
    start: int
    end: int
    value: Any
    repairs: tuple[str, ...]


def read_json_reply(text: str, schema: type[T]) -> Reading[T]:
    """The reply as `schema` (with the repairs it needed), or one line saying why it is not one."""
    answer = strip_thinking(text.replace("\r\n", "\n"))
    if answer is None:
        return Reading(None, "the reply ends inside its thinking (<think> never closes)")
    if not answer.strip():
        return Reading(None, "empty reply")
    encoded = _json_string(answer)
    if encoded is not None:  # the whole answer JSON-encoded as one string
        inner = read_json_reply(encoded, schema)
        return Reading(
            inner.answer, inner.error, ("answer encoded as a JSON string", *inner.repairs)
        )
    found = _objects(answer)
    if found:
        return _chosen(answer, found, schema)
    labelled = _labelled_fields(answer, schema)
    if labelled is not None:
        return labelled
    if "{" in answer:
        return Reading(None, "a JSON object opens but never closes (was the reply cut off?)")
    return Reading(None, "no JSON object in the reply")


def parse_json_reply(text: str, schema: type[T]) -> T | str:
    """The reply as `schema`, or one line saying why it is not one."""
    reading = read_json_reply(text, schema)
    return reading.answer if reading.answer is not None else reading.error


def _json_string(answer: str) -> str | None:
    body = answer.strip()
    if not body.startswith('"'):
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, str) and "{" in value else None


def _objects(text: str) -> list[_Found]:
    """Every JSON object (a dict) that starts at some `{` of the text, as written or repaired."""
    decoder = json.JSONDecoder(strict=False)  # raw newlines inside strings are a common slip
    found = []
    for k, m in enumerate(re.finditer(r"\{", text)):
        if k >= MAX_STARTS:
            break
        i = m.start()
        try:
            value, end = decoder.raw_decode(text, i)
            repairs: tuple[str, ...] = ()
        except ValueError:
            end = balanced_end(text, i)
            if end is None:
                continue
            fixed = repaired(text[i:end])
            if fixed is None:
                continue
            value, repairs = fixed
        if isinstance(value, dict):
            found.append(_Found(i, end, value, repairs))
    return found


def _validated(value: Any, schema: type[T]) -> T | str:
    try:
        answer = schema.model_validate(value)
    except ValidationError as e:
        first = e.errors()[0]
        return f"field {'.'.join(map(str, first['loc'])) or '(object)'}: {first['msg']}"
    for name, field_value in answer.model_dump().items():
        if isinstance(field_value, str) and _PLACEHOLDER.match(field_value):
            return f"field {name}: {field_value!r} is a placeholder, not an answer"
    return answer


def _chosen(text: str, found: list[_Found], schema: type[T]) -> Reading[T]:
    valid: list[tuple[_Found, T]] = []
    error = ""
    for f in found:
        answer = _validated(f.value, schema)
        if isinstance(answer, str):
            error = error or answer
        else:
            valid.append((f, answer))
    outer = [
        (f, a) for f, a in valid if not any(g.start < f.start and f.end <= g.end for g, _ in valid)
    ]
    if not outer:
        merged = _merged(found, schema)
        if merged is not None:
            return merged
        return Reading(None, error)
    distinct = {a.model_dump_json(): (f, a) for f, a in outer}
    if len(distinct) == 1:
        f, a = outer[-1]
        return Reading(a, "", f.repairs)
    last, answer = outer[-1]
    before = text[outer[-2][0].end : last.start]
    if _CORRECTS.search(before) and not _ALTERNATIVE.search(before):
        return Reading(answer, "", (*last.repairs, "an earlier answer corrected"))
    return Reading(
        None,
        f"the reply holds {len(distinct)} different answers; reply with exactly one JSON object",
    )


def _merged(found: list[_Found], schema: type[T]) -> Reading[T] | None:
    """One answer split over several top-level objects with disjoint keys."""
    top = [f for f in found if not any(g.start < f.start and f.end <= g.end for g in found)]
    if len(top) < 2:
        return None
    keys = [set(f.value) for f in top]
    if sum(map(len, keys)) != len(set().union(*keys)):
        return None
    value = {k: v for f in top for k, v in f.value.items()}
    answer = _validated(value, schema)
    if isinstance(answer, str):
        return None
    return Reading(answer, "", tuple(r for f in top for r in f.repairs) + ("split object",))


def _labelled_fields(text: str, schema: type[T]) -> Reading[T] | None:
    """`Field: value` lines (markdown decoration aside) naming every required field, no JSON."""
    names = {_norm(n): n for n in schema.model_fields}
    names |= {_norm(k): v for k, v in getattr(schema, "key_synonyms", {}).items()}
    values: dict[str, list[str]] = {}
    current: str | None = None
    for line in text.split("\n"):
        m = _LABELLED.match(line)
        name = names.get(_norm(m["key"])) if m else None
        if m and name is not None and name not in values:
            current = name
            values[name] = [m["value"]]
        elif m and len(m["key"].split()) <= 3:
            current = None  # another label: the field before it has ended
        elif current is not None and line.strip() and not line.lstrip().startswith("```"):
            values[current].append(line)
        else:
            current = None
    if not values:
        return None
    data = {k: _unquoted(" ".join(v)) for k, v in values.items()}
    answer = _validated(data, schema)
    if isinstance(answer, str):
        return Reading(None, f"no JSON object in the reply ({answer})")
    return Reading(answer, "", ("labelled fields instead of a JSON object",))


def _unquoted(text: str) -> str | None:
    text = " ".join(text.split()).strip().rstrip(",").strip().strip("*_`").strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    return None if text.lower() in ("null", "none") else text
