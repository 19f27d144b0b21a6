"""Calling a native candidate's launchers: `from hipevolve.runtime import kernels`.

A native candidate's `kernel.hip` declares host launchers as

    extern "C" hipError_t name(const float* x, float* y, int n, hipStream_t stream)

and its `model.py` calls them as `kernels.name(x, y, n)`: tensors pass their data pointers,
Python numbers are converted by the declared C types, and a trailing hipStream_t that is left
out is the current PyTorch stream. A launcher returns hipGetLastError() (or any hipError_t);
a non-zero value raises, so an unchecked launch failure cannot pass silently.

Imports torch, ctypes and the standard library only: the GPU worker and exported packages use it.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path
from typing import Any

import torch

_LAUNCHER = re.compile(
    r'extern\s+"C"\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?([A-Za-z_][\w:]*)\s+'
    r"([A-Za-z_]\w*)\s*\(([^)]*)\)",
    re.S,
)
_INT_TYPES = {
    "int": ctypes.c_int,
    "int32_t": ctypes.c_int32,
    "unsigned": ctypes.c_uint,
    "uint32_t": ctypes.c_uint32,
    "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
    "long": ctypes.c_long,
    "size_t": ctypes.c_size_t,
    "bool": ctypes.c_bool,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
}


def _c_type(decl: str) -> Any:
    decl = re.sub(r"\b(const|volatile|__restrict__|restrict|struct)\b", " ", decl)
    if "*" in decl or "hipStream_t" in decl:
        return ctypes.c_void_p
    words = decl.split()
    if len(words) < 2:
        raise TypeError(f"cannot read launcher parameter {decl.strip()!r}")
    type_name = (
        " ".join(words[:-1]).replace("unsigned int", "unsigned").replace("long long", "int64_t")
    )
    if type_name not in _INT_TYPES:
        raise TypeError(f"unsupported launcher parameter type {type_name!r}")
    return _INT_TYPES[type_name]


def launcher_signatures(source: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (return type, parameter declarations) of every extern "C" launcher in source."""
    found = {}
    for ret, name, params in _LAUNCHER.findall(source):
        decls = [p.strip() for p in params.split(",") if p.strip() and p.strip() != "void"]
        found[name] = (ret, decls)
    return found


class Launcher:
    def __init__(self, fn: Any, name: str, ret: str, decls: list[str]) -> None:
        self.name = name
        self.checks = ret != "void"
        self.wants_stream = bool(decls) and "hipStream_t" in decls[-1]
        self.arity = len(decls)
        fn.argtypes = [_c_type(d) for d in decls]
        fn.restype = ctypes.c_int if self.checks else None
        self.fn = fn

    def __call__(self, *args: Any) -> None:
        values = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
        if self.wants_stream and len(values) == self.arity - 1:
            values.append(torch.cuda.current_stream().cuda_stream)
        if len(values) != self.arity:
            raise TypeError(f"{self.name} takes {self.arity} arguments, got {len(values)}")
        code = self.fn(*values)
        if self.checks and code != 0:
            raise RuntimeError(f"launcher {self.name} returned HIP error {code}")


class Kernels:
    """The launchers of one compiled candidate, by name."""

    def __init__(self) -> None:
        self._lib: ctypes.CDLL | None = None
        self._signatures: dict[str, tuple[str, list[str]]] = {}
        self._launchers: dict[str, Launcher] = {}

    def bind(self, library: str | Path, source: str) -> None:
        self._lib = ctypes.CDLL(str(library), mode=ctypes.RTLD_LOCAL)
        self._signatures = launcher_signatures(source)
        self._launchers = {}

    def __getattr__(self, name: str) -> Launcher:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._lib is None:
            raise RuntimeError("no kernel library bound (hipevolve.runtime.kernels.bind)")
        if name not in self._launchers:
            if name not in self._signatures:
                raise AttributeError(f'no extern "C" launcher named {name!r} in kernel.hip')
            ret, decls = self._signatures[name]
            self._launchers[name] = Launcher(getattr(self._lib, name), name, ret, decls)
        return self._launchers[name]


kernels = Kernels()
