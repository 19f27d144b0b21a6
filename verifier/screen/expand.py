"""C++ as the compiler sees it after macro expansion, so pasted tokens cannot hide from the screen.

`RT_CAT(dl, sym)(...)` and `RT_CAT(__attri, bute__)((constructor))` carry no forbidden token
until the preprocessor pastes them. `expanded_views` runs the system's C preprocessor over a
C++ source once per platform (the AMD and the NVIDIA defines, so both branches of a platform
guard are seen), with every file-reading directive blanked first (#include, #include_next,
#import, #embed, #line: the include screen judges those, and the preprocessor here must read
no file) and no include path at all (-nostdinc). Macros from headers stay unexpanded names.
Each view keeps the original line numbers: the output lines of one source line are joined
onto that line. The checks that find host code's escapes (constructors, dlsym, system calls,
threads, files, device state) read these views as well as the source.

No preprocessor here (or one that fails on the source): no views, and the token screen alone
judges. The compiler, which runs later, refuses what does not preprocess.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from functools import cache

from hipevolve.verifier.screen.cxx import CxxSource

PLATFORM_DEFINES = {
    "amd": ("-D__HIP_PLATFORM_AMD__=1", "-D__HIP_PLATFORM_HCC__=1", "-D__HIPCC__=1"),
    "nvidia": (
        "-D__HIP_PLATFORM_NVIDIA__=1",
        "-D__HIP_PLATFORM_NVCC__=1",
        "-D__CUDACC__=1",
        "-D__NVCC__=1",
        "-D__HIPCC__=1",
    ),
}
_FILE_DIRECTIVES = {"include", "include_next", "import", "embed", "line"}
_MARKER = re.compile(r'^#\s*(\d+)\s+"([^"]*)"')
TIMEOUT_S = 10.0
MAX_OUTPUT = 4 << 20  # bytes: a macro bomb is cut off, not screened


@cache
def preprocessor() -> str | None:
    """A C preprocessor that reads C++: gcc's (always beside nvcc), else clang's."""
    for name in ("cpp", "clang-cpp-19", "clang-cpp"):
        found = shutil.which(name)
        if found:
            return found
    return None


def expanded_views(src: CxxSource) -> list[CxxSource]:
    """The macro-expanded views of `src` (one per platform that preprocesses), same lines."""
    cpp = preprocessor()
    if cpp is None:
        return []
    lines = src.text.split("\n")
    for line, directive, _ in src.directives():
        if directive in _FILE_DIRECTIVES or directive.startswith(("include", "embed")):
            lines[line - src.line_offset - 1] = ""
    text = "\n".join(lines)
    views = []
    for defines in PLATFORM_DEFINES.values():
        out = _preprocess(cpp, text, defines)
        if out is not None:
            views.append(
                CxxSource(
                    src.file,
                    _on_original_lines(out, len(lines)),
                    inline=True,
                    line_offset=src.line_offset,
                )
            )
    return views


def _preprocess(cpp: str, text: str, defines: tuple[str, ...]) -> str | None:
    with tempfile.TemporaryDirectory(prefix="hipevolve-cpp-") as folder:
        try:
            done = subprocess.run(
                [cpp, "-x", "c++", "-std=gnu++17", "-nostdinc", "-w", *defines, "-"],
                input=text.encode(),
                capture_output=True,
                timeout=TIMEOUT_S,
                cwd=folder,
                env={},
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
    if done.returncode != 0 or len(done.stdout) > MAX_OUTPUT:
        return None
    return done.stdout.decode(errors="replace")


def _on_original_lines(output: str, count: int) -> str:
    """The preprocessor's output with each line put back on the source line it came from
    (line markers say where), several output lines of one source line joined by spaces."""
    placed: list[list[str]] = [[] for _ in range(count)]
    line, ours = 1, True
    for out in output.split("\n"):
        m = _MARKER.match(out)
        if m:
            line, ours = int(m[1]), m[2] == "<stdin>"
            continue
        if ours and out.strip() and 1 <= line <= count:
            placed[line - 1].append(out.strip())
        if ours:
            line += 1
    return "\n".join(" ".join(parts) for parts in placed)
