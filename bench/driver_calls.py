"""Which driver calls each process of a run makes, and how long each one takes.

    python bench/driver_calls.py --evaluations 48 --log one.log -- \\
        python bench/scaling.py --candidates 48 --no-cold --gpus 1
    python bench/driver_calls.py --compare one.log:48 two.log:48    # traces side by side
    python bench/driver_calls.py --since 16 --compare one.log:36 two.log:31   # steady state

CUDA and ROCm drive the GPU through ioctl system calls on the driver's device files: creating a
context, allocating and mapping memory, sharing it between processes. Kernel launches make
none. Every process of the command loads the tracer (bench/driver_calls.c, compiled here with
cc) through LD_PRELOAD, which the verifier passes on to its judges and their sandboxes
(verifier/isolate.py), and each ioctl becomes one line of the trace: process, start, duration,
request.

The summary, per evaluation with --evaluations: for each kind of process (the command itself,
judges, zygotes, sandboxes, others) the ioctls and the milliseconds spent inside them; each
sandbox split at its longest pause, which is the wait for its job (before: starting, creating
its device context, loading kernels; after: the job); and the calls that took the most time,
as (process kind, F for NVIDIA's resource manager or U for other ioctls, request, and for the
resource manager's controls and allocations the command or class). With --compare, several
saved traces side by side: what grows from one GPU to two shows there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel

HERE = Path(__file__).resolve().parent
FIFO_ENV = "HIPEVOLVE_IOCTL_FIFO"  # read by the tracer; on the verifier's environment allowlist


class Calls(BaseModel):
    count: float
    ms: float


class Top(BaseModel):
    key: str  # "role kind request sub"
    count: float
    ms: float
    us_per_call: float


class Summary(BaseModel):
    per: str  # "evaluation" or "run"
    roles: dict[str, Calls]
    sandboxes: int
    sandbox_start: Calls  # per sandbox
    sandbox_job: Calls
    top: list[Top]


class Trace(BaseModel):
    execs: dict[int, str]  # pid -> command line ('|' for spaces), the last one it executed
    forks: dict[int, int]  # pid -> parent pid, for forked processes
    calls: dict[int, list[tuple[int, int, str, str, str]]]  # pid -> (start, ns, kind, req, sub)
    command_pid: int = 0


def build_tracer(folder: Path) -> Path:
    """Compiles the tracer into `folder`; SystemExit with the compiler's words if it cannot."""
    lib = folder / "driver_calls.so"
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        raise SystemExit("driver_calls: no C compiler (cc or gcc) to build the tracer")
    args = [cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(HERE / "driver_calls.c"), "-ldl"]
    done = subprocess.run([*args, "-lpthread"], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"driver_calls: building the tracer failed: {done.stderr.strip()[:300]}")
    return lib


def trace(command: list[str], log: Path) -> tuple[int, int]:
    """Runs `command` with every ioctl of it and its descendants written to `log`; returns its
    exit code and its pid (the log's last line names it too)."""
    with tempfile.TemporaryDirectory(prefix="driver-calls-") as folder:
        lib = build_tracer(Path(folder))
        fifo = Path(folder) / "trace"
        os.mkfifo(fifo)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        ours = os.open(fifo, os.O_WRONLY | os.O_CLOEXEC)  # no end of file before the command's
        os.set_blocking(reader, True)

        def copy() -> None:
            with os.fdopen(reader, "rb") as src, open(log, "wb") as out:
                shutil.copyfileobj(src, out)

        copier = threading.Thread(target=copy, daemon=True)
        copier.start()
        preload = " ".join(p for p in (os.environ.get("LD_PRELOAD"), str(lib)) if p)
        env = dict(os.environ, LD_PRELOAD=preload, **{FIFO_ENV: str(fifo)})
        try:
            proc = subprocess.Popen(command, env=env)
            code = proc.wait()
        except OSError as e:
            raise SystemExit(f"driver_calls: cannot run {command[0]!r}: {e.strerror}") from None
        finally:
            os.close(ours)
        copier.join(timeout=30)  # processes the command left running may still hold the FIFO
    with open(log, "a") as out:
        out.write(f"C {proc.pid}\n")  # which process was the command
    return code, proc.pid


def load(log: Path) -> Trace:
    command_pid = 0
    execs: dict[int, str] = {}
    forks: dict[int, int] = {}
    calls: dict[int, list] = defaultdict(list)
    for line in log.read_text(errors="replace").splitlines():
        p = line.split()
        try:
            if p[0] == "C" and len(p) == 2:
                command_pid = int(p[1])
            elif p[0] == "E" and len(p) >= 4:
                execs[int(p[1])] = p[4] if len(p) > 4 else ""
            elif p[0] == "F" and len(p) == 4:
                forks[int(p[1])] = int(p[2])
            elif p[0] == "I" and len(p) == 7:
                calls[int(p[1])].append((int(p[2]), int(p[3]), p[4], p[5], p[6]))
        except (IndexError, ValueError):
            continue  # a line cut short when a process was killed mid-write
    for pid_calls in calls.values():
        pid_calls.sort()
    # Parsed here, from the tracer's own format: no validation pass over a million calls.
    return Trace.model_construct(
        execs=execs, forks=forks, calls=dict(calls), command_pid=command_pid
    )


