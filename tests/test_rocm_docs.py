"""docs/ROCM.md is kept current: every line naming a test names one that exists, with the markers
the line says it carries (module `pytestmark` and its own decorators), and every rocm_build
test is named by a line. Read with `ast`, never by importing the test modules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ROCM.md"
REFERENCE = re.compile(r"(?P<file>tests/[\w/]+\.py)::(?P<test>\w+) \[(?P<markers>[\w, ]*)\]")
KNOWN_MARKERS = {"amd_static", "rocm_build", "gpu", "slow"}


def _marker_names(decorators: list[ast.expr]) -> set[str]:
    names = set()
    for node in decorators:
        target = node.func if isinstance(node, ast.Call) else node
        if isinstance(target, ast.Attribute) and ast.unparse(target).startswith("pytest.mark."):
            names.add(target.attr)
    return names


def test_markers(path: Path) -> dict[str, set[str]]:
    """Test function -> the markers it carries (its decorators and the module's pytestmark)."""
    tree = ast.parse(path.read_text())
    module: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            values = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            module |= _marker_names(values)
    return {
        node.name: (module | _marker_names(node.decorator_list)) & KNOWN_MARKERS
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }


test_markers.__test__ = False  # a helper, not a test


def references() -> list[re.Match[str]]:
    return list(REFERENCE.finditer(DOC.read_text()))


def test_rocm_doc_names_only_existing_tests_with_their_markers():
    found = references()
    assert len(found) >= 20
    wrong = []
    for ref in found:
        markers = test_markers(ROOT / ref["file"])
        if ref["test"] not in markers:
            wrong.append(f"{ref['file']}::{ref['test']} does not exist")
            continue
        said = {m.strip() for m in ref["markers"].split(",") if m.strip()}
        if said != markers[ref["test"]]:
            wrong.append(f"{ref['test']}: the doc says [{', '.join(sorted(said))}], "
                         f"the test carries [{', '.join(sorted(markers[ref['test']]))}]")  # fmt: skip
    assert not wrong, wrong


def test_every_rocm_build_test_is_in_the_doc():
    named = {(r["file"], r["test"]) for r in references()}
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for test, markers in test_markers(path).items():
            if "rocm_build" in markers:
                assert (f"tests/{path.name}", test) in named, f"{path.name}::{test} not in ROCM.md"


def test_doc_has_the_four_states_and_the_platform_list():
    text = DOC.read_text()
    for heading in ("## Compiled", "## Linked", "## Emulated", "## Never run here",
                    "## Platform assumptions"):  # fmt: skip
        assert heading in text
    platform = text.split("## Platform assumptions", 1)[1]
    assert all("tests/test_rocm_platform.py::" in line
               for line in platform.splitlines() if line.startswith("- "))  # fmt: skip
