"""Checks on what reaches the compiler (FAULTS 23): how the extension is built, load_inline
flags, #include and #pragma lines, and whether model.py calls launchers kernel.hip declares."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from hipevolve.runtime import launcher_signatures
from hipevolve.verifier.screen.cxx import CxxSource, Hit
from hipevolve.verifier.screen.lexer import TRIGRAPH, joined_strings
from hipevolve.verifier.screen.registry import check
from hipevolve.verifier.screen.sources import (
    LOAD_INLINE,
    RUNTIME_KERNELS,
    Sources,
    call_argument,
    words,
)


@check("extension-build", "strict")
def extension_build(s: Sources) -> Iterator[Hit]:
    """Native candidates build through the verifier only; KernelBench ones through load_inline with
    screenable string sources and no build_directory of their own."""
    py = s.py
    if py is None:
        return
    native = s.candidate.format == "native"
    for node in py.nodes():
        if isinstance(node, (ast.Attribute, ast.Name)):
            dotted = py.resolve(node) or ""
            if dotted in ("torch.ops.load_library", "torch.classes.load_library"):
                yield py.hit(node, f"{dotted} loads native code past the verifier's build")
            elif (
                dotted.startswith("torch.utils.cpp_extension.")
                and (native or dotted != LOAD_INLINE)
                and isinstance(node.ctx, ast.Load)
            ):
                yield py.hit(
                    node,
                    f"{dotted}: "
                    + (
                        "a native candidate's kernels are compiled by the verifier from kernel.hip"
                        if native
                        else "use load_inline with string sources"
                    ),
                )
    if native:
        return
    for call in s.load_inline_calls():
        if call_argument(call, 10, "build_directory") is not None:
            yield py.hit(
                call, "load_inline(build_directory=...): the verifier picks the build directory"
            )
    yield from s.unscreenable


# load_inline flags beyond these are refused: -I, -include, -D, -L/-l, -Wl, -B, -fplugin, ...
_ALLOWED_COMPILE_FLAGS = re.compile(
    r"-O[0-3s]?|-Ofast|--?use_fast_math|-ffast-math|--?std=c\+\+(?:14|17|20)|-lineinfo|-g|-w"
    r"|-fno-strict-aliasing|-funroll-loops|--expt-relaxed-constexpr|--expt-extended-lambda"
    r"|--extended-lambda|-Xptxas=(?:-O[0-3]|-v)|--ptxas-options=-v|-arch=sm_\d+a?"
    r"|--gpu-architecture=sm_\d+a?|-gencode=arch=compute_\d+a?,code=sm_\d+a?"
    r"|--offload-arch=gfx[0-9a-f]+|--?maxrregcount=\d+|-Wno-[\w-]+|-munsafe-fp-atomics"
    r"|-fgpu-flush-denormals-to-zero|-ffp-contract=(?:fast|on|off)|--ftz=(?:true|false)"
    r"|--prec-div=(?:true|false)|--prec-sqrt=(?:true|false)|--fmad=(?:true|false)"
)
_FLAG_KEYWORDS = {
    "extra_cflags": 5,
    "extra_cuda_cflags": 6,
    "extra_sycl_cflags": 7,
    "extra_ldflags": 8,
    "extra_include_paths": 9,
}


@check("inline-build-flags", "strict", formats=("kernelbench",))
def inline_build_flags(s: Sources) -> Iterator[Hit]:
    """Compiler flags can inject includes, defines, libraries and plugins (FAULTS 23): only
    optimisation, standard, architecture and fast-math flags pass; no linker flags or paths."""
    py = s.py
    if py is None:
        return
    for call in s.load_inline_calls():
        if len(call.args) > 5:
            yield py.hit(
                call, "pass load_inline's build options by keyword so they can be screened"
            )
        for key, index in _FLAG_KEYWORDS.items():
            node = call_argument(call, index, key)
            if node is None or (isinstance(node, ast.Constant) and node.value is None):
                continue
            parts = s.strings(node)
            if parts is None:
                yield py.hit(node, f"{key} must be a literal list of strings to be screened")
                continue
            for flag, line in parts:
                if (
                    key in ("extra_cflags", "extra_cuda_cflags")
                    and _ALLOWED_COMPILE_FLAGS.fullmatch(flag.strip())
                    or not flag.strip()
                ):
                    continue
                yield Hit(s.py_file, line, f"{key} {flag!r} is outside the flag allowlist")


# Headers a kernel needs: HIP's own and freestanding C/C++ ones. No I/O, process, time or
# library headers (cstdio, cstdlib, fstream, thread, chrono, rocwmma, hipcub...).
_STD_HEADERS = words(
    """
    cstdint stdint.h cstddef stddef.h cmath math.h climits limits.h cfloat float.h type_traits
    utility limits algorithm array tuple initializer_list numeric cassert assert.h bit cstring
    string.h vector
    """
)
_INLINE_HEADERS = re.compile(
    r"(?:torch|ATen|c10)/[\w/]+\.h|cuda(?:_runtime|_runtime_api|_fp16|_bf16|_fp8)?\.h|mma\.h"
    r"|cooperative_groups(?:/\w+)?\.h|string|hip/[\w/]+\.h"
)
_HIP_HEADERS = re.compile(r"hip/[\w/]+\.h")
# The project's own portable headers (verifier/build/tiles: the tile layer), on every backend's -I.
_PROJECT_HEADERS = re.compile(r"hipevolve/tile(?:_layout)?\.h")


def _include_problem(src: CxxSource, directive: str, rest: str) -> str | None:
    if directive != "include":
        return f"#{directive} is not allowed; use #include <...> from the allowlist"
    if rest.startswith('"'):
        return f"quoted include {rest}: only <...> headers from the allowlist (FAULTS 23)"
    m = re.match(r"<([^>]*)>", rest)
    if not m:
        return f"computed #include {rest}: cannot be screened (FAULTS 23)"
    header = m[1].strip()
    if header.startswith("/") or ".." in header or "\\" in header or ":" in header:
        return f"#include <{header}>: absolute or parent paths are refused (FAULTS 23)"
    allowed = (
        header in _STD_HEADERS
        or _HIP_HEADERS.fullmatch(header)
        or (not src.inline and _PROJECT_HEADERS.fullmatch(header))
        or (src.inline and _INLINE_HEADERS.fullmatch(header))
    )
    return None if allowed else f"#include <{header}> is outside the header allowlist"


# Directives a kernel needs. #line (forges the file and line the compiler reports), #embed
# (reads a file into the program), #include_next, #import, #ident and #assert are refused.
_DIRECTIVES = words(
    """
    define undef if ifdef ifndef elif elifdef elifndef else endif include pragma error warning
    """
)
_HAS_INCLUDE = re.compile(r"\b__has_(?:include|include_next|embed)\b")
# Assembler directives that read files into the object (GNU as and LLVM's integrated assembler).
_ASM_FILE = re.compile(r"\.(?:incbin|include)\b|\bincbin\b", re.I)


@check("hip-include", "strict")
def hip_include(s: Sources) -> Iterator[Hit]:
    """An #include outside the allowlist can read host files into the build or pull in process
    and I/O APIs; quoted, absolute, parent-path and computed includes, #embed, #line,
    __has_include probes and assembler .incbin are refused (FAULTS 23). The compiler's own
    dependency list is checked again before the real compile (verifier/build/includes.py)."""
    for src in s.cxx:
        for line, directive, rest in src.directives():
            if directive in ("include", "include_next", "import"):
                problem = _include_problem(src, directive, rest)
                if problem:
                    yield Hit(src.file, line, problem)
            elif directive and directive not in _DIRECTIVES:
                yield Hit(
                    src.file,
                    line,
                    f"#{directive} {rest}".strip() + ": this directive is not allowed (FAULTS 23)",
                )
        for m in _HAS_INCLUDE.finditer(src.bare):
            arg = re.match(r"\s*\(\s*(<[^>\n]*>)\s*\)", src.code[m.end() :])
            problem = arg and _include_problem(src, "include", arg[1])
            if arg is None or problem:
                spelled = src.code[m.start() : m.end() + 40].split("\n")[0]
                yield Hit(
                    src.file,
                    src.line(m.start()),
                    f"{spelled.strip()}: probes a header outside the allowlist",
                )
        for pos, value in joined_strings(src.lexed):
            if _ASM_FILE.search(value):
                yield Hit(
                    src.file,
                    src.line(pos),
                    f"string {value[:60]!r} names an assembler "
                    "file directive (.incbin/.include): reads host files",
                )
        for m in _ASM_FILE.finditer(src.bare):
            yield Hit(
                src.file,
                src.line(m.start()),
                f"{m[0]}: assembler file directives are refused, however spelled",
            )


@check("cxx-lexing", "strict")
def cxx_lexing(s: Sources) -> Iterator[Hit]:
    """Source the screen cannot lex the way every compiler does is refused: trigraphs (read by
    gcc in strict modes, ignored by clang), unterminated comments and raw strings, malformed
    raw string delimiters."""
    for src in s.cxx:
        for pos, problem in src.lexed.errors:
            yield Hit(src.file, src.line(pos), f"{problem}: cannot be screened")
        for m in TRIGRAPH.finditer(src.text):
            line = src.line_offset + src.text.count("\n", 0, m.start()) + 1
            yield Hit(src.file, line, f"trigraph {m[0]}: spell the character itself")


_ALLOWED_PRAGMA = re.compile(
    r"(?:unroll|nounroll)(?:\s*\(?\s*\w*\s*\)?)?|once"
    r"|clang\s+loop\s+[\w\s()]+"
)


@check("hip-pragma", "strict")
def hip_pragma(s: Sources) -> Iterator[Hit]:
    """Pragmas other than unroll/once/clang loop change how the code is compiled or linked
    (optimize, comment(lib), diagnostics, push_macro) and are refused."""
    for src in s.cxx:
        for line, directive, rest in src.directives():
            if directive == "pragma" and not _ALLOWED_PRAGMA.fullmatch(rest):
                yield Hit(
                    src.file,
                    line,
                    f"#pragma {rest}: only unroll, nounroll, once and clang loop are allowed",
                )
        for m in re.finditer(r"\b_?_Pragma\s*\(\s*\"((?:\\.|[^\"\\])*)\"", src.code):
            if not _ALLOWED_PRAGMA.fullmatch(m[1].strip()):
                yield Hit(src.file, src.line(m.start()), f'_Pragma("{m[1]}") is not allowed')


@check("launcher-mismatch", "strict", formats=("native",))
def launcher_mismatch(s: Sources) -> Iterator[Hit]:
    """model.py must call extern "C" launchers that kernel.hip declares; a missing one would only
    fail after a compile and a GPU worker start."""
    if s.py is None or not s.cxx:
        return
    declared = launcher_signatures(s.cxx[0].code)
    if not declared:
        yield Hit("kernel.hip", 1, 'declares no extern "C" launcher for model.py to call')
        return
    for node in s.py.nodes():
        if isinstance(node, ast.Attribute):
            dotted = s.py.resolve(node) or ""
            name = dotted.removeprefix(RUNTIME_KERNELS + ".")
            if (
                dotted.startswith(RUNTIME_KERNELS + ".")
                and "." not in name
                and name not in declared
                and not name.startswith("_")
                and name != "bind"
            ):
                yield s.py.hit(node, f'kernels.{name}: kernel.hip declares no extern "C" {name}')
