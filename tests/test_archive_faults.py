"""The archive under faults (FAULTS 26, 30-33): SIGKILLed writers, a second writer, a reader
during writes, a full disk, and files that are not (healthy) archives.

Writers run as real child processes (python -c) killed with SIGKILL; checks read the file back
through a fresh sqlite3 connection.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hipevolve.archive.store import Archive, ArchiveFull, evaluation_key
from hipevolve.core.candidate import Candidate
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import CaseResult, Evaluation, Status

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL and fork semantics")

PRELUDE = """
import sys, time
from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, Status

def cand(i, pad=0):
    return Candidate(format="native", hip_source=f"__global__ void k{i}() {{}}\\n",
                     python_source=f"class ModelNew:\\n    blob = '{'x' * pad}'\\n", name=f"c{i}")

def ev(i):
    return Evaluation(status=Status.ok, task="softmax", cases=(
        CaseResult(case="a", correct=True, time_us=10.0, ref_time_us=10.0 + i),))

def say(*words):
    print(*words, flush=True)
"""


def cand(i: int) -> Candidate:
    return Candidate(
        format="native",
        hip_source=f"__global__ void k{i}() {{}}\n",
        python_source="class ModelNew:\n    blob = ''\n",
        name=f"c{i}",
    )


def child(code: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + code, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"child exited early: {proc.wait()} {proc.stderr.read()}")
    return line.strip()


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def _proc_fields(pid: int) -> list[str]:
    """Fields of /proc/PID/stat after the command name: [state, ppid, ...]."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def integrity(path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


# ---------------------------------------------------------------------------- 31: SIGKILL


WRITE_LOOP = """
a = Archive.open(sys.argv[1])
run = a.resume(int(sys.argv[2])).run.id if len(sys.argv) > 2 else a.start_run("softmax", {}, 0, None)
say("run", run)
i = int(time.time() * 1000)
while True:
    cid = a.add_candidate(run, cand(i, pad=300_000))  # ~75 pages per commit: kills land mid-write
    a.enqueue(cid)
    say(cid)
    i += 1
"""


def test_sigkill_during_writes_leaves_an_intact_archive_with_every_committed_row(tmp_path):
    path = tmp_path / "a.db"
    committed: list[int] = []
    run = None
    for round_ in range(3):
        proc = child(WRITE_LOOP, path, *([run] if run is not None else []))
        run = int(read_line(proc).split()[1])
        for _ in range(5 + 3 * round_):
            committed.append(int(read_line(proc)))
        time.sleep(0.003 * round_)  # land at different points of a write
        kill(proc)
        committed += [int(x) for x in proc.stdout.read().split()]
        assert integrity(path) == ["ok"]
    with Archive.open(path) as a:
        stored = set(a.candidate_ids(run))
        assert set(committed) <= stored
        assert set(committed) <= set(a.queued(run))
        assert a.runs()[0].status == "interrupted"


# ---------------------------------------------------------------------------- 30: resume


EVALUATE_THEN_HANG = """
a = Archive.open(sys.argv[1])
run = a.start_run("softmax", {}, 0, None)
ids = [a.add_candidate(run, cand(i)) for i in range(6)]
for cid in ids:
    a.enqueue(cid)
for cid in ids[:3]:
    a.mark_in_flight(cid)
    a.record_evaluation(cid, ev(cid), "settings", "toolchain")
a.mark_in_flight(ids[3])
say(run, *ids)
time.sleep(60)  # "evaluating" ids[3] when the SIGKILL comes
"""


def test_resume_after_sigkill_mid_evaluation_requeues_in_flight_and_evaluates_nothing_twice(
    tmp_path,
):
    path = tmp_path / "a.db"
    proc = child(EVALUATE_THEN_HANG, path)
    run, *ids = map(int, read_line(proc).split())
    kill(proc)
    with Archive.open(path) as a:
        resumed = a.resume(run)
        assert resumed.requeued == (ids[3],)
        assert resumed.queued == tuple(ids[3:])
        assert a.queued(run, "done") == ids[:3]
        # The loop asks before spending a GPU: the completed three are answered from the archive.
        for cid in ids[:3]:
            key = evaluation_key(a.candidate(cid).source_hash, "settings", "toolchain")
            assert a.evaluated(key) is not None
        key = evaluation_key(a.candidate(ids[3]).source_hash, "settings", "toolchain")
        assert a.evaluated(key) is None
        for cid in ids[:3]:  # a redundant retry stores nothing new
            a.record_evaluation(cid, _ev(99), "settings", "toolchain")
        assert a.count_evaluations(run) == 3
        assert a.best(run).candidate_id == ids[2]


