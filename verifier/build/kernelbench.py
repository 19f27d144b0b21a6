"""The build stage of KernelBench-format candidates (a .py file whose ModelNew builds its C++ with
torch's load_inline).

A KernelBench candidate's Python is arbitrary: it runs only in a recorder, and the sandbox replays
the aten ops and extension calls it made (verifier/gpu/sandbox/record_kb.py, replay_kb.py). The
compile moves out of the sandbox too. So:

- `extensions` reads every load_inline call of the file statically (ast, never imported): its
  name, sources, functions and flags must be literals or names bound once to literals (the
  static screen refuses anything else before this stage runs).
- `build` compiles each extension in a build process of its own, outside the sandbox, into a
  cache folder keyed by the extension, the backend, torch and the compiler; load_inline writes
  the sources and runs ninja there, and its final import is skipped, so no candidate code runs
  in the build process. The sandbox then only loads the built libraries
  (verifier/gpu/sandbox/prebuilt.py: its load_inline returns the prebuilt module and compiles
  nothing, so the sandbox starts no processes). Before a build is published, and again when it is
  found in the cache, each library's imports are read (kb_library_check.py): one whose C++ can
  compute with PyTorch or a vendor library beside its own kernels is `hacked` and never published.
- `static_facts` is the static backend's answer for such a candidate: the device code of its
  sources (host functions that use torch dropped, CUDA hipified, templates with one type
  parameter instantiated for float) compiled for gfx942; or a clear "nothing compiled".

Less isolated than native candidates, and said so in every verdict: the candidate's Python runs
only in a recorder process and is replayed from a plan (verifier/gpu/sandbox/record_kb.py,
replay_kb.py), but its C++ is a PyTorch extension that may call any of libtorch, and it runs in
the sandbox beside the checks and the timer.

KernelBench's HIP example sets `os.environ["CXX"] = "hipcc"` so that torch compiles its
cpp_sources with hipcc. `without_compiler_choice` drops that one statement (and `import os`
when nothing else uses it) before screening: the build stage picks the compiler (hipcc on ROCm;
on NVIDIA the HIP code is compiled as CUDA through the project's HIP-to-CUDA headers).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from hipevolve.core.candidate import Candidate, strip_c_comments
from hipevolve.core.evaluation import StaticFacts

LESS_ISOLATED = (
    "kernelbench: less isolated than a native candidate (its Python runs only in a "
    "recorder, replayed from a plan; its extension, built outside the sandbox, runs "
    "beside the checks)"
)
_COMPILER_KEYS = ("CXX", "CC")
_LISTS = (
    "cpp_sources",
    "cuda_sources",
    "functions",
    "extra_cflags",
    "extra_cuda_cflags",
    "extra_ldflags",
    "extra_include_paths",
)


class KernelBenchBuildError(Exception):
    """The file's extensions cannot be built (one line: why)."""


class InlineExtension(BaseModel):
    """One load_inline call, as read from the file."""

    model_config = ConfigDict(frozen=True)

    name: str
    cpp_sources: tuple[str, ...] = ()
    cuda_sources: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    extra_cflags: tuple[str, ...] = ()
    extra_cuda_cflags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()
    extra_include_paths: tuple[str, ...] = ()

    @property
    def hip_in_cpp(self) -> bool:
        """Kernels in cpp_sources: KernelBench's HIP convention (compiled with CXX=hipcc)."""
        return any("__global__" in strip_c_comments(s) for s in self.cpp_sources)


class ExtensionsBuild(BaseModel):
    """The build stage's result: the folder holding `<name>.so` per extension, or the log."""

    ok: bool
    folder: Path | None = None
    log: str = ""
    cached: bool = False
    hacked: str = ""  # why an extension is refused (kb_library_check): nothing is published


# ------------------------------------------------------------------------ reading the file


