"""What a compile reads after preprocessing, as one digest: two sources whose every
preprocessing pass gives the same text build the same code, so the second is served from the
first's build without a compile.

The common case is a tunable that only one vendor's code reads: the GDN seed's MFMA_KSTEP and
AMD_STATE_BF16 sit under `#if defined(__HIP_PLATFORM_AMD__)`, so on NVIDIA every value of them
preprocesses to the same text, and each such candidate used to cost an nvcc build (5 s on 2
cores) and a facts build beside it, only for machine_code.py to call it a copy afterwards.
Preprocessing the same source takes about 0.2 s.

Why it is sound: after preprocessing, a compiler driver's later steps read only the
preprocessed files and their own flags. nvcc's are the `gcc -E` lines `nvcc --dryrun` lists (one
host pass, one device pass per architecture): cudafe++, cicc, ptxas, fatbinary and the host gcc
read their outputs. clang's HIP driver compiles each offload pass from its own -E output
(`--offload-host-only`, `--offload-device-only`, one architecture each). The digest hashes
those outputs with line markers (so `-lineinfo` matches as well), the full command line and the
toolchain's version. What two such builds still differ in is the build folder's name in nvcc's
module ids, which machine_code.py's digest ignores.

What it does not do: recognise sources that differ after preprocessing (a renamed variable, a
reordered function). Those compile, and machine_code.py may still find them copies.
What it protects against: a source that reads a file it should not: its preprocessed text
reaches only a hash in memory (no log, no file outside the build folder), and a lookup writes
nothing; the compile that follows a miss runs the include check as before. A pass that hangs
or writes without end meets the compile's own time and file-size limits.
"""

from __future__ import annotations

import hashlib
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

OUTPUT = "pass-{}.ii"  # the file each pass writes in the build folder


def nvcc_passes(argv: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """The preprocessing commands nvcc runs for `argv` (its `gcc -E` lines under --dryrun), each
    writing OUTPUT.format(i). Empty when they cannot be read: nothing is then recognised."""
    return _nvcc_passes(tuple(argv))


@cache
def _nvcc_passes(argv: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    with tempfile.TemporaryDirectory(prefix="dryrun-") as folder:
        Path(folder, "kernel.hip").write_text("")
        try:
            done = subprocess.run(
                [*argv, "--dryrun"], cwd=folder, capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            return ()
    if done.returncode != 0:
        return ()
    passes = []
    for line in (done.stdout + done.stderr).splitlines():
        if not line.startswith("#$ ") or " -E " not in line:
            continue
        words = shlex.split(line[3:])
        if "-o" not in words or any("$" in w for w in words):
            return ()  # a line that needs the driver's own variables: not ours to run
        words[words.index("-o") + 1] = OUTPUT.format(len(passes))
        passes.append(tuple(words))
    return tuple(passes)


def clang_hip_passes(argv: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """The preprocessing commands of a hipcc or clang HIP compile: the host pass (unless the
    compile is --offload-device-only) and one device pass per --offload-arch (clang's driver
    refuses -E -o for several at once)."""
    base, arches, skip = [], [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "-o":
            skip = True
        elif word.startswith("--offload-arch="):
            arches.append(word)
        elif word not in ("-shared", "--offload-device-only"):
            base.append(word)
    passes = []
    if "--offload-device-only" not in argv:
        passes.append((*base, *arches, "-E", "--offload-host-only"))
    passes += [(*base, arch, "-E", "--offload-device-only") for arch in arches]
    return tuple((*p, "-o", OUTPUT.format(i)) for i, p in enumerate(passes))


def passes_for(compiler: str, argv: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """The preprocessing passes of the cuda (nvcc) or rocm (hipcc) command `argv`; () for any
    other compiler."""
    if compiler == "cuda":
        return nvcc_passes(argv)
    if compiler == "rocm":
        return clang_hip_passes(argv)
    return ()


def digest(
    folder: Path,
    passes: Sequence[Sequence[str]],
    argv: Sequence[str],
    toolchain: str,
    run: Callable[[list[str]], int | None],
    source: str | None = None,
) -> str | None:
    """The digest of what `passes` produce from `folder`'s kernel.hip (written from `source`
    first, when given), with `argv` and `toolchain`; None when there are no passes or one fails
    (the compile then decides). `run(argv)` runs a command in `folder` under the compile's
    limits and returns its exit code, None when killed."""
    if not passes:
        return None
    if source is not None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "kernel.hip").write_text(source)
    h = hashlib.sha256()
    for part in ("\0".join(argv), toolchain):
        h.update(part.encode() + b"\1")
    for i, command in enumerate(passes):
        out = folder / OUTPUT.format(i)
        if run(list(command)) != 0 or not out.exists():
            return None
        h.update(out.read_bytes() + b"\1")
        out.unlink()
    return h.hexdigest()
