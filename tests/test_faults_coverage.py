"""docs/FAULTS_COVERAGE.md cannot rot: all 34 FAULTS.md items are listed, every test it names
is one pytest really collects, and its "Runs on" column agrees with the tests' `gpu` marks.

The node ids are checked against pytest's own collection (`--collect-only`, in a subprocess so
this session's collection is untouched), once for all tests and once without the gpu-marked
ones.
"""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COVERAGE = ROOT / "docs" / "FAULTS_COVERAGE.md"
ITEMS = 34
ROW = re.compile(r"^\|\s*(\d+)\s*\|(.*)\|\s*$")


def rows() -> dict[int, tuple[list[str], str]]:
    """item number -> (node ids, runs-on text)."""
    found: dict[int, tuple[list[str], str]] = {}
    for line in COVERAGE.read_text().splitlines():
        match = ROW.match(line)
        if match is None:
            continue
        item = int(match[1])
        assert item not in found, f"item {item} is listed twice"
        cells = [c.strip() for c in match[2].split("|")]
        assert len(cells) == 4, f"item {item}: expected 5 columns, got {len(cells) + 1}"
        found[item] = (re.findall(r"`([^`]+::[^`]+)`", cells[2]), cells[3])
    return found


# Collects in a child pytest and prints each item's node id and whether it is gpu-marked.
COLLECT = """
import sys, pytest

class Marks:
    def pytest_collection_finish(self, session):
        for item in session.items:
            print("ITEM", item.nodeid, "gpu" if item.get_closest_marker("gpu") else "cpu")

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *sys.argv[1:]],
                     plugins=[Marks()]))
"""


@cache
def collected() -> dict[str, str]:
    """node id -> "cpu" or "gpu", for every test in the files the table names."""
    files = sorted({n.split("::")[0] for ids, _ in rows().values() for n in ids})
    missing = [f for f in files if not (ROOT / f).is_file()]
    assert not missing, f"files named in {COVERAGE.name} do not exist: {missing}"
    proc = subprocess.run(
        [sys.executable, "-c", COLLECT, *files], cwd=ROOT, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    found = {}
    for line in proc.stdout.splitlines():
        if line.startswith("ITEM "):
            node, where = line.removeprefix("ITEM ").rsplit(" ", 1)  # ids may hold spaces
            found[node] = where
    assert proc.returncode == 0 and found, f"{proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    return found


def matches(named: str) -> list[str]:
    """Collected ids a table entry stands for: itself, or all parameters of a bare name."""
    everything = collected()
    if named in everything:
        return [named]
    return [] if "[" in named else [n for n in everything if n.startswith(named + "[")]


def test_every_faults_item_is_listed_with_at_least_one_test():
    found = rows()
    assert sorted(found) == list(range(1, ITEMS + 1))
    assert all(ids for ids, _ in found.values()), [i for i, (ids, _) in found.items() if not ids]


def test_every_listed_test_is_collected_by_pytest():
    named = {n for ids, _ in rows().values() for n in ids}
    assert sorted(n for n in named if not matches(n)) == []


@pytest.mark.parametrize("item", range(1, ITEMS + 1))
def test_runs_on_column_matches_the_gpu_marks(item):
    ids, runs_on = rows()[item]
    # A bare name of a parametrised test runs on the CPU if any of its parameters does.
    cpu = [n for n in ids if any(collected()[m] == "cpu" for m in matches(n))]
    gpu = [n for n in ids if n not in cpu]
    expected = ", ".join(name for name, tests in (("CPU", cpu), ("GPU", gpu)) if tests)
    assert runs_on == expected, f"item {item}: CPU tests {cpu}, GPU tests {gpu}"