def role(pid: int, t: Trace) -> str:
    """The kind of process: judge, zygote, sandbox (forked by a zygote, or spawned), command
    (the traced command and what it forked), or other."""
    hops = 0
    while pid not in t.execs and pid in t.forks and hops < 16:
        pid, hops = t.forks[pid], hops + 1
    cmd = t.execs.get(pid, "")
    if "hipevolve.verifier.gpu.sandbox.zygote" in cmd:
        return "sandbox" if hops else "zygote"
    if "hipevolve.verifier.gpu.sandbox.sandbox_process" in cmd:
        return "sandbox"
    if "hipevolve.verifier.gpu.judge.worker" in cmd:
        return "judge"
    return "command" if pid == t.command_pid else "other"


def summarise(t: Trace, evaluations: int = 0, since_s: float = 0.0, top: int = 30) -> Summary:
    """Per evaluation (or for the whole run), leaving out calls in the first `since_s` seconds
    of the trace (start-up: the judges' own device contexts, the first reference builds)."""
    per = max(evaluations, 1)
    first = min((c[0][0] for c in t.calls.values() if c), default=0)
    if since_s:
        cut = first + since_s * 1e9
        t = t.model_copy(
            update={"calls": {p: [c for c in cs if c[0] >= cut] for p, cs in t.calls.items()}}
        )
    roles: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    keys: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    start, job, sandboxes = [0, 0], [0, 0], 0
    for pid, calls in t.calls.items():
        kind = role(pid, t)
        for _, ns, *key in calls:
            for acc in (roles[kind], keys[" ".join([kind, *key])]):
                acc[0] += 1
                acc[1] += ns
        if kind == "sandbox" and len(calls) > 1:
            sandboxes += 1
            pauses = [
                (calls[i + 1][0] - calls[i][0] - calls[i][1], i) for i in range(len(calls) - 1)
            ]
            split = max(pauses)[1]
            for i, call in enumerate(calls):
                part = start if i <= split else job
                part[0] += 1
                part[1] += call[1]
    n = max(sandboxes, 1)
    ranked = sorted(keys.items(), key=lambda kv: -kv[1][1])[:top]
    return Summary(
        per="evaluation" if evaluations else "run",
        roles={k: Calls(count=c / per, ms=ns / per / 1e6) for k, (c, ns) in roles.items()},
        sandboxes=sandboxes,
        sandbox_start=Calls(count=start[0] / n, ms=start[1] / n / 1e6),
        sandbox_job=Calls(count=job[0] / n, ms=job[1] / n / 1e6),
        top=[
            Top(key=k, count=c / per, ms=ns / per / 1e6, us_per_call=ns / c / 1e3)
            for k, (c, ns) in ranked
        ],
    )


def show(named: list[tuple[str, Summary]]) -> None:
    names = " | ".join(f"{n:>22}" for n, _ in named)
    print(f"ioctls and ms inside them, per {named[0][1].per}{'':<6}| {names}")
    for r in sorted({r for _, s in named for r in s.roles}):
        cells = [s.roles.get(r, Calls(count=0, ms=0)) for _, s in named]
        print(f"  {r:<34}| " + " | ".join(f"{c.count:>10.1f} {c.ms:>11.2f}" for c in cells))
    for label in ("sandbox_start", "sandbox_job"):
        cells = [getattr(s, label) for _, s in named]
        print(f"  {label + ', per sandbox':<34}| "
              + " | ".join(f"{c.count:>10.1f} {c.ms:>11.2f}" for c in cells))  # fmt: skip
    print("the calls that took the most time: count, ms, us per call")
    keys = list(dict.fromkeys(t.key for _, s in named for t in s.top))
    for key in keys:
        cells = [next((t for t in s.top if t.key == key), None) for _, s in named]
        print(f"  {key:<34}| " + " | ".join(
            f"{c.count:>6.1f} {c.ms:>6.2f} {c.us_per_call:>8.0f}" if c else f"{'':>22}"
            for c in cells))  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=0, help="divide by this many")
    parser.add_argument("--log", type=Path, help="keep the trace here")
    parser.add_argument("--top", type=int, default=30, help="this many calls, by time")
    parser.add_argument("--since", type=float, default=0.0, metavar="SECONDS",
                        help="leave out the trace's first SECONDS (start-up)")  # fmt: skip
    parser.add_argument("--compare", nargs="+", metavar="LOG:EVALUATIONS",
                        help="summarise saved traces side by side")  # fmt: skip
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.compare:
        named = []
        for item in args.compare:
            path, _, n = item.rpartition(":")
            if not path or not n.isdigit() or not Path(path).is_file():
                raise SystemExit(f"driver_calls: {item!r} is not LOG:EVALUATIONS of a saved trace")
            named.append(
                (Path(path).name, summarise(load(Path(path)), int(n), args.since, args.top))
            )
        show(named)
        return
    if not command:
        raise SystemExit("driver_calls: name the command to trace after --, or use --compare")
    log = args.log
    if log is None:
        fd, name = tempfile.mkstemp(prefix="driver-calls-", suffix=".log")
        os.close(fd)
        log = Path(name)
    code, _ = trace(command, log)
    print(f"\ntrace of {' '.join(command)} (exit {code}) in {log}")
    show([(log.name, summarise(load(log), args.evaluations, args.since, args.top))])


if __name__ == "__main__":
    main()
