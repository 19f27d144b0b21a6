"""Compiling a native candidate's kernel.hip into a shared library, cached by content.

Design (FAULTS.md 22-25):
- The cache key hashes the source, the full command line (flags, target) and the toolchain's
  version; a library is published by an atomic rename into the cache, so there are no locks: a
  compile killed mid-way leaves only its own build folder, never something the next one waits on,
  and two different sources can never share an output.
- A source that preprocesses exactly as one already built (verifier/build/preprocessed.py: a
  tunable only the other vendor's code reads, say) gets that build's library, linked under its
  own key, without a compile.
- Each compile runs in a fresh build folder (removed afterwards) with the source written as
  `kernel.hip`, so compiler messages carry the candidate's own line numbers.
- Limits: wall time (the process group is killed), captured output, object size (RLIMIT_FSIZE on
  the compiler and a check on the result), address space of the compiler.
- The command line is ours alone: candidates cannot add flags, defines or include paths (their
  #includes are screened by verifier/screen). Before the real compile, the compiler's own
  dependency list (`-M`, same flags) must name only kernel.hip and the toolchain's headers
  (verifier/build/includes.py), and every log is scrubbed of files outside those folders.
- A full disk (FAULTS.md 26) is not the candidate's fault: it raises BuildDiskFull, a one-line
  UserError that pauses the run, instead of recording a compile_error against the candidate.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel

from hipevolve.core import cpu_share
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import StaticFacts
from hipevolve.verifier.build import library_check, preprocessed
from hipevolve.verifier.build.includes import check_includes, scrub_log

MAX_LOG_CHARS = 2400
COMPILER_MEMORY_BYTES = 16 << 30
SOURCE_NAME = "kernel.hip"
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


class BuildDiskFull(UserError):
    """The disk under the build cache (or the temporary folder) filled up during a compile."""


def _disk_full(cache_dir: Path, detail: str) -> BuildDiskFull:
    return BuildDiskFull(
        f"build cache {cache_dir}: the disk is full; {detail}",
        "free space on that disk, then resume the run; no candidate was marked as failing",
    )


def _free_bytes(*folders: Path) -> int:
    free = []
    for folder in folders:
        try:
            stat = os.statvfs(folder)
        except OSError:
            continue
        free.append(stat.f_bavail * stat.f_frsize)
    return min(free, default=0)


class BuildResult(BaseModel):
    ok: bool
    library: Path | None = None
    log: str = ""
    cached: bool = False
    seconds: float = 0.0
    key: str = ""
    hacked: str = ""  # why the library's host code is refused (library_check), if it is
    # The kernels' static facts as nvcc built them (cuda_static.build_facts), kept beside the
    # library; None for another compiler, or a library cached without them.
    facts: tuple[StaticFacts, ...] | None = None


class AnalysisCompileError(Exception):
    """A compile for static facts failed (verifier/build/amd_static.py, cuda_static.py); `log` is
    the compiler's output (capped), and the message its first error line."""

    failed = "device compile failed"

    def __init__(self, log: str, timed_out: bool = False) -> None:
        first = next((ln for ln in log.splitlines() if "error" in ln), log[:200])
        super().__init__(first.strip() or self.failed)
        self.log = log
        self.timed_out = timed_out


def demangle_with(tool: Path | str | None, names: list[str]) -> dict[str, str]:
    """Mangled -> readable names through a c++filt (binutils' or LLVM's); unchanged without one
    or when it fails (extern "C" names pass through either way)."""
    if not names or tool is None:
        return {n: n for n in names}
    try:
        out = subprocess.run(
            [str(tool), *names],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return {n: n for n in names}
    lines = out.stdout.splitlines()
    if out.returncode != 0 or len(lines) != len(names):
        return {n: n for n in names}
    return dict(zip(names, lines, strict=True))


class CommandResult(BaseModel):
    returncode: int | None  # None: killed at the time limit
    output: str
    seconds: float


def _limit_child(max_file_bytes: int) -> Callable[[], None]:
    lower = cpu_share.in_child(cpu_share.current())  # niced, off the judges' cores

    def apply() -> None:
        lower()
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_AS, (COMPILER_MEMORY_BYTES, COMPILER_MEMORY_BYTES))

    return apply


