"""Checks the import layers of pyproject.toml's [tool.importlinter] contracts with lint-imports.

    python scripts/lint_imports.py          # exit 0 when every contract is kept

The package `hipevolve` is assembled from several top-level folders (pyproject.toml's
package-dir maps agents/ to hipevolve.agents, and so on), while lint-imports reads one package
folder from disk. So this script lays out `hipevolve/` as the installed package would be, with
symbolic links to the project's folders, in a temporary directory, and runs lint-imports there
with the project's own contracts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_tree(into: Path) -> Path:
    """`into`/hipevolve, with a link for every entry of hipevolve/ and every mapped folder."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ]
    package = into / "hipevolve"
    package.mkdir()
    for entry in (ROOT / mapping["hipevolve"]).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name != "hipevolve":
            (package / name.removeprefix("hipevolve.")).symlink_to(ROOT / folder)
    return package


def lint(tree: Path, capture: bool = False) -> subprocess.CompletedProcess:
    """lint-imports over the package laid out in `tree` (see package_tree)."""
    found = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    found = found or shutil.which("lint-imports")
    if found is None:
        raise SystemExit("lint-imports not found: install the dev extras (scripts/setup.sh --dev)")
    argv = [found, "--config", str(ROOT / "pyproject.toml"), "--no-cache"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(argv, cwd=tree, env=env, capture_output=capture, text=True)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="hipevolve-layers-") as tmp:
        package_tree(Path(tmp))
        return lint(Path(tmp)).returncode


if __name__ == "__main__":
    sys.exit(main())