def _ev(i: int) -> Evaluation:
    return Evaluation(
        status=Status.ok,
        task="softmax",
        cases=(CaseResult(case="a", correct=True, time_us=10.0, ref_time_us=10.0 + i),),
    )


# ---------------------------------------------------------------------------- 32: second writer


HOLD = """
a = Archive.open(sys.argv[1])
if len(sys.argv) > 2:
    try:
        a.resume(int(sys.argv[2]))
        say("took")
    except Exception as e:
        say("refused", e.line())
else:
    say(a.start_run("softmax", {}, 0, None))
time.sleep(60)
"""


def test_a_live_writer_refuses_a_second_process_until_it_is_sigkilled(tmp_path):
    path = tmp_path / "a.db"
    holder = child(HOLD, path)
    run = int(read_line(holder))
    with Archive.open(path) as a:
        with pytest.raises(UserError) as e:
            a.resume(run)
        assert e.value.line().startswith(f"run {run} is being written by pid {holder.pid} (")
        assert "\n" not in e.value.line()
        with pytest.raises(UserError, match=f"run {run} is being written by pid {holder.pid}"):
            a.add_candidate(run, cand(1))
        assert a.runs()[0].status == "running"
        kill(holder)
        assert a.runs()[0].status == "interrupted"
        a.resume(run)  # the dead writer's lock is taken over, no waiting
        a.add_candidate(run, cand(1))
    assert integrity(path) == ["ok"]


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_a_writer_that_died_unreaped_does_not_hold_its_run(tmp_path):
    path = tmp_path / "a.db"
    holder = child(HOLD, path)
    run = int(read_line(holder))
    os.kill(holder.pid, signal.SIGKILL)  # not reaped yet: a zombie whose pid still exists
    deadline = time.time() + 10
    while _proc_fields(holder.pid)[0] != "Z":
        assert time.time() < deadline
        time.sleep(0.01)
    with Archive.open(path) as a:
        a.resume(run)
    holder.wait(timeout=10)


def test_two_processes_resuming_one_run_at_once_exactly_one_wins(tmp_path):
    path = tmp_path / "a.db"
    with Archive.open(path) as a:
        run = a.start_run("softmax", {}, 0, None)
    racers = [child(HOLD, path, run) for _ in range(3)]
    try:
        outcomes = [read_line(p) for p in racers]
    finally:
        for p in racers:
            kill(p)
    assert sorted(o.split()[0] for o in outcomes) == ["refused", "refused", "took"]
    assert all(" is being written by pid " in o for o in outcomes if o.startswith("refused"))


# ---------------------------------------------------------------------------- 33: reader


SLOW_WRITER = """
a = Archive.open(sys.argv[1])
run = a.start_run("softmax", {}, 0, None)
say(run)
for i in range(400):
    a.add_candidate(run, cand(i, pad=2000))
    time.sleep(0.001)
say("done")
"""


def test_a_reader_process_reads_consistently_while_a_writer_writes(tmp_path):
    path = tmp_path / "a.db"
    writer = child(SLOW_WRITER, path)
    run = int(read_line(writer))
    seen: list[int] = []
    with Archive.open(path, create=False) as reader:
        while writer.poll() is None:
            ids = reader.candidate_ids(run)
            assert ids == sorted(ids)
            seen.append(len(ids))
            if ids:
                assert reader.candidate(ids[-1]).candidate.name == f"c{len(ids) - 1}"
        assert writer.wait() == 0, writer.stderr.read()
        assert len(reader.candidate_ids(run)) == 400
    assert seen == sorted(seen)
    assert any(0 < n < 400 for n in seen), "the reader never saw the writer mid-way"


# ---------------------------------------------------------------------------- 26: disk full