def without_compiler_choice(candidate: Candidate) -> tuple[Candidate, tuple[str, ...]]:
    """The candidate without module-level `os.environ["CXX"] = "<literal>"` (and `import os` if
    nothing else reads `os`), and a flag saying so; the candidate itself when it has none."""
    if candidate.format != "kernelbench":
        return candidate, ()
    try:
        tree = ast.parse(candidate.python_source)
    except (SyntaxError, ValueError):
        return candidate, ()
    dropped = [n for n in tree.body if _sets_compiler(n)]
    if not dropped:
        return candidate, ()
    uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "os"]
    inside = {id(n) for d in dropped for n in ast.walk(d)}
    if all(id(n) in inside for n in uses):
        dropped += [
            n
            for n in tree.body
            if isinstance(n, ast.Import)
            and [a.name for a in n.names] == ["os"]
            and n.names[0].asname is None
        ]
    lines = candidate.python_source.splitlines(keepends=True)
    for node in dropped:  # blanked, so line numbers in later messages still match the file
        for i in range(node.lineno - 1, node.end_lineno or node.lineno):
            lines[i] = "\n"
    text = "".join(lines)
    flag = "kernelbench: os.environ['CXX'] dropped: the build stage picks the compiler"
    return candidate.model_copy(update={"python_source": text}), (flag,)


def _sets_compiler(node: ast.stmt) -> bool:
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
        return False
    target, value = node.targets[0], node.value
    return (
        isinstance(target, ast.Subscript)
        and isinstance(target.value, ast.Attribute)
        and isinstance(target.value.value, ast.Name)
        and target.value.value.id == "os"
        and target.value.attr == "environ"
        and isinstance(target.slice, ast.Constant)
        and target.slice.value in _COMPILER_KEYS
        and isinstance(value, ast.Constant)
        and isinstance(value.value, str)
    )


def extensions(candidate: Candidate) -> list[InlineExtension]:
    """Every load_inline call of a KernelBench file; KernelBenchBuildError when one is not
    statically known."""
    from hipevolve.verifier.screen.sources import Sources, call_argument

    sources = Sources.build(candidate)
    if sources.py is None:
        raise KernelBenchBuildError(sources.syntax_error or "not valid Python")
    found = []
    for call in sources.load_inline_calls():
        fields: dict[str, object] = {}
        for index, key in enumerate(("name", *_LISTS)):
            node = call_argument(call, index if index < 3 else 99, key)
            if node is None or (isinstance(node, ast.Constant) and node.value is None):
                continue
            parts = sources.strings(node)
            if parts is None:
                raise KernelBenchBuildError(
                    f"load_inline's {key} (line {call.lineno}) is not a literal: the build "
                    "stage builds only what it can read"
                )
            fields[key] = parts[0][0] if key == "name" else tuple(t for t, _ in parts)
        if "name" not in fields:
            raise KernelBenchBuildError(f"load_inline (line {call.lineno}) has no literal name")
        found.append(InlineExtension.model_validate(fields))
    names = [e.name for e in found]
    if len(set(names)) != len(names):
        raise KernelBenchBuildError(f"two load_inline calls share a name: {names}")
    return found


# ------------------------------------------------------------------------ building for a GPU


def _cpp_declarations(ext: InlineExtension) -> str:
    """Declarations of the bound functions, read from their definitions in cpp_sources."""
    text = strip_c_comments("\n".join(ext.cpp_sources))
    out = []
    for name in ext.functions:
        m = re.search(r"([\w:<>,\s*&]+?)\b" + re.escape(name) + r"\s*\(([^)]*)\)\s*\{", text)
        if m is None:
            raise KernelBenchBuildError(f"cannot find the definition of {name} in cpp_sources")
        out.append(f"{m[1].strip()} {name}({m[2].strip()});")
    return "#include <torch/extension.h>\n" + "\n".join(out) + "\n"


