"""A model's new task, read from its reply: a pure function, every malformation named.

The reply carries the task as two fenced blocks: one ```json block with the TaskDraft (what
task.toml holds) and one ```python block with reference.py (KernelBench format). Nothing in it
is run here; the draft becomes a problems.synthetic.render.Candidate that the synthetic generator's
admission (verification and WL-hash dedupe) judges like any other.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from hipevolve.core.taskspec import Scalar, Tolerance
from hipevolve.problems.synthetic.render import Candidate, Mode

TaskErrorClass = Literal[
    "empty_reply",
    "no_reference_block",
    "several_reference_blocks",
    "no_metadata",
    "malformed_json",
    "invalid_metadata",
]
_FENCE = re.compile(
    r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.MULTILINE | re.DOTALL
)
PYTHON_TAGS = frozenset({"python", "py", "python3"})


class TaskCaseDraft(BaseModel):
    """One problem size: keyword arguments of get_init_inputs (init) and get_inputs (inputs)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="case name")
    init: dict[str, Scalar] = Field(default_factory=dict, description="get_init_inputs kwargs")
    inputs: dict[str, Scalar] = Field(default_factory=dict, description="get_inputs kwargs")
    dtypes: list[str] = Field(default_factory=list, description="dtypes of the main tensors")
    timed: bool = Field(default=True, description="counts toward the speedup")
    small: bool = Field(default=False, description="runs on a CPU in well under 2 s")


class TaskDraft(BaseModel):
    """The task's metadata as one ```json block, and its reference as one ```python block
    (reference.py: class Model(nn.Module), get_inputs(**case.inputs) returning the forward's
    inputs, get_init_inputs(**case.init) returning the constructor's arguments). Give exactly
    one small case (timed false, a CPU runs it in well under 2 s) and at least one timed case
    of a realistic size. The reference must be deterministic, its outputs finite and not
    constant, and every input tensor must change the output."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{2,39}$", description="snake_case task name")
    description: str = Field(min_length=8, max_length=300, description="one line: what it computes")
    family: str = Field(
        description="elementwise, reduction, matmul, fusion, attention, conv, other"
    )
    cases: list[TaskCaseDraft] = Field(min_length=2, description="one small case, timed cases")
    tolerance: Tolerance = Field(description="kind allclose (atol, rtol) or rel_rms (max_rel_rms)")
    notes: str = Field(default="", description="why this task matters to a kernel engineer")

    @model_validator(mode="after")
    def _one_small_and_a_timed_case(self) -> TaskDraft:
        if not any(c.small for c in self.cases):
            raise ValueError("no case has small = true (the CPU check needs one)")
        if not any(c.timed for c in self.cases):
            raise ValueError("no case has timed = true")
        names = [c.name for c in self.cases]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate case names in {names}")
        return self


class TaskReply(BaseModel):
    """The outcome of reading one reply: a draft and its reference, or what was wrong."""

    model_config = ConfigDict(frozen=True)

    ok: bool
    draft: TaskDraft | None = None
    reference: str = ""
    error_class: TaskErrorClass | None = None
    message: str = ""


def _fail(error_class: TaskErrorClass, message: str) -> TaskReply:
    return TaskReply(ok=False, error_class=error_class, message=message)


def parse_task_reply(text: str) -> TaskReply:
    """The draft and reference of a reply, or ok=False with a named error class."""
    if not text.strip():
        return _fail("empty_reply", "the reply is empty")
    blocks = [(m.group(2).lower(), m.group(3)) for m in _FENCE.finditer(text)]
    python = [body for tag, body in blocks if tag in PYTHON_TAGS]
    if not python:
        return _fail("no_reference_block", "no ```python block with reference.py")
    if len(python) > 1:
        return _fail("several_reference_blocks", f"{len(python)} ```python blocks; give one")
    tagged = [body for tag, body in blocks if tag == "json"]
    if tagged:
        raw = tagged[0]
    else:  # an untagged object outside the code blocks
        rest = _FENCE.sub("", text)
        start, end = rest.find("{"), rest.rfind("}")
        if start < 0 or end < start:
            return _fail("no_metadata", "no ```json block with the task's metadata")
        raw = rest[start : end + 1]
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        return _fail("malformed_json", f"the metadata is not valid JSON: {e}")
    try:
        draft = TaskDraft.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(map(str, first["loc"])) or "metadata"
        return _fail("invalid_metadata", f"{where}: {first['msg']}")
    return TaskReply(ok=True, draft=draft, reference=python[0])


def candidate_of(draft: TaskDraft, reference: str, name: str, mode: Mode, header: str) -> Candidate:
    """The draft as the synthetic generator's Candidate, named `name`; `header` is a comment
    line saying who wrote it, put above the reference."""
    cases = [c.model_dump() for c in draft.cases]
    return Candidate(
        name=name,
        mode=mode,
        description=draft.description,
        family=draft.family,
        source=header.rstrip("\n") + "\n" + reference,
        cases=cases,
        tolerance=draft.tolerance.model_dump(exclude_none=True),
        notes=draft.notes,
    )
