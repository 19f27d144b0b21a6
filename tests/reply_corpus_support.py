"""Reading a reply corpus file (tests/data/replies/, tests/data/json_replies/): a TOML header
between `+++` lines, then the reply exactly as the model wrote it."""

from __future__ import annotations

import tomllib
from pathlib import Path


def load_case(path: Path) -> tuple[dict, str]:
    """(the header, the reply)."""
    text = path.read_text()
    assert text.startswith("+++\n"), f"{path.name}: no +++ header"
    head, reply = text[4:].split("\n+++\n", 1)
    return tomllib.loads(head), reply