def run_limited(
    argv: Sequence[str], cwd: Path, timeout_s: float, max_file_bytes: int, max_output: int = 1 << 20
) -> CommandResult:
    """Runs a compiler in its own process group; kills the group at the time limit. It starts
    with the CPU-work share of hipevolve/core/cpu_share.py (niced, off the judges' cores)."""
    start = time.monotonic()
    with tempfile.TemporaryFile(dir=cwd) as out:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_limit_child(max_file_bytes),
        )
        try:
            code: int | None = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        out.seek(0)
        text = out.read(max_output).decode(errors="replace")
    return CommandResult(returncode=code, output=text, seconds=time.monotonic() - start)


def _runner(cwd: Path, timeout_s: float) -> Callable[[list[str]], tuple[int | None, str]]:
    """Runs a preprocessing command the way `build` runs the compiler: (returncode, output)."""

    def run(argv: list[str]) -> tuple[int | None, str]:
        result = run_limited(argv, cwd, timeout_s, 16 << 20)
        return result.returncode, result.output

    return run


_DIAGNOSTIC = re.compile(r"(error|warning|note)", re.I)


def _without_report(output: str) -> str:
    """A build's output without ptxas's resource report (the facts, not the log's business)."""
    return "\n".join(ln for ln in output.splitlines() if not ln.startswith("ptxas info"))


def trim_log(output: str, build_dir: Path, limit: int = MAX_LOG_CHARS) -> str:
    """Compiler output with build paths replaced by `kernel.hip`, errors first, trimmed; no
    line of a file outside the allowed header folders survives (includes.scrub_log)."""
    text = scrub_log(output, build_dir)
    text = text.replace(f"{build_dir}/", "").replace(str(build_dir), ".")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    errors = [i for i, ln in enumerate(lines) if re.search(r"\berror\b", ln, re.I)]
    if errors:  # keep each error with the two lines after it (source excerpt and caret)
        keep = sorted({j for i in errors for j in range(i, min(i + 3, len(lines)))})
        lines = [lines[j] for j in keep]
    text = "\n".join(lines)
    if len(text) > limit:
        text = text[:limit] + f"\n... ({len(text) - limit} more characters)"
    return text


def cache_key(source: str, argv_template: Sequence[str], toolchain: str) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(argv_template), toolchain):
        h.update(part.encode())
        h.update(b"\1")
    return h.hexdigest()


class Compiler(BaseModel):
    """A command that turns `kernel.hip` into `lib.so` in the current folder."""

    name: str  # cuda, rocm
    argv: tuple[str, ...]  # uses the literal names kernel.hip and lib.so
    toolchain: str  # version text: part of the cache key
    # The compiler writes its dependency list with `-M -o FILE` (clang, gcc, hipcc, nvcc): the
    # include check runs that before every compile. Off only for stand-in commands in tests.
    lists_dependencies: bool = True


def _library_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / "lib" / key[:2] / f"{key}.so"


def _preprocessed_path(cache_dir: Path, digest: str) -> Path:
    """Where the library built from what `digest` names (preprocessed.py) is linked."""
    return cache_dir / "preprocessed" / digest[:2] / f"{digest}.so"


def _same_as_built(
    compiler: Compiler, build_dir: Path, timeout_s: float, max_object_bytes: int
) -> str | None:
    """The preprocessed digest of build_dir's kernel.hip under `compiler` (preprocessed.py), or
    None where it has none (a stand-in compiler, a failed pass: the compile then decides)."""
    if not compiler.lists_dependencies:
        return None
    return preprocessed.digest(
        build_dir,
        preprocessed.passes_for(compiler.name, compiler.argv),
        compiler.argv,
        compiler.toolchain,
        lambda argv: run_limited(argv, build_dir, timeout_s, max_object_bytes * 2).returncode,
    )


