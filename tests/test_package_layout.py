"""The wheel and the editable install expose the same files under one namespace, hipevolve.*."""

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"hipevolve": "hipevolve", "agents": "hipevolve/agents", "evolution": "hipevolve/evolution",
           "verifier": "hipevolve/verifier", "archive": "hipevolve/archive",
           "prompts": "hipevolve/prompts", "problems": "hipevolve/problems"}


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> set[str]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out), str(ROOT)], check=True, capture_output=True)
    (wheel,) = out.glob("hipevolve-*.whl")
    return set(zipfile.ZipFile(wheel).namelist())


def _source_files() -> dict[str, Path]:
    """Wheel path -> repository file, for every package file that should ship."""
    files = {}
    for folder, package_path in FOLDERS.items():
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix in (
                    ".py", ".toml", ".hip", ".h", ".md"):
                files[f"{package_path}/{path.relative_to(ROOT / folder)}"] = path
    return files


def test_wheel_ships_every_package_file_under_hipevolve(wheel_names):
    missing = sorted(set(_source_files()) - wheel_names)
    assert not missing, f"not in the wheel: {missing[:10]}"


def test_wheel_has_no_top_level_names_besides_hipevolve(wheel_names):
    tops = {n.split("/")[0] for n in wheel_names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"hipevolve"}


def test_editable_imports_resolve_to_the_same_files_as_the_wheel(wheel_names):
    for wheel_path, source in _source_files().items():
        if source.suffix != ".py" or source.name == "__main__.py":
            continue
        module = wheel_path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        if not all(part.isidentifier() for part in module.split(".")):
            continue  # task folders are data loaded by path, not modules
        spec = importlib.util.find_spec(module)
        assert spec is not None and Path(spec.origin).resolve() == source.resolve(), module
