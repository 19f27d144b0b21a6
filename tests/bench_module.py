"""Loading a bench script (bench/NAME.py) as a module for its CPU tests: benches are scripts, not
a package, so each test file loads its own under a name of its own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py as module `<name>_under_test` (registered in sys.modules: dataclasses look
    their module up by name); bench/ goes on sys.path for the benches that import each other."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
