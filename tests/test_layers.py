"""Every import points down (issue 31): pyproject.toml's import-linter contracts hold over the
whole package, and the check does catch an arrow that points up. (The contract that keeps
verifier/gpu light is shown breaking in tests/test_gpu_imports_light.py.)"""

from __future__ import annotations

import re
import shutil
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from lint_imports import lint, package_tree  # noqa: E402

IMPORTLINTER = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]

pytestmark = pytest.mark.skipif(
    shutil.which("lint-imports", path=str(Path(sys.executable).parent)) is None
    and shutil.which("lint-imports") is None,
    reason="import-linter is a dev extra (scripts/setup.sh --dev)",
)


def test_every_contract_of_pyproject_is_kept(tmp_path):
    package_tree(tmp_path)
    out = lint(tmp_path, capture=True)
    assert out.returncode == 0, out.stdout + out.stderr
    analyzed = int(re.search(r"Analyzed (\d+) files", out.stdout).group(1))
    assert analyzed > 120, out.stdout  # the whole package, not the hipevolve/ folder alone
    assert f"{len(IMPORTLINTER['contracts'])} kept, 0 broken" in out.stdout


def test_an_import_that_points_up_breaks_the_contract(tmp_path):
    package = package_tree(tmp_path)
    core = package / "core"
    target = core.resolve()
    core.unlink()
    shutil.copytree(target, core, ignore=shutil.ignore_patterns("__pycache__"))
    (core / "upward.py").write_text("from hipevolve.app import cli  # noqa\n")
    out = lint(tmp_path, capture=True)
    assert out.returncode != 0
    assert "hipevolve.core is not allowed to import hipevolve.app" in out.stdout