def test_a_full_disk_is_a_clear_error_the_archive_stays_intact_and_the_run_goes_on(tmp_path):
    path = tmp_path / "a.db"
    with Archive.open(path) as a:
        run = a.start_run("softmax", {}, 0, None)
        kept = [a.add_candidate(run, cand(i)) for i in range(5)]
        pages = a.db.execute("PRAGMA page_count").fetchone()[0]
        a.db.execute(f"PRAGMA max_page_count = {pages + 2}")  # the disk is nearly full
        big = Candidate(
            format="native",
            hip_source="__global__ void big() {}\n",
            python_source=f"class ModelNew:\n    blob = '{'y' * 200_000}'\n",
            name="big",
        )
        with pytest.raises(ArchiveFull) as e:
            a.add_candidate(run, big)
        assert isinstance(e.value, UserError)
        assert "disk is full" in e.value.line() and "\n" not in e.value.line()
        assert integrity(path) == ["ok"]
        assert a.candidate_ids(run) == kept  # nothing half-written
        a.db.execute("PRAGMA max_page_count = 1073741823")  # space freed: the run goes on
        assert a.add_candidate(run, big) not in kept
    assert integrity(path) == ["ok"]


# ---------------------------------------------------------------------------- bad files


def test_a_file_that_is_not_sqlite_is_refused_with_one_line(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("kernel notes, not a database\n" * 10)
    with pytest.raises(UserError, match="is not an SQLite file") as e:
        Archive.open(path)
    assert "\n" not in e.value.line()
    assert path.read_text() == "kernel notes, not a database\n" * 10


def test_a_foreign_sqlite_database_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    conn.execute("INSERT INTO meta VALUES ('app', 'someone else')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(UserError, match="not a hipevolve archive") as e:
        Archive.open(path)
    assert "\n" not in e.value.line()
    assert path.read_bytes() == before  # no WAL switch, no tables added
    assert not (tmp_path / "other.db-wal").exists()


def test_a_corrupt_archive_is_refused_with_one_line_naming_the_fix(tmp_path):
    path = tmp_path / "a.db"
    with Archive.open(path) as a:
        run = a.start_run("softmax", {}, 0, None)
        for i in range(60):
            a.add_candidate(
                run,
                Candidate(
                    format="native",
                    hip_source=f"int k{i};",
                    python_source="x = '" + "z" * 3000 + "'",
                    name="c",
                ),
            )
    data = bytearray(path.read_bytes())
    for offset in range(4096 * 3, len(data) - 4096, 4096 * 5):
        data[offset : offset + 512] = bytes((offset + i) % 251 for i in range(512))
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match="is corrupt") as e:
        Archive.open(path)
    assert ".recover" in e.value.line() and "\n" not in e.value.line()


def test_opening_a_missing_archive_without_create_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="no archive at"):
        Archive.open(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


# ---------------------------------------------------------------------------- lock details


def _plant_lock(path, run: int, **fields: object) -> None:
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM run_locks WHERE run = ?", [run])
    conn.execute(
        "INSERT INTO run_locks(run, pid, host, proc_start, token, heartbeat)"
        " VALUES(:run, :pid, :host, :proc_start, 'planted', :heartbeat)",
        {"run": run, **fields},
    )
    conn.commit()
    conn.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_a_recycled_pid_is_not_mistaken_for_the_writer(tmp_path):
    path = tmp_path / "a.db"
    with Archive.open(path) as a:
        run = a.start_run("softmax", {}, 0, None)
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        started = _proc_fields(sleeper.pid)[19]  # field 22 of /proc/PID/stat: start time
        host = socket.gethostname()
        with Archive.open(path) as a:
            _plant_lock(
                path, run, pid=sleeper.pid, host=host, proc_start=started, heartbeat=time.time()
            )
            with pytest.raises(UserError, match=f"being written by pid {sleeper.pid}"):
                a.resume(run)
            # Same pid, another start time: the writer died and the pid went to someone else.
            _plant_lock(
                path,
                run,
                pid=sleeper.pid,
                host=host,
                proc_start=str(int(started) - 1),
                heartbeat=time.time(),
            )
            a.resume(run)
    finally:
        kill(sleeper)


def test_a_writer_on_another_host_holds_the_run_until_its_heartbeat_is_an_hour_old(tmp_path):
    path = tmp_path / "a.db"
    with Archive.open(path) as a:
        run = a.start_run("softmax", {}, 0, None)
    with Archive.open(path) as a:
        _plant_lock(path, run, pid=1, host="elsewhere", proc_start=None, heartbeat=time.time())
        with pytest.raises(UserError, match="being written by pid 1 on host elsewhere"):
            a.resume(run)
        _plant_lock(
            path, run, pid=1, host="elsewhere", proc_start=None, heartbeat=time.time() - 3700
        )
        assert a.resume(run).run.status == "running"
        assert a.events(run)[-1].data["stale_writer"] == "pid 1 on elsewhere"
