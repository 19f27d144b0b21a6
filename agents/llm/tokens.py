"""Counting tokens offline: cl100k_base, the tokenizer litellm falls back to, from the copy
litellm ships (no download)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def count_tokens(text: str) -> int:
    """cl100k_base tokens of `text` (litellm's fallback tokenizer, from litellm's own copy)."""
    import tiktoken

    spec = importlib.util.find_spec("litellm")
    if spec and spec.submodule_search_locations:
        folder = Path(spec.submodule_search_locations[0]) / "litellm_core_utils" / "tokenizers"
        os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(folder))
    return len(tiktoken.get_encoding("cl100k_base").encode(text, disallowed_special=()))
