"""Reading and writing candidates: a native folder, a KernelBench file, or a .hip with its model.py.

Layouts accepted by `load_candidate`:
- native folder: `kernel.hip` + `model.py` (ModelNew calls the kernels through hipevolve.runtime);
- `kernel.hip` (or any `.hip` file) given directly, with a sibling `model.py`;
- `model.py` of a native folder given directly (it imports hipevolve.runtime; sibling kernel.hip);
- KernelBench file: one `.py` defining class ModelNew (usually through torch's load_inline).

Every user mistake is a UserError with the problem and its fix on one line. Nothing is imported
or executed here: Python is only parsed.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import os
import re
import tempfile
import threading
import tokenize
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from hipevolve.core.errors import UserError

MAX_SOURCE_BYTES = 1 << 20
KERNEL_FILE = "kernel.hip"
MODEL_FILE = "model.py"
_CUDA_SUFFIXES = {".cu", ".cuh"}
_CXX_SUFFIXES = {".cpp", ".cc", ".cxx", ".c", ".h", ".hpp"}


class Candidate(BaseModel):
    """What an agent (or a user) wrote: HIP source plus the Python ModelNew that calls it.

    native: `hip_source` is kernel.hip and `python_source` is model.py.
    kernelbench: `hip_source` is None; the C++ lives in `python_source` (load_inline strings).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal["native", "kernelbench"]
    hip_source: str | None
    python_source: str
    name: str
    origin: Path | None = None

    @model_validator(mode="after")
    def _layout_matches_format(self) -> Candidate:
        if self.format == "native" and self.hip_source is None:
            raise ValueError("a native candidate needs hip_source (kernel.hip)")
        if self.format == "kernelbench" and self.hip_source is not None:
            raise ValueError("a kernelbench candidate keeps its C++ inside python_source")
        return self

    @property
    def source_hash(self) -> str:
        """sha256 of the sources with comments stripped and whitespace collapsed.

        Two candidates that differ only in comments, docstrings or spacing hash alike, so the
        search never spends a compile or a GPU slot on a duplicate.
        """
        return _source_hash(self.format, self.hip_source or "", self.python_source)


