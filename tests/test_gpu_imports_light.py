"""Nothing that runs in the judge's or a sandbox's process imports pydantic: those processes run
with torch, numpy and the standard library alone, and read their job as plain dataclasses
(verifier/gpu/job.py).

pyproject.toml's import-linter contract "verifier/gpu stays light" forbids it for every module
under verifier/gpu, imports inside functions included; the test below shows that it breaks. What
a contract cannot see, a real process does here: the packages' own __init__ modules on the way
(hipevolve, hipevolve.verifier), a third-party module that imports pydantic itself, and an import
by name (importlib). Its modules are read from the folders, so a new judge or sandbox module is
checked without anyone adding it to a list."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "verifier" / "gpu"  # hipevolve.verifier.gpu (pyproject.toml's package-dir)
sys.path.insert(0, str(ROOT / "scripts"))
from lint_imports import lint, package_tree  # noqa: E402

HEAVY = ("pydantic",)


def gpu_modules() -> tuple[str, ...]:
    """Every module under verifier/gpu: the judge's, the sandbox's and what both read."""
    names = []
    for path in sorted(GPU.rglob("*.py")):
        parts = path.relative_to(GPU).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.append(".".join(("hipevolve.verifier.gpu", *parts)))
    return tuple(names)


def _loaded_after_importing(modules: tuple[str, ...]) -> list[str]:
    """The heavy modules a fresh Python has loaded once it has imported `modules`."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_modules_are_read_from_the_judge_and_sandbox_folders() -> None:
    entry_points = {"judge.worker", "sandbox.zygote", "sandbox.sandbox_process", "job"}
    names = gpu_modules()
    assert {f"hipevolve.verifier.gpu.{name}" for name in entry_points} <= set(names)
    assert len(names) > 25


def test_the_judge_sandbox_and_zygote_import_no_pydantic() -> None:
    assert _loaded_after_importing(gpu_modules()) == []


@pytest.mark.parametrize("heavy", ["hipevolve.core.config", "hipevolve.verifier.isolate"])
def test_the_check_catches_a_module_that_imports_pydantic(heavy: str) -> None:
    # The controller's side (settings, isolate) does import it: the check above would see it.
    assert _loaded_after_importing((*gpu_modules(), heavy)) == ["pydantic"]


needs_lint_imports = pytest.mark.skipif(
    shutil.which("lint-imports", path=str(Path(sys.executable).parent)) is None
    and shutil.which("lint-imports") is None,
    reason="import-linter is a dev extra (scripts/setup.sh --dev)",
)


@needs_lint_imports
@pytest.mark.parametrize(
    "source",
    ["import pydantic  # noqa: F401\n", "def later():\n    import pydantic  # noqa: F401\n"],
    ids=["at-module-level", "inside-a-function"],
)
def test_a_judge_module_that_imports_pydantic_breaks_the_contract(tmp_path, source) -> None:
    package = package_tree(tmp_path)
    verifier = package / "verifier"
    target = verifier.resolve()
    verifier.unlink()
    shutil.copytree(target, verifier, ignore=shutil.ignore_patterns("__pycache__"))
    (verifier / "gpu" / "judge" / "heavy.py").write_text(source)
    out = lint(tmp_path, capture=True)
    assert out.returncode != 0
    assert "hipevolve.verifier.gpu is not allowed to import pydantic" in " ".join(
        out.stdout.split()
    )
    assert "hipevolve.verifier.gpu.judge.heavy -> pydantic" in out.stdout
