"""FAULTS.md 26: a full disk during a build or an archive write is a clear one-line error, the
archive stays consistent, the run pauses, and resuming it after space is freed completes it as
an uninterrupted run would.

The full disk is real: a tiny tmpfs in a private mount namespace (tiny_disk.py), filled with a
ballast file, so the kernel itself answers ENOSPC to the compiler, the linker and SQLite. The
quota / file-size-limit variant (EFBIG, which SQLite reports as a failed write, not as a full
disk) uses RLIMIT_FSIZE in a child process and needs no namespace.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from standin import StandIn, evaluated_hashes, make_task
from tiny_disk import run_on_tiny_disk, unavailable

from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import run_evolution
from hipevolve.verifier.build.compile import Compiler, build

BUDGET, SEED = 24, 11  # as in disk_full_child.py

needs_tiny_disk = pytest.mark.skipif(
    sys.platform != "linux" or unavailable() is not None, reason=str(unavailable())
)


def uninterrupted_hashes(tmp_path: Path) -> list[str]:
    """What a run with the same seed and budget evaluates when nothing goes wrong."""
    root = tmp_path / "whole"
    root.mkdir()
    with Archive.open(root / "run.db") as archive:
        task = make_task(root)
        run_evolution(task, archive, EvolutionSettings(), StandIn(root / "log"),
                      first=first_candidates(task), budget=BUDGET, seed=SEED)  # fmt: skip
    return evaluated_hashes(root / "run.db")


def assert_paused_then_completed(facts: dict, tmp_path: Path, error_type: str) -> None:
    assert "reason_first" not in facts, "the disk never filled: the run finished"
    assert facts["error"]["type"] == error_type, facts["error"]
    line = facts["error"]["line"]
    assert "the disk is full" in line and "resume the run" in line and "\n" not in line, line
    assert facts["integrity"] == ["ok"] and facts["integrity_after"] == ["ok"]
    assert facts["status_before_resume"] == "interrupted"
    assert facts["reason"] == "budget"
    hashes = facts["hashes"]
    assert len(hashes) == len(set(hashes)) == BUDGET, "an evaluation was recorded twice"
    assert hashes[: len(facts["recorded_before"])] == facts["recorded_before"]
    # Nothing recorded before the disk filled was evaluated again after the resume.
    assert not set(facts["recorded_before"]) & set(facts["resumed_log"])
    assert hashes == uninterrupted_hashes(tmp_path)


@needs_tiny_disk
@pytest.mark.parametrize("room", [0, 8192], ids=["no_room_for_the_source", "no_room_to_link"])
def test_full_disk_during_a_build_is_one_line_not_a_compile_error_and_the_build_works_after(
    tmp_path, room
):
    facts = run_on_tiny_disk(tmp_path / "disk", 256, "build", room)
    for name in ("build", "build_many"):
        assert facts[name].get("type") == "BuildDiskFull", facts[name]
        line = facts[name]["line"]
        assert "the disk is full" in line and "\n" not in line, line
    assert facts["left_in_build"] == [] and facts["published"] == []
    assert facts["after"] == {"ok": True, "cached": False, "log": ""}, facts["after"]
    assert facts["answer"] == 3


def test_a_candidate_that_prints_no_space_left_on_a_roomy_disk_is_still_a_compile_error(tmp_path):
    gxx = Compiler(name="test", argv=("g++", "-x", "c++", "-shared", "-fPIC", "kernel.hip", "-o",
                                      "lib.so"), toolchain="g++ (test)")  # fmt: skip
    result = build("#error No space left on device\n", gxx, tmp_path)
    assert not result.ok and "No space left on device" in result.log


@needs_tiny_disk
def test_full_disk_under_the_archive_mid_run_pauses_it_and_resume_completes_it(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    facts = run_on_tiny_disk(tmp_path / "disk", 8192, "archive-run", work)
    assert_paused_then_completed(facts, tmp_path, "ArchiveFull")
    assert facts["recorded_before"], "the disk filled before the first evaluation was recorded"


@needs_tiny_disk
def test_full_disk_under_the_build_cache_mid_run_pauses_it_and_resume_completes_it(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    facts = run_on_tiny_disk(tmp_path / "disk", 1024, "build-run", work)
    assert_paused_then_completed(facts, tmp_path, "BuildDiskFull")
    assert facts["compile_errors"] == 0, "a healthy candidate was charged for the full disk"
    assert facts["left_in_build"] == []
    assert facts["recorded_before"]


# A quota or `ulimit -f`: the write fails with EFBIG/EDQUOT, which SQLite reports as
# SQLITE_IOERR_WRITE rather than SQLITE_FULL.
FILE_SIZE_LIMIT = """
import json, resource, sqlite3, sys
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate

def cand(i, pad):
    return Candidate(format="native", hip_source=f"__global__ void k{i}() {{}}\\n",
                     python_source=f"x = '{'x' * pad}'\\n", name=f"c{i}")

facts = {}
with Archive.open(sys.argv[1]) as a:
    run = a.start_run("softmax", {}, 0, None)
    kept = [a.add_candidate(run, cand(i, 100)) for i in range(5)]
    resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, resource.RLIM_INFINITY))
    try:
        a.add_candidate(run, cand(99, 400_000))
    except Exception as e:
        facts["error"] = [type(e).__name__, e.line() if hasattr(e, "line") else repr(e)]
    facts["kept"] = a.candidate_ids(run) == kept
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    facts["added_after"] = a.add_candidate(run, cand(99, 400_000)) not in kept
with sqlite3.connect(sys.argv[1]) as conn:
    facts["integrity"] = [r[0] for r in conn.execute("PRAGMA integrity_check")]
print(json.dumps(facts))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE")
def test_a_write_over_the_file_size_limit_is_one_line_and_the_archive_goes_on(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMIT, str(tmp_path / "a.db")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    facts = json.loads(proc.stdout)
    kind, line = facts["error"]
    assert kind == "ArchiveFull", line
    assert "refused a write" in line and "resume the run" in line and "\n" not in line
    assert facts == {"error": facts["error"], "kept": True, "added_after": True,
                     "integrity": ["ok"]}  # fmt: skip