@functools.lru_cache(maxsize=8192)
def _source_hash(fmt: str, hip: str, python: str) -> str:
    # Normalising parses both sources (~12 ms); the search asks for every child's hash often.
    parts = [fmt, normalize_hip(hip), normalize_python(python)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


# ----------------------------------------------------------------------------- normalisation


def strip_c_comments(source: str) -> str:
    """C/C++ source without // and /* */ comments; string and char literals and newlines kept.

    Newlines inside removed block comments are kept so line numbers still match the original.
    """
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        two = source[i : i + 2]
        if two == "//":
            j = source.find("\n", i)
            i = n if j < 0 else j
        elif two == "/*":
            j = source.find("*/", i + 2)
            end = n if j < 0 else j + 2
            out.append(" " + "\n" * source.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and source[j] != c and source[j] != "\n":
                j += 2 if source[j] == "\\" else 1
            out.append(source[i : j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def normalize_hip(source: str) -> str:
    """Comment-free HIP with whitespace collapsed (and dropped beside brackets, commas and
    semicolons); preprocessor lines stay on lines of their own, as they are written."""
    blocks: list[str] = []
    code: list[str] = []
    for line in strip_c_comments(source.replace("\\\n", " ")).splitlines():
        words = " ".join(line.split())
        if not words:
            continue
        if words.startswith("#"):  # `#define F(x)` and `#define F (x)` differ: keep as written
            if code:
                blocks.append(_squeeze(" ".join(code)))
                code = []
            blocks.append(words)
        else:
            code.append(words)
    if code:
        blocks.append(_squeeze(" ".join(code)))
    return "\n".join(blocks)


def _squeeze(code: str) -> str:
    # Spaces next to , ; ( ) { } [ ] never separate tokens: drop them.
    return re.sub(r" *([,;(){}\[\]]) *", r"\1", code)


def normalize_python(source: str) -> str:
    """Python tokens joined by single spaces: comments, docstrings and blank lines dropped.

    Indentation survives as INDENT/DEDENT markers, so only layout, not structure, is forgotten.
    Multi-line strings (load_inline sources) are normalised as C++.
    """
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return " ".join(source.split())
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING, tokenize.ENDMARKER}
    significant = [t for t in tokens if t.type not in skip]
    out: list[str] = []
    dropped_line = False
    for k, tok in enumerate(significant):
        before = significant[k - 1].type if k else tokenize.NEWLINE
        after = significant[k + 1].type if k + 1 < len(significant) else tokenize.NEWLINE
        if tok.type == tokenize.STRING:
            starts_line = before in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
            if starts_line and after == tokenize.NEWLINE:
                dropped_line = True  # a docstring or bare string statement: a comment, really
                continue
            out.append(normalize_hip(tok.string) if "\n" in tok.string else tok.string)
        elif tok.type == tokenize.INDENT:
            out.append("<INDENT>")
        elif tok.type == tokenize.DEDENT:
            out.append("<DEDENT>")
        elif tok.type == tokenize.NEWLINE:
            if not dropped_line:
                out.append(";")
            dropped_line = False
        else:
            out.append(tok.string)
    return " ".join(out)


# ----------------------------------------------------------------------------- loading


def _read(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_SOURCE_BYTES:
        raise UserError(
            f"{path}: {size} bytes, over the 1 MiB limit for a candidate source",
            "a kernel source should be a few hundred lines; remove generated code",
        )
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path}: not UTF-8 text (byte offset {e.start})", "save the file as UTF-8"
        ) from None
    if "\0" in text:
        raise UserError(f"{path}: contains NUL bytes, not a text source", "save it as plain text")
    return text


_PARSING = threading.Lock()


def parse_python(text: str, filename: str = "<unknown>") -> ast.Module:
    """ast.parse, one thread at a time: CPython 3.11 builds the tree's objects with a recursion
    counter shared by all threads, and two parses at once fail with "AST constructor recursion
    depth mismatch" (python/cpython#106905). The controller parses on several threads: agents
    writing proposals, and the compile pool screening candidates."""
    with _PARSING:
        return ast.parse(text, filename=filename)


def _parse_python(path: Path, text: str) -> ast.Module:
    try:
        return parse_python(text, str(path))
    except SyntaxError as e:
        raise UserError(
            f"{path}: Python syntax error on line {e.lineno}: {e.msg}",
            "fix the syntax; `python -m py_compile FILE` shows it too",
        ) from None


def _defines_modelnew(tree: ast.Module) -> bool:
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def _uses_runtime_bridge(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hipevolve.runtime"):
            return True
        if isinstance(node, ast.Import) and any(
            a.name.startswith("hipevolve.runtime") for a in node.names
        ):
            return True
    return False


def _model_source(path: Path) -> tuple[str, ast.Module]:
    text = _read(path)
    if not text.strip():
        raise UserError(f"{path}: empty file", "define class ModelNew(nn.Module) in it")
    tree = _parse_python(path, text)
    if not _defines_modelnew(tree):
        raise UserError(
            f"{path}: defines no class ModelNew at top level",
            "define class ModelNew(nn.Module) with the task Model's constructor "
            "arguments and forward inputs",
        )
    return text, tree


def _native(kernel: Path, model: Path, name: str, origin: Path) -> Candidate:
    hip = _read(kernel)
    if not hip.strip():
        raise UserError(
            f"{kernel}: empty file", 'write the kernels and their extern "C" launchers in it'
        )
    python, _ = _model_source(model)
    return Candidate(
        format="native", hip_source=hip, python_source=python, name=name, origin=origin
    )


def _wrong_suffix(path: Path) -> UserError:
    suffix = path.suffix.lower()
    if suffix in _CUDA_SUFFIXES:
        return UserError(
            f"{path}: CUDA source, not a HIP candidate",
            "rename it to kernel.hip (run hipify-perl on it first if it uses "
            "cuda* APIs) and put a model.py next to it",
        )
    if suffix in _CXX_SUFFIXES:
        return UserError(
            f"{path}: C/C++ file, not a candidate",
            "put the kernels in kernel.hip next to a model.py, or pass a KernelBench .py file",
        )
    return UserError(
        f"{path}: not a candidate ({suffix or 'no suffix'})",
        "pass a folder with kernel.hip and model.py, a .hip file with a sibling "
        "model.py, or a KernelBench .py file defining ModelNew",
    )


def _inside(file: Path, folder: Path) -> None:
    """Refuses a candidate file that is a link out of its folder: what is scored, archived and
    exported is the folder's own code, not a file elsewhere that may change or be private."""
    if file.is_symlink() and not file.resolve().is_relative_to(folder.resolve()):
        raise UserError(
            f"{file}: a link to {file.resolve()}, outside the candidate folder",
            f"copy the file into {folder} instead of linking it",
        )


def _load_folder(folder: Path) -> Candidate:
    entries = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    if not entries:
        raise UserError(f"{folder}: empty folder", "put kernel.hip and model.py in it")
    kernel, model = folder / KERNEL_FILE, folder / MODEL_FILE
    for file in (kernel, model):
        _inside(file, folder)
    if kernel.is_file() and model.is_file():
        return _native(kernel, model, folder.name, folder)
    if kernel.is_file():
        raise UserError(
            f"{folder}: has kernel.hip but no model.py",
            "add model.py with class ModelNew calling the kernels through "
            "`from hipevolve.runtime import kernels`",
        )
    cuda = [e for e in entries if Path(e).suffix in _CUDA_SUFFIXES]
    if cuda:
        raise _wrong_suffix(folder / cuda[0])
    other_hip = [e for e in entries if e.endswith(".hip")]
    if other_hip:
        raise UserError(
            f"{folder}: has {other_hip[0]} but no kernel.hip",
            f"rename {other_hip[0]} to kernel.hip (and add model.py if missing)",
        )
    if model.is_file():
        raise UserError(
            f"{folder}: has model.py but no kernel.hip",
            "add kernel.hip, or pass the .py file itself if it is a KernelBench candidate",
        )
    raise UserError(
        f"{folder}: no kernel.hip and no model.py (found {', '.join(entries[:5])})",
        "a native candidate folder holds kernel.hip and model.py",
    )


def _load_python(path: Path) -> Candidate:
    text, tree = _model_source(path)
    if _uses_runtime_bridge(tree):
        kernel = path.with_name(KERNEL_FILE)
        if not kernel.is_file():
            raise UserError(
                f"{path}: imports hipevolve.runtime but has no sibling kernel.hip",
                "put kernel.hip next to it, or pass the candidate folder",
            )
        return _native(kernel, path, path.parent.name, path.parent)
    return Candidate(
        format="kernelbench", hip_source=None, python_source=text, name=path.stem, origin=path
    )


def load_candidate(path: Path) -> Candidate:
    """Reads a candidate from disk; raises UserError with the problem and its fix."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file or folder", "check the candidate path")
    if path.is_dir():
        return _load_folder(path)
    if path.suffix == ".py":
        return _load_python(path)
    if path.suffix == ".hip":
        model = path.with_name(MODEL_FILE)
        if not model.is_file():
            raise UserError(
                f"{path}: no model.py next to it",
                "add model.py with class ModelNew calling the kernels through "
                "`from hipevolve.runtime import kernels`",
            )
        return _native(
            path, model, path.parent.name if path.name == KERNEL_FILE else path.stem, path.parent
        )
    raise _wrong_suffix(path)


# ----------------------------------------------------------------------------- writing


def safe_name(name: str) -> str:
    """A candidate name usable as a file or folder name."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".")
    return cleaned or "candidate"


def _write_atomic(path: Path, text: str) -> None:
    # Written beside the target and renamed, so a reader never sees half a file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_candidate(candidate: Candidate, folder: Path) -> Path:
    """Writes the candidate's layout into `folder`; returns the path load_candidate reads back.

    native: folder/kernel.hip and folder/model.py, returns folder.
    kernelbench: folder/<name>.py, returns that file.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if candidate.format == "native":
        _write_atomic(folder / KERNEL_FILE, candidate.hip_source or "")
        _write_atomic(folder / MODEL_FILE, candidate.python_source)
        return folder
    target = folder / f"{safe_name(candidate.name)}.py"
    _write_atomic(target, candidate.python_source)
    return target
