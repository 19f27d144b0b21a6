"""Counting tokens offline: cl100k_base, the tokenizer litellm falls back to, from the copy
litellm ships (no download). Where that copy cannot be read (another tiktoken's cache name, no
litellm) and nothing can be downloaded (a GPU machine without a network), the count is an
estimate of 4 bytes a token, cl100k_base's average on English and code, not an error."""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
from pathlib import Path

BYTES_PER_TOKEN = 4  # the estimate's rate where the tokenizer cannot be loaded

log = logging.getLogger(__name__)


@functools.cache
def _encoding():  # noqa: ANN202 (a tiktoken Encoding, or None)
    """cl100k_base from litellm's copy, or None (logged once) when it cannot be loaded."""
    try:
        import tiktoken

        spec = importlib.util.find_spec("litellm")
        if spec and spec.submodule_search_locations:
            folder = Path(spec.submodule_search_locations[0]) / "litellm_core_utils" / "tokenizers"
            os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(folder))
        return tiktoken.get_encoding("cl100k_base")
    except Exception as e:  # noqa: BLE001 (an import, a missing cache, a failed download)
        log.warning(
            "token counts are estimates (%d bytes a token): cl100k_base cannot be loaded (%s: %s)",
            BYTES_PER_TOKEN,
            type(e).__name__,
            str(e)[:120],
        )
        return None


def count_tokens(text: str) -> int:
    """cl100k_base tokens of `text` (litellm's fallback tokenizer, from litellm's own copy), or
    an estimate from its length where that tokenizer cannot be loaded."""
    encoding = _encoding()
    if encoding is None:
        return -(-len(text.encode()) // BYTES_PER_TOKEN)
    return len(encoding.encode(text, disallowed_special=()))
