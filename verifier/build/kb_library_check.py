"""Refusing a KernelBench extension whose C++ reaches PyTorch's compute, or a vendor library's,
without the dispatcher.

A KernelBench candidate's extension is a PyTorch extension: its C++ may use libtorch for tensors
(allocation, views, metadata, data pointers, streams). Its work must be its own kernels. An aten op
it calls through the dispatcher is seen when it runs (replay_kb._Watch); one reached beside the
dispatcher is not: a per-backend entry point (at::cuda::_softmax_out, declared by hand under an
asm label, red team round 9), an at::native function, cuBLAS or cuDNN, an op looked up by name.
Each of those is an imported dynamic symbol of the built library, so the build stage reads the
library's imports (readelf, demangled with c++filt) before it publishes the build, and refuses:

- `at::_ops::OP::call` (what at::OP and Tensor::OP compile to) for an OP that computes, i.e. any
  op outside plan_kb.MOVES_DATA (allocate, fill, view, copy, describe);
- anything in ATen's per-backend and kernel namespaces (at::native, at::cuda, at::cpu, at::meta,
  at::composite*, ...), apart from at::cuda's and at::hip's device and stream queries;
- the dispatcher's lookup by name (c10::Dispatcher::findSchema..., findOp) and TorchScript;
- vendor math and run-time compilation libraries (cuBLAS, cuDNN, cuFFT, hipBLAS, rocBLAS, MIOpen,
  NVRTC, hipRTC, ...) and loading code objects the source does not hold (cuModuleLoad...);
- run-time symbol lookup (dlopen, dlsym, dl_iterate_phdr, _r_debug), which would reach any of
  the above by a name built at run time;
- the Python C API's ways to run Python (import a module, run or compile source, call an
  object: red team round 10 called numpy, and exec'd Python, through pybind11), beyond those
  the same toolchain's minimal extension imports (kernelbench.python_baseline).

A refusal is the verdict `hacked`, with the symbol. What it does not see: native code that finds
a libtorch function without importing it or looking it up (an address computed from an allowed
import's, or read from libtorch's tables in memory: red team round 10 reached at::cpu's
clamp_min_out from getauxval(AT_PHDR) through the loader's link map), and Python reached with the
imports every extension's bindings have (builtins' __import__ called through
PyObject_CallFunctionObjArgs): what that calls in torch dispatches aten ops, which the
executor's watch sees; what it calls elsewhere (numpy) is seen by neither. A KernelBench
extension runs in the sandbox's process beside the checks, and its verdict says it is less
isolated than a native candidate (kernelbench.LESS_ISOLATED).

Tools: binutils (readelf, c++filt) through subprocess. Imports the standard library, torch
(the aten op registry) and hipevolve.verifier.gpu.plan_kb.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

from hipevolve.verifier.gpu.plan_kb import MOVES_DATA

_TOOL_S = 60.0
_OPS = re.compile(r"^at::_ops::(\w+)::")
_ATEN_KERNELS = re.compile(
    r"^at::(?:native|cuda|hip|cpu|meta|mps|xpu|mtia|cudnn|miopen|mkldnn|functionalization|"
    r"composite\w*|sparse\w*|quantized\w*|nested\w*|zerotensor|conj_physical)::"
)
# at::cuda's (at::hip's) device and stream queries: what a launcher needs, no compute
_ATEN_QUERIES = re.compile(
    r"^at::(?:cuda|hip)::(?:getCurrentDeviceProperties|getDeviceProperties|warp_size|"
    r"getNumGPUs|is_available|device_count|getCurrentCUDAStream|getDefaultCUDAStream|"
    r"getStreamFromPool|getStreamFromExternal|getCurrentHIPStream|getDefaultHIPStream|"
    r"canDeviceAccessPeer)$"
)
_BY_NAME = re.compile(r"^(?:c10::Dispatcher::find\w*|c10::Dispatcher::callBoxed|torch::jit::)")
_VENDOR = re.compile(
    r"^(?:cublas|cudnn|cufft|cusparse|cusolver|cutensor|curand|nvrtc|nvJitLink|hiprtc|hipblas|"
    r"rocblas|miopen|hipfft|rocfft|hipsparse|rocsparse|hipsolver|rocsolver|hipdnn|hiprand|"
    r"rocrand|nccl|rccl|cuModuleLoad|cuLibraryLoad|cuLinkAdd|cuLinkCreate|hipModuleLoad|"
    r"cudaLibraryLoad|hipLibraryLoad)\w*$"
)
_OPERATOR = re.compile(r"operator(?:<=>|<<=?|>>=?|<=|>=|->\*?|<|>|\(\))")
_LOOKUP = re.compile(
    r"^(?:dlopen|dlmopen|dlsym|dlvsym|dladdr1?|dlinfo|dl_iterate_phdr|_r_debug|"
    r"_dl_\w+)$"
)


# The Python C API's ways to run Python: import a module, run or compile source, call an object.
# An honest extension's bindings import none of them (pybind11 calls into Python only through
# PyObject_CallFunctionObjArgs, which stays allowed); `refusal` refuses those the same
# toolchain's minimal extension does not import (kernelbench.python_baseline).
_PYTHON_CALLS = re.compile(
    r"^(?:PyImport_\w+|PyRun_\w+|Py_CompileString\w*|PyEval_Eval\w+|PyEval_Call\w+|"
    r"PyObject_Call|PyObject_CallObject|PyObject_CallNoArgs|PyObject_CallOneArg|"
    r"PyObject_CallMethod\w*|PyObject_CallFunction|PyObject_Vectorcall\w*|PyVectorcall_Call|"
    r"_PyObject_(?:Call|Vectorcall|MakeTpCall|FastCall)\w*|PyCFunction_Call|PyMarshal_\w+|"
    r"PySys_GetObject|PySys_SetObject|PyCode_\w+|PyFunction_New\w*)$"
)


class ToolError(Exception):
    """binutils could not read the library."""


def _run(argv: list[str], stdin: str | None = None) -> str:
    try:
        done = subprocess.run(
            argv, input=stdin, capture_output=True, text=True, timeout=_TOOL_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolError(f"{argv[0]}: {e}") from None
    if done.returncode != 0:
        raise ToolError(f"{argv[0]} failed: {done.stderr.strip()[:200]}")
    return done.stdout


def imports(library: Path) -> list[str]:
    """The library's undefined dynamic symbols, demangled, without versions."""
    names = set()
    for line in _run(["readelf", "-W", "--dyn-syms", str(library)]).splitlines():
        cols = line.split()
        if len(cols) >= 8 and cols[6] == "UND" and cols[7]:
            names.add(cols[7].split("@")[0])
    mangled = sorted(names)
    demangled = _run(["c++filt"], "\n".join(mangled) + "\n").splitlines()
    return demangled if len(demangled) == len(mangled) else mangled


