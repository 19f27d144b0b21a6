"""Whole files out of a reply's fenced code blocks (``` or ~~~, any length of three or more).

Which file a block is, first rule that says:
  1. its info string names the file (```cpp title=kernel.hip, ```kernel.hip);
  2. its first line is a comment naming the file (// kernel.hip, # model.py, // File: kernel.hip);
  3. its language tag: hip, cpp, c++, cxx, cc, c, cuda, cu, h, hpp -> kernel.hip;
     python, py, python3, py3 -> model.py; other tags (bash, json, diff, output) are not files;
  4. untagged (or ```text): the line before it is a label naming the file (File: kernel.hip,
     ### kernel.hip, **model.py**);
  5. untagged, by content: a __global__ or extern "C" function is kernel.hip, class ModelNew
     model.py; with neither, a sentence before it that names one file ("Here is the full
     kernel.hip:").
A file given by several blocks (a snippet first, then the whole file; a draft, then the fix)
is the last whole one: a kernel.hip with an extern "C" launcher, a model.py with class ModelNew.
A file given only by a fragment is refused (not_whole_file): taking it would lose the rest.
Several different whole blocks of one file are read as the prose around them says:
  - a block that is the parent's file as it stands, or that its label calls the original
    ("Original, for comparison:", "Before:"), is a quotation, not the answer;
  - of the rest, the last counts when the prose before it says it corrects the others
    ("Wait, ... Corrected version:"); alternatives ("Alternatively", "Option 2"), or prose that
    says neither, are refused (several_ambiguous_blocks): which one is the answer is a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hipevolve.agents.llm.reply_edits import label_file, named_file
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


# Prose before a later whole file that says it replaces the earlier one, or offers another.
_CORRECTS = re.compile(
    r"\b(wait|actually|oops|correct(?:ed|ion|s)?|fix(?:ed|es)?|mistake|bug|revised|updated|"
    r"final|instead|on second thought|scratch that|let me redo|should have been)\b",
    re.IGNORECASE,
)
_ALTERNATIVE = re.compile(
    r"\b(alternative(?:ly|s)?|option\s*(?:[a-z0-9]\b|\d)|options|approach\s*(?:[a-z0-9]\b)|"
    r"another (?:approach|option|version|variant|way|idea)|variants?|if you prefer|"
    r"you could also|or you can|either)\b",
    re.IGNORECASE,
)
# A label that calls the block that follows the original (a quotation for comparison).
_QUOTATION = re.compile(
    r"\bfor (?:comparison|reference)\b|^\W*(?:the |here is the |here's the )?(?:original|old|"
    r"previous|current|existing|unchanged|parent(?:'s)?|before|baseline)\b(?!.*\b(?:new|optimi[sz]ed|"
    r"updated|improved|faster|fix|fixed|with|modified|changed|corrected|revised)\b)",
    re.IGNORECASE,
)


@dataclass
class Block:
    info: str
    start: int  # 1-based line of the opening fence
    body: str
    label: str  # the non-blank line before the fence
    prose: str = ""  # the text between the previous block and this one


@dataclass(frozen=True)
class BlockError:
    error_class: str
    message: str


def fenced_blocks(lines: list[str]) -> list[Block] | BlockError:
    """The fenced blocks in order (CommonMark-style fences), or the error that stops parsing."""
    blocks: list[Block] = []
    label = ""
    prose: list[str] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            if lines[i].strip():
                label = lines[i].strip()
                prose.append(label)
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
        blocks.append(Block(info, i + 1, "\n".join(body) + "\n", label, "\n".join(prose)))
        label, prose = "", []
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
    label = label_file(block.label)
    if label is not None and named_file(label) is not None:
        return named_file(label)
    if _HIP_HINT.search(block.body):
        return KERNEL_FILE
    if _PYTHON_HINT.search(block.body):
        return MODEL_FILE
    return named_file(block.label)  # prose naming a file: only when the code says nothing


def whole_files(
    blocks: list[Block], parent: dict[str, str] | None = None
) -> dict[str, str] | BlockError:
    """file -> its text, for each file the blocks give (the last whole block of each, unless
    several differ: the rules in the module docstring); `parent`: the parent's files."""
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
            chosen = _answer(name, whole, blocks, (parent or {}).get(name))
            if isinstance(chosen, BlockError):
                return chosen
            files[name] = chosen.body
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


def _same(a: str, b: str | None) -> bool:
    return b is not None and a.split() == b.split()


def _answer(
    name: str, whole: list[Block], blocks: list[Block], parent: str | None
) -> Block | BlockError:
    """Which of a file's whole blocks is the answer (the module docstring's rules)."""
    answers = [b for b in whole if not _same(b.body, parent) and not _QUOTATION.search(b.label)]
    if not answers:
        return whole[-1]
    distinct: list[Block] = []
    for b in answers:
        if not any(_same(b.body, d.body) for d in distinct):
            distinct.append(b)
    last = answers[-1]
    if len(distinct) == 1:
        return last
    first = distinct[0]
    between = "\n".join(b.prose for b in blocks if first.start < b.start <= last.start)
    lines = ", ".join(str(b.start) for b in distinct)
    if _ALTERNATIVE.search(between):
        return BlockError(
            "several_ambiguous_blocks",
            f"the reply offers {len(distinct)} alternative {name} files (blocks at lines {lines}); "
            "give only the one to evaluate",
        )
    if _CORRECTS.search(between):
        return last
    return BlockError(
        "several_ambiguous_blocks",
        f"the reply has {len(distinct)} different whole {name} files (blocks at lines {lines}) "
        "and does not say which is the answer; give only the one to evaluate",
    )
