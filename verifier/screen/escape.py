"""Checks for side channels and reaching outside: other streams, threads and processes, exit
hooks, patching the harness, forbidden imports, dynamic code, the environment, files, host escapes
from C++ and device state."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator

from hipevolve.verifier.screen.cxx import Hit
from hipevolve.verifier.screen.registry import check
from hipevolve.verifier.screen.sources import PyModel, Sources, root_name, target_leaves, words

_STREAM_NAMES = words(
    """
    torch.cuda.Stream torch.cuda.stream torch.cuda.ExternalStream torch.cuda.set_stream
    torch.cuda.StreamContext torch.Stream torch.cuda.streams.Stream torch.accelerator.set_stream
    torch.cuda.graph torch.cuda.CUDAGraph torch.cuda.make_graphed_callables
    torch.cuda.graphs.CUDAGraph
    """
)
_HIP_STREAMS = re.compile(
    r"\b(?:hip|cuda)Stream(?:Create\w*|PerThread|Legacy)\b|\b(?:hip|cuda)Graph\w*\b"
    r"|\bcudaStreamNonBlocking\b|\bgetStreamFromPool\b|\bgetStreamFromExternal\b"
    r"|\bsetCurrent(?:CUDA|HIP)Stream\b|\b(?:CUDA|HIP)Stream(?:Guard|Context)\b"
)


@check("streams", "strict")
def streams(s: Sources) -> Iterator[Hit]:
    """Work on another stream (or replayed from a graph) escapes the timer's stream (FAULTS 18)."""
    if s.py is not None:
        for node in s.py.nodes():
            if isinstance(node, (ast.Attribute, ast.Name)) and s.py.resolve(node) in _STREAM_NAMES:
                yield s.py.hit(node, f"{s.py.resolve(node)}: launch on the current stream only")
    for src in s.host_code():
        yield from src.hits(
            _HIP_STREAMS,
            lambda m: f"{m[0]}: launch on the stream the launcher receives, create none",
        )


_THREAD_MODULES = words(
    """
    threading _thread multiprocessing concurrent subprocess asyncio torch.multiprocessing pty
    sched
    """
)
_THREAD_CALLS = re.compile(
    r"os\.(fork\w*|spawn\w*|system|popen|exec\w*|posix_spawn\w*)"
    r"|torch\.jit\._?fork|torch\.futures\.\w+"
)
_HIP_THREADS = re.compile(
    r"\bstd::(?:thread|jthread|async)\b|\bpthread_create\b"
    r"|\b(?:fork|vfork|posix_spawnp?)\s*\("
)


def _imports_of(py: PyModel, modules: Iterable[str]) -> Iterator[tuple[str, int]]:
    wanted = tuple(modules)
    for name, line in py.imported:
        if any(name == m or name.startswith(m + ".") for m in wanted):
            yield name, line


@check("threads-processes", "strict")
def threads_processes(s: Sources) -> Iterator[Hit]:
    """Threads and processes run work outside the timed region and outlive the call (FAULTS 18)."""
    if s.py is not None:
        lines = {line: name for name, line in reversed(list(_imports_of(s.py, _THREAD_MODULES)))}
        for line, name in sorted(lines.items()):
            yield Hit(s.py_file, line, f"imports {name}: model code starts no threads or processes")
        for node in s.py.nodes():
            dotted = s.py.resolve(node) if isinstance(node, ast.Attribute) else None
            if dotted and _THREAD_CALLS.fullmatch(dotted):
                yield s.py.hit(node, f"{dotted}: model code starts no threads or processes")
    for src in s.host_code():
        yield from src.hits(
            _HIP_THREADS, lambda m: f"{m[0].strip('( ')}: host code starts no threads or processes"
        )


_HIP_EXIT_HOOKS = re.compile(
    r"\b(?:std::)?(?:atexit|at_quick_exit|on_exit)\s*\("
    r"|__attribute__\s*\(\(\s*(?:constructor|destructor)|\[\[\s*gnu::(?:constructor|destructor)"
)