def build_plan(ext: InlineExtension, backend: str) -> tuple[dict, dict[str, str]]:
    """The load_inline keyword arguments and the environment for `backend`."""
    from hipevolve.verifier.build.nvidia import include_dir

    kwargs = {k: list(getattr(ext, k)) for k in _LISTS}
    env: dict[str, str] = {}
    if ext.hip_in_cpp and backend == "cuda":
        # HIP in cpp_sources: compiled as CUDA through the HIP-to-CUDA headers; the bindings
        # (main.cpp) see declarations only.
        kwargs["cuda_sources"] = kwargs["cpp_sources"] + kwargs["cuda_sources"]
        kwargs["cpp_sources"] = [_cpp_declarations(ext)]
        kwargs["extra_cuda_cflags"] = [f"-I{include_dir()}", *kwargs["extra_cuda_cflags"]]
    elif ext.hip_in_cpp and backend == "rocm":
        env["CXX"] = shutil.which("hipcc") or "/opt/rocm/bin/hipcc"
    elif backend == "cpu" and (ext.hip_in_cpp or ext.cuda_sources):
        raise KernelBenchBuildError(f"{ext.name} has GPU code: the cpu backend builds plain C++")
    return kwargs, env


def _toolchain_stamp(backend: str) -> str:
    import torch

    from hipevolve.verifier.build import backends

    arch = {"cuda": backends._cuda_arch, "rocm": backends._rocm_arch}.get(backend, str)()
    return f"{backend} {arch} torch {torch.__version__} {torch.version.cuda} {torch.version.hip}"


def _arch_env(backend: str) -> dict[str, str]:
    from hipevolve.verifier.build import backends

    if backend == "cpu":
        return {}
    if backend == "cuda":
        arch = backends._cuda_arch().removeprefix("sm_")
        return {"TORCH_CUDA_ARCH_LIST": f"{arch[:-1]}.{arch[-1]}"}
    return {"PYTORCH_ROCM_ARCH": backends._rocm_arch()}


