"""Seeded searches on stand-in evaluators, dumped row for row: the behaviour the code had at
77005a3, before the re-layout of issue 31, kept in tests/data/golden/runs.json.

Three runs of the `evolve` main job (the real command line, `main(evaluators=...)`, the offline
policy) on the stand-in task, with different seeds, islands and generations in flight, and one
replayed agent run (the scripted model server on loopback, nvcc compiling each candidate). Each
archive is dumped table by table with what depends on the clock or the temporary folder left
out: timestamps, lock heartbeats, latencies, the run's folder and the checkout's.

Changed on purpose since 77005a3, table by table: `attempts` of the offline runs (the offline
mutator's children record the move they made as their idea; every other table as it was).

    python tests/golden_runs.py          # rewrite the snapshot (only when behaviour is meant to change)
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
SNAPSHOT = TESTS / "data" / "golden" / "runs.json"

# (name, evolve arguments after --task/--tasks-dir/--archive)
CLI_RUNS = [
    ("seed3_four_islands", ["--budget", "30", "--seed", "3"]),
    ("seed5_two_islands", ["--budget", "24", "--seed", "5", "--islands", "2"]),
]

CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from standin import StandInEvaluators
from hipevolve.app.cli import main
sys.argv = ["evolve", *sys.argv[3:]]
main(evaluators=StandInEvaluators(Path(sys.argv[2]), 0.0))
"""

# Columns that depend on the clock or the machine, never on the search.
VOLATILE = {"created", "started", "finished", "updated", "heartbeat", "latency_s", "pid", "host",
            "proc_start", "token"}  # fmt: skip
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?")


def dump(path: Path, root: Path) -> dict[str, list[dict]]:
    """Every table of the archive, rows in primary-key order, volatile columns dropped, the run's
    temporary folder replaced by `<root>` and the checkout by `<repo>`."""
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name"
    )]  # fmt: skip
    out: dict[str, list[dict]] = {}
    for table in tables:
        rows = conn.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall()
        out[table] = [_clean(dict(row), root) for row in rows]
    conn.close()
    return out


def _clean(row: dict, root: Path) -> dict:
    kept = {}
    for key, value in row.items():
        if key in VOLATILE or (key == "value" and row.get("key") == "created"):
            continue
        if isinstance(value, str):
            value = value.replace(str(root), "<root>").replace(str(REPO), "<repo>")
            value = TIMESTAMP.sub("<time>", value)
        kept[key] = value
    return kept


def cli_run(root: Path, args: list[str]) -> dict[str, list[dict]]:
    from standin import TASK_NAME, write_task_folder

    tasks = write_task_folder(root)
    db = root / "runs.db"
    argv = [sys.executable, "-c", CHILD, str(TESTS), str(root / "log"), "--task", TASK_NAME,
            "--tasks-dir", str(tasks), "--archive", str(db), *args]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stdout + out.stderr
    return dump(db, root)


def agent_run(root: Path) -> dict[str, list[dict]]:
    from agents_support import CompilingStandIn, replay_steps, replayed_run
    from llm_server import ScriptedLLMServer

    from hipevolve.archive.store import Archive

    db = root / "agents.db"
    evaluate = CompilingStandIn(root / "cache")
    with ScriptedLLMServer(replay_steps()) as server, Archive.open(db) as archive:
        replayed_run(archive, evaluate, server.api_base)
        api_base = server.api_base
    dumped = dump(db, root)
    return json.loads(json.dumps(dumped).replace(api_base, "<api_base>"))


def all_runs() -> dict[str, dict[str, list[dict]]]:
    runs = {}
    for name, args in CLI_RUNS:
        with tempfile.TemporaryDirectory() as tmp:
            runs[name] = cli_run(Path(tmp), args)
    with tempfile.TemporaryDirectory() as tmp:
        runs["agents_replayed"] = agent_run(Path(tmp))
    return runs


if __name__ == "__main__":
    sys.path.insert(0, str(TESTS))
    SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
    SNAPSHOT.write_text(json.dumps(all_runs(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT}")
