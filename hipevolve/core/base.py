"""The one base of the project's value types (frozen, refusing fields it does not know), and the
canonical JSON that settings keys and stored settings are written in."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """A value: immutable once built, and unknown fields are an error, not silently dropped."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def canonical_json(value: BaseModel | Mapping[str, Any]) -> str:
    """Sorted keys, no spaces: equal values give equal text (settings keys, stored settings)."""
    data = value.model_dump(mode="json") if isinstance(value, BaseModel) else dict(value)
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