def preprocessed_digest(
    source: str, compiler: Compiler, timeout_s: float = 120.0, max_object_bytes: int = 64 << 20
) -> str | None:
    """What `source` preprocesses to under `compiler` (preprocessed.py's digest), in a folder of
    its own, removed after: two sources with one digest build the same library. None where
    there is none: the include check refuses it, a pass fails, a stand-in compiler."""
    if not compiler.lists_dependencies:
        return None
    with tempfile.TemporaryDirectory(prefix="preprocess-") as name:
        folder = Path(name)
        (folder / SOURCE_NAME).write_text(source)
        if check_includes(compiler.argv, folder, _runner(folder, timeout_s)) is not None:
            return None
        return _same_as_built(compiler, folder, timeout_s, max_object_bytes)


def _link(source: Path, target: Path) -> bool:
    """Publishes `source` at `target` too (a hard link, else a copy; an atomic rename either
    way); False when `source` is not there."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        try:
            os.link(source, tmp)
        except FileNotFoundError:
            return False
        except OSError:
            shutil.copy2(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return True


def _facts_path(library: Path) -> Path:
    """Where the static facts of `library`'s build are kept: beside it."""
    return library.with_suffix(".facts.json")


def _kept_facts(library: Path) -> tuple[StaticFacts, ...] | None:
    try:
        return tuple(
            StaticFacts.model_validate(f) for f in json.loads(_facts_path(library).read_text())
        )
    except (OSError, ValueError):
        return None


def _keep_facts(library: Path, facts: list[StaticFacts]) -> None:
    """Writes the facts beside where `library` is published, before it is (atomic rename)."""
    path = _facts_path(library)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps([f.model_dump(mode="json") for f in facts]))
    os.replace(tmp, path)


SERVED_ALIKE = "preprocesses as a source already built: its library, not compiled again"


def _served(target: Path, key: str, start: float, log: str = "") -> BuildResult:
    """The library published at `target`, with the facts kept beside it: no compile."""
    return BuildResult(
        ok=True,
        library=target,
        cached=True,
        key=key,
        seconds=time.monotonic() - start,
        log=log,
        facts=_kept_facts(target),
    )


def _cached(cache_dir: Path, key: str, start: float) -> BuildResult | None:
    target = _library_path(cache_dir, key)
    return _served(target, key, start) if target.exists() else None


def cached_build(source: str, compiler: Compiler, cache_dir: Path) -> BuildResult | None:
    """The library for `source` if the cache holds it, else None (no compile)."""
    start = time.monotonic()
    return _cached(cache_dir, cache_key(source, compiler.argv, compiler.toolchain), start)


def _build_folder(cache_dir: Path, key: str) -> Path:
    try:
        (cache_dir / "build").mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f"{key[:12]}-", dir=cache_dir / "build"))
    except OSError as e:
        if e.errno in _NO_SPACE:
            raise _disk_full(cache_dir, f"no room for a build folder: {e.strerror}") from None
        raise


def _raise_if_full(build_dir: Path, cache_dir: Path, max_object_bytes: int, what: str) -> None:
    """BuildDiskFull when less than one compile may write (its file-size limit) is free."""
    free = _free_bytes(build_dir, Path(tempfile.gettempdir()))
    if free < 2 * max_object_bytes:
        raise _disk_full(
            cache_dir,
            f"{what} failed with {free} bytes free, less than the {2 * max_object_bytes}"
            " one compile may write",
        )