@check("exit-hooks", "strict")
def exit_hooks(s: Sources) -> Iterator[Hit]:
    """atexit, finalizers, signal handlers and load-time constructors run work the timer misses."""
    if s.py is not None:
        for line in sorted({line for _, line in _imports_of(s.py, ("atexit", "signal"))}):
            yield Hit(s.py_file, line, "imports atexit or signal: no exit hooks or signal handlers")
        for node in s.py.nodes():
            if isinstance(node, ast.Attribute) and s.py.resolve(node) in (
                "weakref.finalize",
                "sys.exitfunc",
                "torch._C._add_exit_hook",
            ):
                yield s.py.hit(node, f"{s.py.resolve(node)} runs code outside the timed call")
            elif (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__del__"
            ):
                yield s.py.hit(node, "__del__ runs code outside the timed call")
    for src in s.host_code():
        yield from src.hits(
            _HIP_EXIT_HOOKS,
            lambda m: f"{' '.join(m[0].split())}: host code runs outside the timed call",
        )


@check("harness-patching", "strict")
def harness_patching(s: Sources) -> Iterator[Hit]:
    """Assigning attributes of imported modules (torch.cuda.Event, time, statistics, builtins,
    sys.modules) can fake the timer or the comparison (FAULTS 17)."""
    py = s.py
    if py is None:
        return
    for node in py.nodes():
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            for leaf in target_leaves(t):
                if not isinstance(leaf, (ast.Attribute, ast.Subscript)) or root_name(leaf) in (
                    "self",
                    None,
                ):
                    continue
                base = leaf.value if isinstance(leaf, ast.Subscript) else leaf
                if py.is_module_name(py.resolve(base)):
                    yield py.hit(node, f"assigns {ast.unparse(leaf)}: model code patches no module")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
        ):
            first = node.args[0]
            if not (isinstance(first, ast.Name) and first.id == "self"):
                yield py.hit(
                    node, f"{node.func.id}({ast.unparse(first)}, ...): set attributes of self only"
                )


# Model code needs torch, torch.nn, math, typing and the candidate's bridge: nothing below.
_FORBIDDEN_MODULES = words(
    """
    time inspect gc ctypes _ctypes cffi sys os posix nt importlib builtins socket ssl select
    selectors http urllib requests pickle marshal shelve dill cloudpickle copyreg statistics
    timeit cProfile profile tracemalloc faulthandler trace pdb code codeop resource mmap fcntl
    tempfile shutil pathlib io glob sysconfig site runpy zipimport pkgutil psutil weakref types
    torch._dynamo torch._C torch.testing torch.utils.benchmark torch.profiler hipevolve.verifier
    hipevolve.core.reference hipevolve.problems
    """
)


@check("forbidden-import", "strict")
def forbidden_import(s: Sources) -> Iterator[Hit]:
    """Model code needs none of time, inspect, gc, ctypes, sys, os, importlib, builtins, socket,
    pickle (and kin): they reach the reference, the timer or the host (FAULTS 8, 12, 17)."""
    if s.py is None:
        return
    reported: set[tuple[str, int]] = set()
    for name, line in _imports_of(s.py, _FORBIDDEN_MODULES):
        root = next(m for m in _FORBIDDEN_MODULES if name == m or name.startswith(m + "."))
        if (root, line) not in reported:
            reported.add((root, line))
            yield Hit(
                s.py_file,
                line,
                f"imports {name}: model code needs only torch, math and its kernels",
            )
    for name, line in s.py.imported:
        if name.startswith("."):
            yield Hit(
                s.py_file,
                line,
                f"relative import {name}: import only torch and the candidate's bridge",
            )


_DUNDER_ESCAPES = words(
    """
    __globals__ __builtins__ __subclasses__ __bases__ __base__ __mro__ __code__ __closure__
    __dict__ __loader__ __spec__ __import__ __getattribute__ f_globals f_locals f_back
    f_builtins gi_frame tb_frame cr_frame
    """
)
_DYNAMIC_BUILTINS = words(
    """
    eval exec compile __import__ globals locals vars breakpoint input memoryview
    """
)


@check("dynamic-code", "strict")
def dynamic_code(s: Sources) -> Iterator[Hit]:
    """eval/exec/__import__, computed getattr and dunder escapes hide what the code does from this
    screen, so they are refused outright."""
    py = s.py
    if py is None:
        return
    for node in py.nodes():
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in _DYNAMIC_BUILTINS and name not in py.aliases:
                yield py.hit(node, f"{name}(): model code runs no dynamic code")
            elif name in ("getattr", "setattr", "delattr", "hasattr") and (
                len(node.args) < 2 or not isinstance(node.args[1], ast.Constant)
            ):
                yield py.hit(node, f"{name} with a computed name cannot be screened")
        elif isinstance(node, ast.Attribute) and node.attr in _DUNDER_ESCAPES:
            yield py.hit(node, f".{node.attr} reaches interpreter internals")
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            yield py.hit(node, f"{node.id} reaches interpreter internals")


