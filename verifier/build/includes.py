"""Which files a compile reads, asked of the compiler itself, and logs that show none of the rest.

The screen reads `#include` lines (verifier/screen/toolchain.py), but what a directive names is
the preprocessor's business: macros, splices, digraphs and `__has_include` decide it. So before
the real compile, the same command line runs once more with `-M` (both clang and nvcc): the
dependency list it writes is every file the preprocessor opened, resolved through the same
flags and include paths. Every entry must be the candidate's own kernel.hip or lie under the
toolchain's header folders (`header_roots`); otherwise the compile does not run and the verdict
names the file, never its content.

Logs: a compiler quotes the lines it complains about, so a diagnostic located in a file outside
those folders (and the excerpt under it) is replaced by one line naming the file
(`scrub_log`). This runs on every log, so a file the dependency check missed still cannot
reach a prompt through the log.

What this does not cover: the assembler's `.incbin` (the screen refuses it in any spelling it
can see; a file read that way reaches the library's data, not the log) and `#embed`, which the
screen refuses outright.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import NamedTuple

from hipevolve.verifier.build.nvidia import include_dir
from hipevolve.verifier.build.tile_headers import tile_include_dir

SOURCE_NAME = "kernel.hip"
DEPS_NAME = "deps.d"


def project_headers() -> list[Path]:
    """The project's headers a compile may read besides the toolchain's (the HIP-on-NVIDIA
    layer's and the tile layer's), for cache keys."""
    return sorted(include_dir().rglob("*.h")) + sorted(tile_include_dir().rglob("*.h"))


@cache
def system_roots() -> tuple[Path, ...]:
    """Folders of system and toolchain headers and binaries: public files, safe to name and
    quote in a log."""
    patterns = [
        "/usr/include",
        "/usr/lib/gcc",
        "/usr/lib/llvm-*",
        "/usr/local/cuda*",
        "/opt/rocm*",
        "/opt/hipevolve-amd",
        "/usr/bin",
        "/usr/libexec",
    ]
    found = {Path(os.path.realpath(p)) for pattern in patterns for p in glob.glob(pattern)}
    found.add(include_dir().resolve())
    found.add(tile_include_dir())
    return tuple(sorted(found))


def header_roots(argv: Sequence[str]) -> tuple[Path, ...]:
    """The folders a compile may read headers from: the system's, the compiler's own prefix
    and the include paths the command line names (-I, -isystem, --rocm-path)."""
    roots = set(system_roots())
    tool = Path(os.path.realpath(argv[0]))
    prefix = tool.parent.parent
    roots |= {prefix / "include", prefix / "lib", prefix / "targets"}
    for i, arg in enumerate(argv):
        for flag in ("-I", "-isystem", "--rocm-path="):
            if arg == flag.rstrip("=") and i + 1 < len(argv):
                folder = argv[i + 1]
            elif arg.startswith(flag) and len(arg) > len(flag):
                folder = arg[len(flag) :]
            else:
                continue
            path = Path(os.path.realpath(folder))
            roots.add(path / "include" if flag == "--rocm-path=" else path)
    return tuple(sorted(roots))


def _inside(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def parse_dependencies(text: str) -> list[str]:
    """The prerequisites of every Makefile rule `-M` writes (escaped spaces kept). A HIP compile
    for several offload targets writes one rule per target inside an offload bundle, whose
    marker lines are Makefile comments (`# __CLANG_OFFLOAD_BUNDLE____START__ ...`)."""
    joined = text.replace("\\\n", " ")
    deps: list[str] = []
    for rule in joined.split("\n"):
        if not rule.strip() or rule.lstrip().startswith("#"):
            continue
        _, sep, rest = rule.partition(": ")
        if not sep:
            _, _, rest = rule.partition(":")
        words = re.findall(r"(?:\\.|[^\s\\])+", rest)
        deps += [re.sub(r"\\(.)", r"\1", w).replace("$$", "$") for w in words]
    return list(dict.fromkeys(deps))


def dependency_argv(argv: Sequence[str]) -> list[str]:
    """The compile's command line made to write its dependency list to deps.d instead."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "-o":
            skip = True
            continue
        if arg.startswith("-o") and len(arg) > 2 and not arg.startswith("-o="):
            continue
        out.append(arg)
    return [*out, "-M", "-o", DEPS_NAME]


