"""Disk-full scenarios, run inside a private mount namespace on a tiny tmpfs (tiny_disk.py).

argv: TESTS DISK SCENARIO [ARGS]. The disk is filled with a ballast file (real data, so tmpfs
really allocates it) until `room` bytes are left; "freeing space" deletes the ballast. Prints
one JSON line of facts for the test to check; the checks themselves live in test_disk_full.py.

Scenarios:
  build ROOM         one build() and one build_many() on the full disk, then again after freeing
  archive-run WORK   a search whose archive fills the disk mid-run, then resumed after freeing
  build-run WORK     a search whose build cache fills the disk mid-run, then resumed after freeing
"""

from __future__ import annotations

import ctypes
import json
import os
import sqlite3
import sys
from pathlib import Path

TESTS, DISK, SCENARIO, *ARGS = sys.argv[1:]
sys.path.insert(0, TESTS)
DISK_PATH = Path(DISK)
BALLAST = DISK_PATH / "ballast"

from standin import StandIn, evaluated_hashes, logged, make_task  # noqa: E402

from hipevolve.app.run_job import first_candidates  # noqa: E402
from hipevolve.archive.store import Archive  # noqa: E402
from hipevolve.core.errors import UserError  # noqa: E402
from hipevolve.evolution.islands import EvolutionSettings  # noqa: E402
from hipevolve.evolution.run import run_evolution  # noqa: E402
from hipevolve.verifier.build.compile import Compiler, build, build_many  # noqa: E402

GXX = Compiler(
    name="test",
    argv=("g++", "-x", "c++", "-shared", "-fPIC", "-O1", "kernel.hip", "-o", "lib.so"),
    toolchain="g++ (test)",
)
BUDGET, SEED = 24, 11


def fill(room: int) -> None:
    """Leaves `room` bytes free on the disk."""
    stat = os.statvfs(DISK_PATH)
    with BALLAST.open("ab") as f:
        f.write(b"\1" * max(stat.f_bavail * stat.f_frsize - room, 0))


def free_space() -> None:
    BALLAST.unlink()


def integrity(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("PRAGMA integrity_check")]


def failure(e: BaseException) -> dict:
    line = e.line() if isinstance(e, UserError) else repr(e)
    return {"type": type(e).__name__, "line": line}


def source(value: int) -> str:
    return f'extern "C" int answer() {{ return {value}; }}\n'


def scenario_build(room: str) -> dict:
    cache = DISK_PATH / "cache"
    facts: dict = {}
    fill(int(room))
    for name, attempt in (
        ("build", lambda: build(source(3), GXX, cache)),
        ("build_many", lambda: build_many([source(4), source(5)], GXX, cache, jobs=2)),
    ):
        try:
            facts[name] = {"returned": repr(attempt())}
        except Exception as e:
            facts[name] = failure(e)
    facts["left_in_build"] = sorted(p.name for p in (cache / "build").glob("*"))
    facts["published"] = sorted(p.name for p in (cache / "lib").rglob("*.so"))
    free_space()
    again = build(source(3), GXX, cache)
    facts["after"] = {"ok": again.ok, "cached": again.cached, "log": again.log}
    facts["answer"] = ctypes.CDLL(str(again.library)).answer() if again.ok else None
    return facts


def search(archive: Archive, work: Path, evaluate, run_id: int | None = None) -> str:
    task = make_task(work)
    summary = run_evolution(task, archive, EvolutionSettings(), evaluate,
                            first=first_candidates(task), budget=BUDGET, seed=SEED,
                            run_id=run_id)  # fmt: skip
    return summary.reason


def resume_after(db: Path, work: Path, facts: dict, evaluate) -> None:
    """Records what the interrupted run kept, frees the disk, resumes the run to its budget."""
    facts["integrity"] = integrity(db)
    facts["recorded_before"] = evaluated_hashes(db)
    free_space()
    with Archive.open(db) as archive:
        facts["status_before_resume"] = archive.run(1).status
        facts["reason"] = search(archive, work, evaluate, run_id=1)
    facts["integrity_after"] = integrity(db)
    facts["hashes"] = evaluated_hashes(db)


def scenario_archive_run(work: str) -> dict:
    """The archive is on the tiny disk; the run fills it."""
    work_path, db = Path(work), DISK_PATH / "run.db"
    facts: dict = {}
    fill(800 * 1024)  # a few generations' worth of archive, then the disk is full
    try:
        with Archive.open(db) as archive:
            facts["reason_first"] = search(archive, work_path, StandIn(work_path / "first.log"))
    except Exception as e:
        facts["error"] = failure(e)
    resume_after(db, work_path, facts, StandIn(work_path / "resumed.log"))
    facts["first_log"] = logged(work_path / "first.log")
    facts["resumed_log"] = logged(work_path / "resumed.log")
    return facts


class BuildingStandIn(StandIn):
    """Compiles each candidate (a C function carrying its hash) with g++ into a build cache on
    the tiny disk, then scores it like StandIn. At its `fill_at`-th call the disk fills up."""

    def __init__(self, log: Path, cache: Path, fill_at: int | None) -> None:
        super().__init__(log)
        self.cache, self.fill_at, self.calls = cache, fill_at, 0

    def __call__(self, candidates):
        self.calls += 1
        if self.calls == self.fill_at:
            fill(8 * 1024)  # room for a source file, not for a library
        sources = [
            f'extern "C" const char* hash() {{ return "{c.source_hash}"; }}\n' for c in candidates
        ]
        for built in build_many(sources, GXX, self.cache, jobs=2):
            if not built.ok:
                raise AssertionError(f"a healthy build failed: {built.log}")
        return super().__call__(candidates)


def scenario_build_run(work: str) -> dict:
    """The archive is on a roomy disk (WORK); the build cache on the tiny one fills mid-run."""
    work_path, db = Path(work), Path(work) / "run.db"
    cache = DISK_PATH / "cache"
    facts: dict = {}
    try:
        with Archive.open(db) as archive:
            evaluate = BuildingStandIn(work_path / "first.log", cache, fill_at=3)
            facts["reason_first"] = search(archive, work_path, evaluate)
    except Exception as e:
        facts["error"] = failure(e)
    facts["left_in_build"] = sorted(p.name for p in (cache / "build").glob("*"))
    with sqlite3.connect(db) as conn:
        facts["compile_errors"] = conn.execute(
            "SELECT count(*) FROM evaluations WHERE status = 'compile_error'"
        ).fetchone()[0]
    resume_after(db, work_path, facts, BuildingStandIn(work_path / "resumed.log", cache, None))
    facts["first_log"] = logged(work_path / "first.log")
    facts["resumed_log"] = logged(work_path / "resumed.log")
    return facts


SCENARIOS = {
    "build": scenario_build,
    "archive-run": scenario_archive_run,
    "build-run": scenario_build_run,
}

if __name__ == "__main__":
    print(json.dumps(SCENARIOS[SCENARIO](*ARGS)))
