"""The main job as a user runs it, timed from the outside: `evolve --task T --budget N` in a fresh
folder, then what its archive says about the run (issue 47's must-show figures).

    python bench/main_job.py --task gated_delta_net --budget 200 --fresh-cache   # an empty cache
    python bench/main_job.py --task gated_delta_net --budget 200                 # the warm cache
    python bench/main_job.py --task softmax --budget 8 --fresh-cache             # a smoke run
    python bench/main_job.py --task gated_delta_net --stop-after 40              # then Ctrl-C

Prints: seconds from the command's start to its first recorded evaluation, the whole run's wall
time, units spent and distinct machine codes evaluated, evaluations a minute after the first,
the median seconds of each judge stage, how the run's baseline was timed (trials a case, the
strong baselines timed or not); before that, the command's own lines as they come, each with
the second after the start it came at (where a start-up's time goes; shown even when the bench
is cut short). --fresh-cache points the verifier's cache (compiled libraries, the run's cached
baseline) at an empty folder through a hipevolve.toml in the run's folder; without it the
user's cache is used as a user's run uses it. --stop-after N sends Ctrl-C after N seconds, as a
user who only wants to see the start would.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path


def _utc(stamp: str) -> datetime.datetime:
    when = datetime.datetime.fromisoformat(stamp)
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def summary(archive: Path, started: datetime.datetime) -> list[str]:
    """The run's figures from its archive; `started`: when the command was started (UTC)."""
    db = sqlite3.connect(archive)
    rows = db.execute(
        "SELECT created, status, evaluation, candidate FROM evaluations ORDER BY id"
    ).fetchall()
    if not rows:
        return ["no evaluation was recorded"]
    times = [(_utc(r[0]) - started).total_seconds() for r in rows]
    copies = {json.loads(d)["candidate"] for (d,) in
              db.execute("SELECT data FROM events WHERE kind = 'machine_copy'")}  # fmt: skip
    (screened,) = db.execute("SELECT count(*) FROM events WHERE kind = 'screened_copy'").fetchone()
    ran = [r for r in rows if r[3] not in copies]  # what a GPU ran (a copy reuses its original's)
    ran_times = [(_utc(r[0]) - started).total_seconds() for r in ran]
    lines = [
        f"first evaluation {times[0]:.1f} s after the start; last {times[-1]:.1f} s",
        f"evaluations recorded {len(rows)} ({dict(Counter(r[1] for r in rows))}); "
        f"machine-code copies {len(copies)} (answered without a GPU run); "
        f"children screened out as copies before they were stored {screened}",
    ]
    first = json.loads(rows[0][2]).get("seconds", {})
    lines.append("  its stages: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(first.items())))
    if len(ran_times) > 1 and ran_times[-1] > ran_times[0]:
        rate = (len(ran_times) - 1) / (ran_times[-1] - ran_times[0]) * 60
        lines.append(f"{rate:.1f} GPU evaluations a minute after the first ({len(ran)} in all)")
    stages: dict[str, list[float]] = {}
    for _, _, evaluation, _ in ran:
        for stage, seconds in json.loads(evaluation).get("seconds", {}).items():
            stages.setdefault(stage, []).append(seconds)
    lines += [f"  stage {name}: median {statistics.median(v):.2f} s over {len(v)}"
              for name, v in sorted(stages.items())]  # fmt: skip
    for (data,) in db.execute("SELECT data FROM events WHERE kind = 'baseline' ORDER BY id"):
        base = json.loads(data)
        trials = {case: c["trials"] for case, c in base["cases"].items()}
        lines.append(f"baseline: trials {trials}; strong timed {sorted(base.get('others', {}))}; "
                     f"pending {base.get('pending', [])}; not timed {base.get('unavailable', {})}")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="gated_delta_net")
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--fresh-cache", action="store_true",
                        help="an empty verifier cache (a new machine's first run)")  # fmt: skip
    parser.add_argument("--stop-after", type=float, default=None,
                        help="seconds, then Ctrl-C as a user would (a warm start's figures)")  # fmt: skip
    parser.add_argument("--folder", type=Path, default=None,
                        help="where the run's archive and files go (default: a new temp folder)")  # fmt: skip
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="main-job-"))
    folder.mkdir(parents=True, exist_ok=True)
    if args.fresh_cache:
        (folder / "hipevolve.toml").write_text(f'[verifier]\ncache_dir = "{folder / "cache"}"\n')
    archive = folder / "run.db"
    started = datetime.datetime.now(datetime.UTC)
    t0 = time.monotonic()
    command = [sys.executable, "-m", "hipevolve", "--task", args.task, "--budget",
               str(args.budget), "--archive", str(archive)]  # fmt: skip
    # Unbuffered: each line is stamped when the command prints it, not when a buffer fills.
    proc = subprocess.Popen(command, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})  # fmt: skip
    stderr: list[str] = []

    def stamp() -> None:  # each line as it comes, with when: a bench cut short still shows them
        for line in proc.stdout:
            print(f"  {time.monotonic() - t0:6.1f} s  {line.rstrip()[:160]}", flush=True)

    readers = [threading.Thread(target=stamp), threading.Thread(target=stderr.extend,
                                                                args=(proc.stderr,))]  # fmt: skip
    for reader in readers:
        reader.start()
    try:
        returncode = proc.wait(timeout=args.stop_after)
    except subprocess.TimeoutExpired:  # a user's Ctrl-C: the evaluations in flight finish first
        proc.send_signal(signal.SIGINT)
        try:
            returncode = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:  # the second Ctrl-C: what is in flight is dropped
            proc.send_signal(signal.SIGINT)
            returncode = proc.wait()
    for reader in readers:
        reader.join()
    wall = time.monotonic() - t0
    print(f"{args.task}, budget {args.budget}, {'fresh' if args.fresh_cache else 'warm'} cache: "
          f"exit {returncode}, {wall:.0f} s wall"
          + (f" (stopped with Ctrl-C after {args.stop_after:.0f} s)"
             if args.stop_after and wall > args.stop_after else ""))  # fmt: skip
    for line in summary(archive, started) if archive.exists() else ["no archive was written"]:
        print(line)
    if returncode:
        print("".join(stderr)[-2000:])


if __name__ == "__main__":
    main()