def outside_files(deps: Sequence[str], cwd: Path, roots: Sequence[Path]) -> list[str]:
    """Entries of a dependency list that are neither kernel.hip nor under `roots`."""
    source = (cwd / SOURCE_NAME).resolve()
    bad = []
    for dep in deps:
        path = Path(os.path.realpath(cwd / dep))
        if path != source and not _inside(path, roots):
            bad.append(dep)
    return bad


class Refusal(NamedTuple):
    """Why the compile does not run: the verdict's log, and whether the time limit ended it."""

    log: str
    timed_out: bool = False


def check_includes(
    argv: Sequence[str], cwd: Path, run: Callable[[list[str]], tuple[int | None, str]]
) -> Refusal | None:
    """None when every file the compile would read is allowed; else a Refusal whose log names
    the offending file (or carries the scrubbed preprocessor errors). `run(argv)` runs a
    command in `cwd` the way the caller runs its compiler: (returncode, output), returncode
    None when killed at the time limit."""
    deps_file = cwd / DEPS_NAME
    deps_file.unlink(missing_ok=True)
    code, output = run(dependency_argv(argv))
    roots = header_roots(argv)
    if code is None:
        return Refusal("compile killed at the time limit (while listing its includes)", True)
    if code != 0 or not deps_file.exists():
        return Refusal(scrub_log(output, cwd, roots) or "the preprocessor failed")
    deps = parse_dependencies(deps_file.read_text(errors="replace"))
    deps_file.unlink(missing_ok=True)
    bad = outside_files(deps, cwd, roots)
    if not bad:
        return None
    shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
    return Refusal(
        f"an #include resolves to {shown}, outside the allowed header folders: "
        "refused before compiling (FAULTS 23)"
    )


# A diagnostic's location: clang and gcc write `file:line:col:`, nvcc's front end `file(line):`;
# include stacks `In file included from file:line:` and `                 from file:line:`.
_LOCATION = re.compile(
    r"^(?P<lead>\s*(?:In file included from|from)\s+)?(?P<file>[^\s:()][^:()]*?)"
    r"(?::\d+(?::\d+)?|\(\d+\))?:(?=\s|$)"
)


def _located_file(line: str) -> str | None:
    m = _LOCATION.match(line)
    if not m:
        return None
    name = m["file"]
    # A location names a path: a folder separator or a file extension, no spaces.
    return name if ("/" in name or "." in name) and " " not in name else None


def scrub_log(output: str, build_dir: Path, roots: Sequence[Path] | None = None) -> str:
    """`output` with every diagnostic located outside kernel.hip and `roots` (default: the
    system's header folders) replaced by one line naming the file, and its excerpt dropped."""
    roots = tuple(roots) if roots is not None else system_roots()
    # The candidate's own files: kernel.hip, or the main.cpp and cuda.cu a KernelBench
    # extension's build writes from its sources; their diagnostics stay.
    own = {(build_dir / name).resolve() for name in (SOURCE_NAME, "main.cpp", "cuda.cu")}
    kept: list[str] = []
    hiding = False
    for line in output.splitlines():
        name = _located_file(line)
        if name is not None:
            path = Path(os.path.realpath(build_dir / name))
            hiding = path not in own and not _inside(path, roots)
            if hiding:
                kind = re.search(r"\b(fatal error|error|warning|note|remark)\b", line)
                note = (
                    f"{name}: {kind[1] if kind else 'diagnostic'} in a file outside the "
                    "allowed header folders (not shown)"
                )
                if not kept or kept[-1] != note:
                    kept.append(note)
                continue
        elif hiding and not line.startswith(("At end of source", "kernel.hip")):
            continue
        kept.append(line)
    return "\n".join(kept)