_ENV_NAMES = words(
    """
    os.environ os.environb os.getenv os.getenvb os.putenv os.unsetenv posix.environ nt.environ
    """
)
_HIP_ENV = re.compile(r"\b(?:secure_getenv|getenv|setenv|putenv|unsetenv|environ)\b")


@check("env-read", "strict")
def env_read(s: Sources) -> Iterator[Hit]:
    """The environment may hold API keys and harness settings; candidates read none (FAULTS 8)."""
    if s.py is not None:
        for node in s.py.nodes():
            if isinstance(node, (ast.Attribute, ast.Name)) and s.py.resolve(node) in _ENV_NAMES:
                yield s.py.hit(node, f"{s.py.resolve(node)}: model code reads no environment")
    for src in s.cxx:
        yield from src.hits(_HIP_ENV, lambda m: f"{m[0]}: host code reads no environment")


_PY_FILE_CALLS = words(
    """
    open io.open codecs.open os.open torch.load torch.save numpy.load numpy.save numpy.savez
    numpy.fromfile numpy.loadtxt numpy.savetxt numpy.memmap numpy.genfromtxt
    """
)
_PATH_METHODS = words(
    """
    write_text write_bytes read_text read_bytes unlink mkdir touch rmdir symlink_to hardlink_to
    tofile
    """
)
_HIP_FILES = re.compile(
    r"\b(?:std::|::)?(?:fopen|freopen|fdopen|open|openat|creat|unlink|mkdir|rmdir|chmod|symlink)"
    r"\s*\(|\bstd::(?:i|o)?fstream\b|\bstd::filesystem\b"
)


@check("file-io", "strict")
def file_io(s: Sources) -> Iterator[Hit]:
    """Files are a channel to expected outputs and to the harness; model code opens none (FAULTS
    8, 12)."""
    py = s.py
    if py is not None:
        for node in py.nodes():
            if not isinstance(node, ast.Call):
                continue
            dotted = py.resolve(node.func)
            if dotted in _PY_FILE_CALLS and not (dotted == "open" and "open" in py.aliases):
                yield py.hit(node, f"{dotted}(): model code does no file I/O")
            elif isinstance(node.func, ast.Attribute) and (
                node.func.attr in _PATH_METHODS
                or (
                    node.func.attr == "open"
                    and isinstance(node.func.value, ast.Call)
                    and (py.resolve(node.func.value.func) or "").endswith("Path")
                )
            ):
                yield py.hit(node, f".{node.func.attr}(): model code does no file I/O")
    for src in s.host_code():
        yield from src.hits(_HIP_FILES, lambda m: f"{m[0].strip('( ')}: host code does no file I/O")


_HIP_ESCAPES = re.compile(
    r"\b(?:std::|::)?(?:system|popen|_popen|dlopen|dlsym|dlmopen|socket|connect|execv|execve"
    r"|execvp|execvpe|execl|execle|execlp|syscall|ptrace|kill)\s*\("
)


@check("host-escape", "strict")
def host_escape(s: Sources) -> Iterator[Hit]:
    """Host code in kernel.hip runs with the harness's rights: system, popen, dlopen, sockets and
    exec are never needed to launch a kernel (FAULTS 8)."""
    for src in s.host_code():
        yield from src.hits(
            _HIP_ESCAPES, lambda m: f"{m[0].strip('( ')}(): host code only launches kernels"
        )


_HIP_DEVICE_STATE = re.compile(
    r"\b(?:hip|cuda)(?:DeviceReset|SetDevice|SetDeviceFlags|DeviceSetLimit|Ctx\w+"
    r"|DevicePrimaryCtx\w+|ProfilerStart|ProfilerStop)\b|\bcu(?:Ctx\w+|Init)\b"
)


@check("device-state", "strict")
def device_state(s: Sources) -> Iterator[Hit]:
    """Resetting the device or switching contexts breaks the harness's session and the next
    candidate's (FAULTS 3)."""
    for src in s.host_code():
        yield from src.hits(
            _HIP_DEVICE_STATE, lambda m: f"{m[0]}: candidates leave device and context state alone"
        )