def build(
    source: str,
    compiler: Compiler,
    cache_dir: Path,
    timeout_s: float = 120.0,
    max_object_bytes: int = 64 << 20,
) -> BuildResult:
    """The cached library for `source`, compiling it if needed."""
    start = time.monotonic()
    key = cache_key(source, compiler.argv, compiler.toolchain)
    cached = _cached(cache_dir, key, start)
    if cached is not None:
        return cached
    target = _library_path(cache_dir, key)
    build_dir = _build_folder(cache_dir, key)
    try:
        try:
            (build_dir / SOURCE_NAME).write_text(source)
            refused = None
            if compiler.lists_dependencies:
                refused = check_includes(compiler.argv, build_dir, _runner(build_dir, timeout_s))
            if refused is not None:  # unless the dependency list had no room: not the candidate
                _raise_if_full(build_dir, cache_dir, max_object_bytes, "listing the includes")
                return BuildResult(
                    ok=False,
                    key=key,
                    seconds=time.monotonic() - start,
                    log=trim_log(refused.log, build_dir),
                )
            same = _same_as_built(compiler, build_dir, timeout_s, max_object_bytes)
            if same is not None:
                built_as = _preprocessed_path(cache_dir, same)
                _link(_facts_path(built_as), _facts_path(target))  # first: they go together
                if _link(built_as, target):
                    return _served(target, key, start, SERVED_ALIKE)
            result = run_limited(compiler.argv, build_dir, timeout_s, max_object_bytes * 2)
        except OSError as e:
            if e.errno in _NO_SPACE:
                raise _disk_full(cache_dir, f"writing the source: {e.strerror}") from None
            raise
        log = trim_log(_without_report(result.output), build_dir)
        seconds = time.monotonic() - start
        if result.returncode is None:
            return BuildResult(
                ok=False,
                key=key,
                seconds=seconds,
                log=f"compile killed after {timeout_s:.0f} s\n{log}",
            )
        produced = build_dir / "lib.so"
        if result.returncode != 0 or not produced.exists():
            # Why it failed cannot be read from its output: on a full disk the output file
            # (in the build folder) loses the linker's "No space left on device" too, and a
            # candidate could print those words itself. The disk's free space is the evidence:
            # less than one compile may write (its file-size limit) means it is full.
            _raise_if_full(build_dir, cache_dir, max_object_bytes, "a compile")
            return BuildResult(ok=False, key=key, seconds=seconds, log=log or "compiler failed")
        size = produced.stat().st_size
        if size > max_object_bytes:
            return BuildResult(
                ok=False,
                key=key,
                seconds=seconds,
                log=f"library is {size} bytes, over the {max_object_bytes} limit",
            )
        hacked = library_check.refusal(produced, compiler, cache_dir)
        if hacked:  # never published: a later lookup compiles and refuses it again
            return BuildResult(ok=False, key=key, seconds=seconds, log=log, hacked=hacked)
        facts = None
        if compiler.name == "cuda":
            from hipevolve.verifier.build.cuda_static import build_facts

            facts = build_facts(result.output, build_dir, compiler.argv)
            if facts is not None:
                _keep_facts(target, facts)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(produced, target)  # atomic publish
        if same is not None:
            if facts is not None:
                _link(_facts_path(target), _facts_path(_preprocessed_path(cache_dir, same)))
            _link(target, _preprocessed_path(cache_dir, same))
        return BuildResult(
            ok=True,
            library=target,
            key=key,
            seconds=seconds,
            log=log,
            facts=tuple(facts) if facts is not None else None,
        )
    finally:
        shutil.rmtree(build_dir, ignore_errors=True)


def build_many(
    sources: Sequence[str], compiler: Compiler, cache_dir: Path, jobs: int = 0, **limits: float
) -> list[BuildResult]:
    """Compiles in parallel on all CPU cores (or `jobs`); results in the order given."""
    remove_stale_builds(cache_dir)
    workers = jobs or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda s: build(s, compiler, cache_dir, **limits), sources))


def remove_stale_builds(cache_dir: Path, older_than_s: float = 3600.0) -> int:
    """Removes build folders left by killed compiles (they block nothing; this frees disk)."""
    removed = 0
    now = time.time()
    for entry in (cache_dir / "build").glob("*") if (cache_dir / "build").exists() else ():
        if entry.is_dir() and now - entry.stat().st_mtime > older_than_s:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed
