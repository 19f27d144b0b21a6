"""A KernelBench candidate's load_inline, answered from the build stage's libraries.

The build stage (verifier/build/kernelbench.py) compiled every load_inline extension of the file
outside the sandbox, into one folder holding `<name>.so` each. `use_prebuilt(folder)` replaces
torch's load_inline (and load) in the sandbox, before the candidate is imported, by a function
that loads `<folder>/<name>.so` and compiles nothing: the sandbox needs no compiler, no ninja
and no new process. A name the build stage did not build is an ImportError.

Protects against: compilers and build scripts running inside the sandbox (it starts no
process). Does not protect against: the extension's own C++ (static initialisers included),
which runs in the sandbox when it loads, as a native candidate's library does; nor the file's
Python, which runs beside the checks (KernelBench verdicts say they are less isolated).

Imports the standard library only (torch is imported by the sandbox already).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path


def load_extension(folder: Path, name: str):  # noqa: ANN201 (a module)
    """The Python module of `<folder>/<name>.so`, loaded once per process."""
    path = Path(folder) / f"{name}.so"
    if not path.is_file():
        built = ", ".join(sorted(p.stem for p in Path(folder).glob("*.so"))) or "none"
        raise ImportError(f"no prebuilt extension named {name!r} (built: {built})")
    if name in sys.modules:
        return sys.modules[name]
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    loader.exec_module(module)
    sys.modules[name] = module
    return module


def use_prebuilt(folder: Path) -> None:
    """torch.utils.cpp_extension's load_inline and load return prebuilt modules from now on."""
    import torch.utils.cpp_extension as cpp

    def prebuilt(name: str, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        return load_extension(folder, name)

    cpp.load_inline = prebuilt
    cpp.load = prebuilt
