"""Renders the prompt templates of this folder (`$name` placeholders, string.Template).

Templates are files so prompts can be read and reviewed as text; this module only fills them.
A placeholder without a value raises KeyError: a prompt is never sent half-filled.
"""

from __future__ import annotations

import inspect
from functools import cache
from pathlib import Path
from string import Template

from pydantic import BaseModel

from hipevolve.core.candidate import load_candidate

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE / "examples"
EXAMPLE = EXAMPLES / "softmax_native"


@cache
def template(name: str) -> Template:
    """prompts/<name>.md as a Template."""
    return Template((HERE / f"{name}.md").read_text())


def render(name: str, **fields: str) -> str:
    """The template filled with `fields`; every placeholder must be given."""
    return template(name).substitute(fields)


def block(text: str | None) -> str:
    """Text ready to sit between fences: ends with exactly one newline."""
    return (text or "").rstrip("\n") + "\n"


# Roles that write a candidate with no parent to read one from: they get the worked example.
EXAMPLE_ROLES = frozenset({"translator"})


@cache
def system_prompt(role: str = "") -> str:
    """The system prompt of `role`: the same text for every role that reads a parent (the
    proposal's three calls share it byte for byte, so a provider caches it once), with the
    worked softmax candidate added for a role that writes one from nothing (the translator).
    No reply format here: each role's prompt ends with its own."""
    text = template("system").template
    if role not in EXAMPLE_ROLES:
        return text
    example = load_candidate(EXAMPLE)
    return (
        text
        + "\n"
        + render(
            "system_example",
            example_kernel=block(example.hip_source),
            example_model=block(example.python_source),
        )
    )


def schema_text(schema: type[BaseModel], json_reply: bool) -> str:
    """What the model is told about the reply: the schema's docstring, and for JSON replies one
    line per field with its description (the same text pydantic validates against)."""
    doc = inspect.cleandoc(schema.__doc__ or "")
    if not json_reply:
        return f"## Your reply\n{doc}\n"
    lines = [f"## Your reply\n{doc}\n", "Reply with one JSON object and nothing else:"]
    return "\n".join(lines + field_lines(schema)) + "\n"


def field_lines(schema: type[BaseModel]) -> list[str]:
    """One line per field of `schema`: its JSON name, type and description."""
    lines = []
    for name, field in schema.model_fields.items():
        kind = getattr(field.annotation, "__name__", str(field.annotation))
        lines.append(f'- "{name}" ({kind}): {field.description or ""}'.rstrip())
    return lines
