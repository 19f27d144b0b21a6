"""Whole files out of a reply's fenced code blocks (``` or ~~~, any length of three or more).

Which file a block is, first rule that says:
  1. its info string names the file (```cpp title=kernel.hip, ```kernel.hip);
  2. its first line is a comment naming the file (// kernel.hip, # model.py, // File: kernel.hip);
  3. its language tag: hip, cpp, c++, cxx, cc, c, cuda, cu, h, hpp -> kernel.hip;
     python, py, python3, py3 -> model.py; other tags (bash, json, diff, output) are not files;
  4. untagged (or ```text): the line before it names the file (File: kernel.hip, ### kernel.hip,
     **model.py**, "Here is the full kernel.hip:");
  5. untagged, by content: a __global__ or extern "C" function is kernel.hip, class ModelNew
     model.py.
A file given by several blocks (a snippet first, then the whole file; a draft, then the fix)
is the last whole one: a kernel.hip with an extern "C" launcher, a model.py with class ModelNew.
A file given only by a fragment is refused (not_whole_file): taking it would lose the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hipevolve.agents.llm.reply_edits import named_file
from hipevolve.core.candidate import KERNEL_FILE, MODEL_FILE

HIP_TAGS = frozenset({"hip", "cpp", "c++", "cxx", "cc", "c", "cuda", "cu", "hpp", "h"})
PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})
_UNTAGGED = frozenset({"", "text", "plaintext", "txt"})

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*?)[ \t]*$")
_HIP_HINT = re.compile(r"__global__|extern\s+\"C\"|#\s*include\s*<hip/")
_PYTHON_HINT = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)
_NAMING_COMMENT = re.compile(
    r"^\s*(?://|#)\s*(?:file(?:name)?\s*:\s*)?(?P<path>[\w./-]+\.(?:hip|cu|cpp|py))\s*$",
    re.IGNORECASE,
)
_WHOLE = {KERNEL_FILE: re.compile(r"extern\s+\"C\""), MODEL_FILE: _PYTHON_HINT}


@dataclass
class Block:
    info: str
    start: int  # 1-based line of the opening fence
    body: str
    label: str  # the non-blank line before the fence


@dataclass(frozen=True)
class BlockError:
    error_class: str
    message: str


def fenced_blocks(lines: list[str]) -> list[Block] | BlockError:
    """The fenced blocks in order (CommonMark-style fences), or the error that stops parsing."""
    blocks: list[Block] = []
    label = ""
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            if lines[i].strip():
                label = lines[i].strip()
            i += 1
            continue
        fence, info = opening["fence"], opening["info"]
        body: list[str] = []
        j = i + 1
        closed = False
        while j < len(lines):
            inner = FENCE.match(lines[j])
            # A shorter fence, or one of the other character, is content (markdown nesting).
            if inner and inner["fence"][0] == fence[0] and len(inner["fence"]) >= len(fence):
                if not inner["info"]:
                    closed = True
                    break
                return BlockError(
                    "nested_fence",
                    f"a fence opened at line {j + 1} ({lines[j].strip()}) inside the block "
                    f"opened at line {i + 1}; close each block before opening the next",
                )
            body.append(_dedent(lines[j], len(opening["indent"])))
            j += 1
        if not closed:
            if not info and not "".join(body).strip():
                break  # a stray fence at the very end with nothing after it: no block lost
            return BlockError(
                "truncated",
                f"the code block opened at line {i + 1} never closes (the reply was cut off?)",
            )
        blocks.append(Block(info, i + 1, "\n".join(body) + "\n", label))
        label = ""
        i = j + 1
    return blocks


def _dedent(line: str, width: int) -> str:
    """A block fenced inside a list item is indented: remove up to the fence's indentation."""
    k = 0
    while k < width and k < len(line) and line[k] in " \t":
        k += 1
    return line[k:]


def kind(block: Block) -> str | None:
    """Which file a block is (the rules in the module docstring), or None: not a file."""
    words = [w for w in re.split(r"[\s:{}=\"',]+", block.info.lower()) if w]
    named = named_file(" ".join(words))
    if named is not None:
        return named
    first = block.body.lstrip("\n").split("\n", 1)[0]
    comment = _NAMING_COMMENT.match(first)
    if comment:
        return named_file(comment["path"])
    tag = words[0].lstrip(".") if words else ""
    if tag in HIP_TAGS:
        return KERNEL_FILE
    if tag in PYTHON_TAGS:
        return MODEL_FILE
    if tag not in _UNTAGGED:
        return None  # bash, json, diff, output...: not a candidate file
    named = named_file(block.label)
    if named is not None:
        return named
    if _HIP_HINT.search(block.body):
        return KERNEL_FILE
    if _PYTHON_HINT.search(block.body):
        return MODEL_FILE
    return None


def whole_files(blocks: list[Block]) -> dict[str, str] | BlockError:
    """file -> its text, for each file the blocks give (the last whole block of each)."""
    found: dict[str, list[Block]] = {KERNEL_FILE: [], MODEL_FILE: []}
    for block in blocks:
        name = kind(block)
        if name is not None:
            found[name].append(block)
    if not found[KERNEL_FILE] and not found[MODEL_FILE]:
        seen = f" ({len(blocks)} blocks, none of them HIP or Python)" if blocks else ""
        return BlockError("no_code_block", f"no ```hip or ```python code block in the reply{seen}")
    files: dict[str, str] = {}
    for name, given in found.items():
        if not given:
            continue
        whole = [b for b in given if _WHOLE[name].search(b.body)]
        if whole:
            files[name] = whole[-1].body
            continue
        last = given[-1]
        if not last.body.strip():
            return BlockError("no_code_block", f"the code block at line {last.start} is empty")
        need = 'an extern "C" launcher' if name == KERNEL_FILE else "class ModelNew"
        return BlockError(
            "not_whole_file",
            f"the {name} block at line {last.start} is a fragment (it has no {need}); give the "
            "whole file, or SEARCH/REPLACE edits against the parent",
        )
    return files