@functools.cache
def data_ops() -> frozenset[str]:
    """at::_ops struct names of the ops in MOVES_DATA, every overload: `OP` for the default
    overload, `OP_OVERLOAD` for the others (empty_memory_format, to_dtype, fill__Scalar)."""
    import torch

    names = set()
    for op in MOVES_DATA:
        packet = getattr(torch.ops.aten, op, None)
        if packet is None:
            continue
        names.update(op if o == "default" else f"{op}_{o}" for o in packet.overloads())
    return frozenset(names)


def qualified(symbol: str) -> str:
    """A demangled symbol's qualified name: no parameters, no return type (a template
    function's demangling starts with one: `void at::cuda::blas::gemm<float>(...)`), template
    arguments kept."""
    symbol = _OPERATOR.sub("operator@", symbol)  # operator<<, operator() hold < > ( )
    depth, end = 0, len(symbol)
    for i, ch in enumerate(symbol):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            end = i
            break
    head, depth, start = symbol[:end], 0, 0
    for i, ch in enumerate(head):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == " " and depth == 0 and not head[i + 1 :].startswith(("const", "&", "*", "<")):
            start = i + 1
    return head[start:].lstrip("*&")


def reason(symbol: str) -> str:
    """Why importing `symbol` (demangled) reaches compute that is not the extension's, or ''."""
    symbol = qualified(symbol)
    ops = _OPS.match(symbol)
    if ops:
        return "" if ops.group(1) in data_ops() else "an aten op that computes"
    if _ATEN_KERNELS.match(symbol) and not _ATEN_QUERIES.match(symbol):
        return "ATen's kernels beside the dispatcher"
    if _BY_NAME.match(symbol):
        return "an op looked up by name"
    if _VENDOR.match(symbol):
        return "a vendor library or code loaded at run time"
    if _LOOKUP.match(symbol):
        return "run-time symbol lookup"
    return ""


def python_calls(found: list[str]) -> frozenset[str]:
    """The imports among `found` that run Python (_PYTHON_CALLS)."""
    return frozenset(s for s in found if _PYTHON_CALLS.match(s))


def refusal(library: Path, python_baseline: frozenset[str] | None = None) -> str:
    """'' if the KernelBench extension `library` imports nothing that computes for it, else why
    it is `hacked`. python_baseline: the Python-running imports the same toolchain's minimal
    extension has (kernelbench.python_baseline); those beyond it are refused too. None: no
    baseline could be built, and that rule is off."""
    try:
        found = imports(library)
    except ToolError as e:
        return f"the extension cannot be read as a shared object ({e})"
    bad = [(s, why) for s in found if (why := reason(s))]
    if python_baseline is not None:
        calls = sorted(python_calls(found) - python_baseline)
        bad += [(s, "Python run from the C++, beside the checks") for s in calls]
    if not bad:
        return ""
    named = "; ".join(f"{qualified(s)} ({why})" for s, why in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    return (
        f"{library.stem}'s C++ can compute with PyTorch, a vendor library or Python instead of "
        f"its own kernels: it imports {named}{more}; an extension may use libtorch for tensors, "
        "not for the work"
    )