def build(
    candidate: Candidate,
    backend: str,
    cache_dir: Path,
    timeout_s: float = 600.0,
    *,
    library_check: bool = True,
) -> ExtensionsBuild:
    """Every extension of the file built for `backend` (cuda, rocm, or cpu for plain C++),
    cached; the folder holds `<name>.so` per extension. library_check: each library's imports
    are read (kb_library_check) and a refused one is never published; off only for the
    trusted baseline (python_baseline)."""
    from hipevolve.verifier.build.compile import run_limited, trim_log

    try:
        exts = extensions(candidate)
        plans = [(e, *build_plan(e, backend)) for e in exts]
    except KernelBenchBuildError as e:
        return ExtensionsBuild(ok=False, log=str(e))
    stamp = _toolchain_stamp(backend)
    key = hashlib.sha256(
        json.dumps([stamp, [[e.name, k, v] for e, k, v in plans]], sort_keys=True).encode()
    ).hexdigest()[:24]
    folder = cache_dir / "kernelbench" / key
    if all((folder / f"{e.name}.so").is_file() for e in exts):
        # checked again: a cache may hold what an older version of the check let through
        hacked = _refusal(folder, exts, backend, cache_dir) if library_check else ""
        return ExtensionsBuild(
            ok=not hacked, folder=None if hacked else folder, cached=True, hacked=hacked
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=folder.parent))
    try:
        for ext, kwargs, env in plans:
            workdir = staging / ext.name
            workdir.mkdir()
            spec = {"name": ext.name, "kwargs": kwargs, "env": {**_arch_env(backend), **env}}
            (workdir / "spec.json").write_text(json.dumps(spec))
            argv = [
                sys.executable,
                "-m",
                "hipevolve.verifier.build.kernelbench",
                str(workdir / "spec.json"),
            ]
            done = run_limited(argv, workdir, timeout_s, max_file_bytes=1 << 30)
            built = workdir / "build" / f"{ext.name}.so"
            if done.returncode != 0 or not built.is_file():
                why = "timed out" if done.returncode is None else "does not build"
                return ExtensionsBuild(
                    ok=False, log=f"{ext.name} {why}:\n" + trim_log(done.output, workdir / "build")
                )
            shutil.copy2(built, staging / f"{ext.name}.so")
        for ext in exts:
            shutil.rmtree(staging / ext.name, ignore_errors=True)
        hacked = _refusal(staging, exts, backend, cache_dir) if library_check else ""
        if hacked:  # never published: a later build refuses it again
            return ExtensionsBuild(ok=False, hacked=hacked)
        with contextlib.suppress(OSError):  # another thread built the same key first: keep it
            os.replace(staging, folder)
        return ExtensionsBuild(ok=True, folder=folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _refusal(folder: Path, exts: list[InlineExtension], backend: str, cache_dir: Path) -> str:
    """Why one of the built extensions in `folder` is `hacked` (its C++ computes with PyTorch,
    a vendor library or Python beside the dispatcher), or ''."""
    from hipevolve.verifier.build import kb_library_check

    baseline = python_baseline(backend, cache_dir)
    for ext in exts:
        hacked = kb_library_check.refusal(folder / f"{ext.name}.so", baseline)
        if hacked:
            return hacked
    return ""


# The smallest extension a KernelBench file can have: its bindings' Python C API imports are
# what any extension built by this toolchain imports (pybind11's and torch's own).
BASELINE_SOURCE = '''import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor hipevolve_same(torch::Tensor x) { return x; }
"""
ext = load_inline(name="hipevolve_kb_baseline", cpp_sources=cpp_source,
                  functions=["hipevolve_same"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.hipevolve_same(x)
'''


@functools.cache
def python_baseline(backend: str, cache_dir: Path) -> frozenset[str] | None:
    """The Python-running imports (kb_library_check.python_calls) of BASELINE_SOURCE's
    extension built for `backend` like any candidate's (cached in `cache_dir`, in a folder of
    its own), or None where it cannot be built: the library check's Python rule is then off."""
    from hipevolve.core.candidate import load_candidate
    from hipevolve.verifier.build import kb_library_check

    own = cache_dir / "kernelbench_baseline"  # apart from the candidates' builds
    source = own / "python_baseline.py"
    try:
        own.mkdir(parents=True, exist_ok=True)
        source.write_text(BASELINE_SOURCE)
        built = build(load_candidate(source), backend, own, library_check=False)
        if not built.ok or built.folder is None:
            return None
        return kb_library_check.python_calls(
            kb_library_check.imports(built.folder / "hipevolve_kb_baseline.so")
        )
    except (OSError, kb_library_check.ToolError, KernelBenchBuildError):
        return None


def main() -> None:
    """`python -m hipevolve.verifier.build.kernelbench SPEC.json`: the build process. It runs
    load_inline with build_directory=./build and skips load_inline's final import, so the
    candidate's library is compiled here and never loaded."""
    spec = json.loads(Path(sys.argv[1]).read_text())
    os.environ.update(spec["env"])
    import torch.utils.cpp_extension as cpp

    cpp._import_module_from_library = lambda *args, **kwargs: None  # build, do not load
    build_dir = Path(sys.argv[1]).parent / "build"
    build_dir.mkdir(exist_ok=True)
    kwargs = {k: v for k, v in spec["kwargs"].items() if v}
    cpp.load_inline(
        spec["name"],
        cpp_sources=kwargs.pop("cpp_sources", []),
        build_directory=str(build_dir),
        verbose=True,
        **kwargs,
    )


# ------------------------------------------------------------------------ the static backend

_HOST_ONLY = re.compile(
    r"\b(?:torch|at|c10|pybind11)::|\bTORCH_|\bAT_|\bC10_|PYBIND11_|"
    r"\bTensor\b"
)
_TORCH_INCLUDE = re.compile(r'#\s*include\s*[<"](?:torch|ATen|c10|pybind11)/')
_TEMPLATE_KERNEL = re.compile(
    r"template\s*<\s*(?:typename|class)\s+(\w+)\s*>\s*__global__\s+(?:__launch_bounds__\([^)]*\)\s*)?"
    r"void\s+(\w+)\s*\(([^)]*)\)"
)


def _top_level_chunks(code: str) -> list[str]:
    """Preprocessor lines and top-level declarations (a `;` or a closing `}` at depth 0)."""
    chunks, current, depth = [], [], 0
    lines = code.splitlines(keepends=True)
    for line in lines:
        if depth == 0 and not "".join(current).strip() and line.lstrip().startswith("#"):
            chunks.append(line)
            continue
        for ch in line:
            current.append(ch)
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth = max(0, depth - 1)
            elif ch == ";" and depth == 0:
                chunks.append("".join(current))
                current = []
        if depth == 0 and "".join(current).rstrip().endswith("}"):
            chunks.append("".join(current))
            current = []
    if "".join(current).strip():
        chunks.append("".join(current))
    return chunks


def device_source(ext: InlineExtension) -> tuple[str, int]:
    """HIP device code of the extension for the static compile, and how many kernels it
    defines: host code that uses torch dropped, CUDA hipified, one-type templates instantiated
    for float."""
    code = strip_c_comments("\n".join((*ext.cpp_sources, *ext.cuda_sources)))
    kept = [
        c
        for c in _top_level_chunks(code)
        if not _TORCH_INCLUDE.search(c) and not _HOST_ONLY.search(c)
    ]
    text = "".join(kept)
    kernels = len(re.findall(r"__global__", text))
    if re.search(r"\bcuda|\bcu[A-Z]|__nv_|<cuda", text):
        text = hipified(text) or text
    if "hip/hip_runtime.h" not in text:
        text = "#include <hip/hip_runtime.h>\n" + text
    for m in _TEMPLATE_KERNEL.finditer(text):
        params = re.sub(rf"\b{m[1]}\b", "float", m[3])
        text += f"\ntemplate __global__ void {m[2]}<float>({params});\n"
    return text, kernels


def hipified(cuda_source: str) -> str | None:
    """PyTorch's hipify of one .cu file's text, its banner and warnings kept off the terminal;
    None when it produced no HIP file."""
    import io

    from torch.utils.hipify.hipify_python import hipify

    with tempfile.TemporaryDirectory(prefix="hipify-") as tmp:
        src, out = Path(tmp, "src"), Path(tmp, "out")
        src.mkdir()
        (src / "kernel.cu").write_text(cuda_source)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            hipify(
                project_directory=str(src),
                output_directory=str(out),
                includes=["*"],
                extensions=(".cu",),
                show_progress=False,
                is_pytorch_extension=False,
            )
        produced = sorted(out.rglob("*.hip"))
        return produced[0].read_text() if produced else None


class StaticAnswer(BaseModel):
    """What the static backend can say about a KernelBench candidate."""

    facts: tuple[StaticFacts, ...] = ()
    error: str = ""  # a compile log: the device code does not compile for a target
    nothing: str = ""  # why nothing was compiled (no kernels, or none statically reachable)
    message: str = ""


def static_facts(candidate: Candidate, analyse, have_toolchain: bool) -> StaticAnswer:  # noqa: ANN001
    """The device code of every extension through `analyse(source) -> StaticResult` (the
    pipeline's cached gfx942 analysis)."""
    try:
        exts = extensions(candidate)
    except KernelBenchBuildError as e:
        return StaticAnswer(nothing=f"nothing compiled: {e}")
    sources = [device_source(e) for e in exts]
    if not sum(n for _, n in sources):
        return StaticAnswer(
            nothing="nothing compiled: the file's load_inline sources define "
            "no __global__ kernel outside host code that uses torch"
        )
    if not have_toolchain:
        return StaticAnswer(
            nothing="nothing compiled: no AMD static toolchain here "
            "(scripts/install_amd_toolchain.sh installs it)"
        )
    facts: list[StaticFacts] = []
    for (text, count), ext in zip(sources, exts, strict=True):
        if not count:
            continue
        result = analyse(text)
        if result.error:
            return StaticAnswer(error=f"{ext.name}: {result.error}")
        facts += result.facts
    if not facts:
        return StaticAnswer(
            nothing="nothing compiled: its kernels are templates the host code instantiates"
        )
    return StaticAnswer(
        facts=tuple(facts),
        message=(
            f"KernelBench format: {len(facts)} kernel(s) of its device code compiled for AMD and "
            "analysed (host code that uses torch is not compiled statically); not run"
        ),
    )


if __name__ == "__main__":
    main()
