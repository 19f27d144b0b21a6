"""The output folders of the exports: refusing a bad --out, staging beside it, publishing by a
rename, and the templates the written files are rendered from.

Shared by export.py (the package), dataset.py and report.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hipevolve.core.errors import UserError

TEMPLATES = Path(__file__).resolve().parent / "templates"
MARKER = ".hipevolve-export"  # names a folder evolve export wrote: --force may replace it whole
_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")


def check_output(out: Path, force: bool, flag: str = "--out") -> None:
    """Refuses a file, a non-empty folder without --force, or a place nothing can be written,
    before any work is done."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{flag} {out} is a file, not a folder", f"pass a folder path for {flag}")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(
            f"{flag} {out} exists and is not empty", "pass --force to replace its contents"
        )
    check_writable(out, flag)


def check_writable(out: Path, flag: str) -> None:
    """Refuses, in one line, an output path under a file or in a folder that cannot be written:
    tried with a temporary file where the path's first existing folder is (permission bits say
    nothing of a read-only disk, nor of root)."""
    where = out if out.is_dir() else out.parent
    while not where.exists() and where != where.parent:
        where = where.parent
    fix = f"pass a {flag} path in a folder you can write to"
    if not where.is_dir():
        raise UserError(f"{flag} {out}: {where} is a file, so nothing can be written under it", fix)
    try:
        tempfile.TemporaryFile(dir=where).close()
    except OSError as e:
        raise UserError(f"{flag} {out}: cannot write in {where} ({e.strerror or e})", fix) from None


def staging_folder(out: Path) -> Path:
    """A fresh folder beside `out` (same file system, so publishing is a rename)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))


def publish(staged: Path, out: Path, kind: str) -> None:
    """Moves the staged folder to `out`.

    A folder that a previous export wrote (it holds MARKER) is replaced whole; any other
    non-empty folder keeps the files this export does not write, so --force on a folder of the
    user's own never deletes them.
    """
    (staged / MARKER).write_text(json.dumps({"kind": kind, "written": now()}) + "\n")
    if not out.exists():
        os.rename(staged, out)
    elif not any(out.iterdir()):
        out.rmdir()
        os.rename(staged, out)
    elif (out / MARKER).is_file():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
        os.rename(out, old / "previous")
        os.rename(staged, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        shutil.copytree(staged, out, dirs_exist_ok=True)
        shutil.rmtree(staged, ignore_errors=True)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def render(template: str, values: dict[str, str]) -> str:
    """The template file with each {{NAME}} replaced; an unknown name is a KeyError."""
    text = (TEMPLATES / template).read_text()
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
