"""The controller's side of the GPU worker: the job, spawning the judge, deadlines, kill and reap.

The job itself (gpu/job.py) is plain dataclasses the judge reads too; here it is made from a task
and the verifier settings (`job_for_task`, `timeouts_of`). `run_worker(job)` runs one evaluation in
a judge process (verifier/gpu/judge/worker.py), which runs the candidate in a sandbox process of its
own (verifier/gpu/sandbox/sandbox.py), fresh for every evaluation. The judge gets its own process
group (so one killpg takes it and everything the candidate started), an allowlisted environment (no
API keys), each job as one JSON line on stdin and a dedicated result pipe for its answers; this side
enforces the overall deadline and reaps everything, and a judge that ends without a result is a
crash, never a pass. `StandbyPool` keeps judges that have already imported torch and created their
device context waiting for a job, so that cost overlaps the previous evaluation, and takes back a
judge whose evaluation ended cleanly (ok, incorrect or suspect) to serve again with a new sandbox:
one device context fewer to create and destroy per evaluation, the driver work that slowed every GPU
of a busy machine (docs/SCALING.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from hipevolve.core import cpu_share
from hipevolve.core.baseline import CaseBaseline
from hipevolve.core.evaluation import CaseResult, Status
from hipevolve.core.noise import median_interval
from hipevolve.verifier.gpu.confine import become_subreaper, group_pids
from hipevolve.verifier.gpu.job import BaselineJob, CandidateJob, CaseJob, Timeouts, WorkerJob

if TYPE_CHECKING:
    from hipevolve.core.config import VerifierSettings
    from hipevolve.core.taskspec import Case, TaskSpec

ENV_ALLOWLIST = (
    "PATH",
    "LANG",
    "LC_ALL",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "CUDA_HOME",
    "CUDA_PATH",
    "ROCM_PATH",
    "HIP_PATH",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
    "OMP_NUM_THREADS",
    "PYTORCH_ROCM_ARCH",
    "TORCH_CUDA_ARCH_LIST",
    "CC",
    "CXX",
    # bench/driver_calls.py traces every process's driver calls through a preloaded library
    "LD_PRELOAD",
    "HIPEVOLVE_IOCTL_FIFO",
)
# Set in every judge's (and so sandbox's) environment, whatever the controller's: one hardware
# work queue per CUDA context (CUDA_DEVICE_MAX_CONNECTIONS; CUDA's default is 8). Fewer queues
# make a context cheaper to create and destroy, the churn docs/SCALING.md found contending across
# GPUs. On two H200s (bench/scaling.py, 32 softmax candidates) 1 -> 2 GPU throughput went from
# 138 -> 193 evaluations per minute to 137-151 -> 240-250 (three runs); the GPU hostile and fault
# suites pass with it. Other runtimes ignore the variable.
JUDGE_ENV_FIXED = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}
LOG_TAIL = 600


def timeouts_of(settings: VerifierSettings) -> Timeouts:
    """The judge's stage timeouts: the verifier settings are their one source."""
    return Timeouts(
        load=settings.load_timeout_s,
        check=settings.check_timeout_s,
        timing=settings.timing_timeout_s,
    )


def case_job(case: Case, fastest: tuple[float, str] | None = None) -> CaseJob:
    """The case as a job carries it; `fastest`: its fastest believable time in this run and
    what it comes from (RunBaseline.bounds)."""
    roof = case.roofline.model_dump() if case.roofline else None
    us, why = fastest if fastest else (None, "")
    return CaseJob(
        name=case.name,
        init=dict(case.init),
        inputs=dict(case.inputs),
        timed=case.timed,
        roofline=roof,
        fastest_us=us,
        fastest_why=why,
    )


def job_for_task(
    task: TaskSpec,
    candidate: CandidateJob | None,
    settings: VerifierSettings,
    *,
    device: str = "cuda",
    cases: tuple[Case, ...] | None = None,
    seeds: tuple[int, ...] | None = None,
    fastest: Mapping[str, tuple[float, str]] | None = None,
    **fields: Any,
) -> WorkerJob:
    """The job for `candidate` on `task` (None: a reference-only job): trials, warm-up and stage
    timeouts from `settings`; `fastest`: the run's suspect bounds by case (RunBaseline.bounds)."""
    fastest = fastest or {}
    return WorkerJob(
        task=task.name,
        reference=task.reference,
        cases=tuple(case_job(c, fastest.get(c.name)) for c in (cases or task.cases)),
        tolerance=task.tolerance.model_dump(),
        candidate=candidate,
        device=device,
        seeds=seeds or tuple(range(task.check_seeds)),
        trials=settings.trials,
        reference_trials=settings.reference_trials,
        warmup=settings.warmup,
        timeouts=timeouts_of(settings),
        timing=task.timing,
        **fields,
    )


def baseline_jobs(task: TaskSpec, settings: VerifierSettings) -> tuple[BaselineJob, ...]:
    """The task's strong baselines as a reference-only job names them, compiling into the
    machine's shared folder for them (BaselineJob.compiles)."""
    compiles = baseline_compiles(settings)
    return tuple(
        BaselineJob(name=b.name, kind=b.kind, module=b.module, compiles=compiles)
        for b in task.baselines
    )


def baseline_compiles(settings: VerifierSettings) -> Path:
    """The strong baselines' JIT compile caches, in the verifier's cache folder: trusted code's
    kernels, out of every sandbox's reach (confine.py: a sandbox writes only its own folder)."""
    return settings.cache_dir / "baseline-compiles"


class WorkerCase(BaseModel):
    model_config = ConfigDict(extra="ignore")

    case: str
    correct: bool
    time_us: float | None = None
    ref_time_us: float | None = None
    cv: float | None = None
    max_abs_err: float | None = None
    rel_rms_err: float | None = None
    roofline_fraction: float | None = None
    message: str = ""
    trials: list[float] = Field(default_factory=list, description="candidate, microseconds")
    ref_trials: list[float] = Field(default_factory=list, description="reference, microseconds")
    wall_us: float | None = Field(default=None, description="judge-measured timing window")

    def to_case_result(self) -> CaseResult:
        fields = {k: getattr(self, k) for k in CaseResult.model_fields if hasattr(self, k)}
        if self.trials:
            fields["ci"] = round(median_interval(self.trials)[1], 6)
        return CaseResult(**fields)

    def reference_baseline(self) -> CaseBaseline | None:
        """The reference's trials as a run baseline's case (a reference-only job's answer)."""
        if not self.ref_trials:
            return None
        median, ci = median_interval(self.ref_trials)
        return CaseBaseline(
            case=self.case, time_us=median, ci=round(ci, 6), trials=len(self.ref_trials)
        )


class BaselineAnswer(BaseModel):
    """One strong baseline as a reference-only job's judge answers it (reference_side.References)."""

    model_config = ConfigDict(extra="ignore")

    trials: dict[str, list[float]] = Field(default_factory=dict, description="case -> us")
    flags: list[str] = Field(
        default_factory=list, description="how it was timed, if unlike the job"
    )
    unavailable: str = Field(default="", description="why it was not timed (one line)")
    seconds: float = Field(
        default=0.0, description="how long it held the judge: imports, builds, compiles included"
    )

    def cases(self) -> dict[str, CaseBaseline]:
        """Its trials as a run baseline's cases (median and interval, as the reference's)."""
        out = {}
        for case, trials in self.trials.items():
            if trials:
                median, ci = median_interval(trials)
                out[case] = CaseBaseline(
                    case=case, time_us=median, ci=round(ci, 6), trials=len(trials)
                )
        return out


class WorkerResult(BaseModel):
    status: Status
    message: str = ""
    cases: list[WorkerCase] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)
    hacks: list[str] = Field(default_factory=list)
    window_only: bool = Field(
        default=False,
        description="every hack is a late timing window, which other work on the device can "
        "also cause: the pipeline runs such a candidate once more before calling it hacked",
    )
    beyond_roofline: bool = Field(
        default=False,
        description="a suspect reason is a time the card's peaks cannot reach "
        "(physics), not a margin over a baseline: a re-check cannot clear it",
    )
    mismatch: str = ""
    seconds: dict[str, float] = Field(default_factory=dict)
    judge_pid: int | None = None
    sandbox_pid: int | None = None
    killed_pids: list[int] = Field(default_factory=list, description="killed at the deadline")
    reusable: bool = Field(default=False, description="the judge waits for another job")
    baselines: dict[str, BaselineAnswer] = Field(
        default_factory=dict,
        description="a reference-only or side-by-side job's strong baselines, by name",
    )

    def case_results(self) -> tuple[CaseResult, ...]:
        return tuple(c.to_case_result() for c in self.cases)


def judge_env(workdir: Path) -> dict[str, str]:
    """The judge's (and so the candidate's) whole environment: an allowlist, nothing secret."""
    env = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
    env.setdefault("PATH", "/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    tmp = workdir / "tmp"
    tmp.mkdir(exist_ok=True)
    env |= {"HOME": str(workdir), "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    return env | JUDGE_ENV_FIXED


@dataclass
class Standby:
    """A judge process that has imported torch and waits for its job on stdin."""

    proc: subprocess.Popen
    result_fd: int
    workdir: Path
    device: str
    log: Any

    @classmethod
    def spawn(
        cls, device: str, env_extra: dict[str, str] | None = None, cores: tuple[int, ...] = ()
    ) -> Standby:
        """A new judge for `device`; on `cores` (its slot's, cpu_share) when given."""
        become_subreaper()  # orphans of a killed judge come back here to be reaped
        workdir = Path(tempfile.mkdtemp(prefix="hipevolve-job-"))
        r, w = os.pipe()
        log = open(workdir / "judge.log", "wb")  # noqa: SIM115 (closed by finish)
        env = judge_env(workdir) | (env_extra or {})
        with cpu_share.spawning_on(cores):  # its sandboxes and executors inherit the cores
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hipevolve.verifier.gpu.judge.worker",
                    "--result-fd",
                    str(w),
                    "--device",
                    device,
                    "--workdir",
                    str(workdir),
                ],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(w,),
                start_new_session=True,
                env=env,
                cwd=workdir,
            )
        os.close(w)
        return cls(proc, r, workdir, device, log)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def discard(self) -> None:
        _kill_group(self.proc.pid)
        self.finish()

    def finish(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for closer in (
            lambda: os.close(self.result_fd),
            self.log.close,
            lambda: self.proc.stdin and self.proc.stdin.close(),
        ):
            with contextlib.suppress(OSError):
                closer()
        shutil.rmtree(self.workdir, ignore_errors=True)
        # A GPU judge's IPC counter file (ipc.JudgeCounter, named by its pid) outlives a judge
        # killed before its own cleanup ran.
        with contextlib.suppress(OSError):
            os.unlink(f"/dev/shm/hipevolve_ipc_{self.proc.pid}")


def _kill_group(pgid: int) -> list[int]:
    """SIGKILLs process group `pgid` and reaps what was re-parented to us."""
    pids = group_pids(pgid, zombies=True)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    end = time.monotonic() + 5
    pending = set(pids)
    while pending and time.monotonic() < end:
        for pid in list(pending):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] or not os.path.exists(f"/proc/{pid}"):
                    pending.discard(pid)
            except ChildProcessError:  # not ours: gone once /proc says so
                if not os.path.exists(f"/proc/{pid}"):
                    pending.discard(pid)
        time.sleep(0.01)
    return pids


def _read_answer(fd: int, deadline: float) -> tuple[bytes, str]:
    """The judge's next answer line: (bytes, "line"), or what it had sent when the pipe ended
    ("eof": the judge died) or the deadline passed ("timeout")."""
    buf = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return bytes(buf), "timeout"
        if not select.select([fd], [], [], min(left, 1.0))[0]:
            continue
        try:
            chunk = os.read(fd, 1 << 16)
        except OSError:
            chunk = b""
        if not chunk:
            return bytes(buf), "eof"
        buf += chunk
        if b"\n" in buf:
            return bytes(buf[: buf.index(b"\n")]), "line"


def _parse_result(raw: bytes, judge_pid: int) -> WorkerResult | None:
    try:
        return WorkerResult.model_validate(json.loads(raw) | {"judge_pid": judge_pid})
    except (ValueError, TypeError):
        return None


_retiring: set[threading.Thread] = set()


def _retire(judge: Standby) -> None:
    """Closes a judge's job line (a judge waiting for another job exits), lets it exit, kills
    what is left of its process group and removes its folder."""
    with contextlib.suppress(OSError):
        judge.proc.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        judge.proc.wait(timeout=10)
    _kill_group(judge.proc.pid)
    judge.finish()


def _retire_in_background(judge: Standby) -> None:
    """`_retire` on a thread of its own (its GPU work is over; `wait_retired` joins them)."""

    def retire() -> None:
        _retire(judge)
        _retiring.discard(threading.current_thread())

    thread = threading.Thread(target=retire, name=f"retire-{judge.proc.pid}", daemon=True)
    _retiring.add(thread)
    thread.start()


def wait_retired(timeout: float = 30.0) -> None:
    """Until every judge handed to `_retire_in_background` has exited and been cleaned up."""
    end = time.monotonic() + timeout
    for thread in list(_retiring):
        thread.join(timeout=max(0.0, end - time.monotonic()))


def run_worker(
    job: WorkerJob, standby: Standby | None = None, *, pool: StandbyPool | None = None
) -> WorkerResult:
    """Scores one candidate in the given standby judge, or a fresh one.

    pool: where the judge goes back when its answer says it can serve another job (a fresh
    sandbox, same judge: worker.main); otherwise it exits in the background. Without a pool the
    judge serves this job only and has exited, with its process group, when this returns."""
    judge = standby if standby is not None and standby.alive() else None
    if standby is not None and judge is None:
        standby.discard()
    judge = judge or Standby.spawn(job.device)
    job = replace(job, workdir=judge.workdir)
    started = time.monotonic()
    try:
        starts = job.candidate is not None and job.candidate.may_start_processes()
        line = replace(job, allow_processes=starts).to_json()
        judge.proc.stdin.write(line.encode() + b"\n")
        judge.proc.stdin.flush()
    except (BrokenPipeError, OSError):
        pass
    raw, how = _read_answer(judge.result_fd, started + job.deadline())
    result = _parse_result(raw, judge.proc.pid) if how == "line" else None
    if result is not None:
        result.seconds["total"] = round(time.monotonic() - started, 3)
        if pool is None:
            _retire(judge)
        elif result.reusable and judge.alive():
            pool.put_back(judge)
        else:
            _retire_in_background(judge)
        return result
    killed = _kill_group(judge.proc.pid) if how == "timeout" else []
    with contextlib.suppress(subprocess.TimeoutExpired):
        judge.proc.wait(timeout=5)
    _kill_group(judge.proc.pid)  # whatever the candidate left behind in the group
    log = (judge.workdir / "judge.log").read_bytes()[-LOG_TAIL:].decode(errors="replace")
    code = judge.proc.returncode
    judge.finish()
    elapsed = time.monotonic() - started
    if how == "timeout":
        return WorkerResult(
            status=Status.timeout,
            judge_pid=judge.proc.pid,
            killed_pids=killed,
            message=f"timeout: no result within the {job.deadline():.0f} s "
            "deadline; the worker's process group was killed",
            seconds={"total": round(elapsed, 3)},
        )
    tail = log.strip().splitlines()[-1:] or [""]
    how_ended = f"signal {-code}" if code is not None and code < 0 else f"code {code}"
    return WorkerResult(
        status=Status.runtime_error,
        judge_pid=judge.proc.pid,
        message=f"crash: the judge exited ({how_ended}) without a result: {tail[0][:200]}",
    )


def _move_group(pgid: int, cores: tuple[int, ...]) -> None:
    """Every thread of the judge's process group (its zygote and sandbox too) onto `cores`."""
    if cores:
        for _ in range(2):  # the second pass catches what started during the first
            cpu_share.move(group_pids(pgid), cores)


class StandbyPool:
    """Keeps `size` judges per device warm (torch imported, device context created)."""

    def __init__(
        self,
        size: int = 1,
        device: str = "cuda",
        env_extra: dict[str, str] | None = None,
        cores: tuple[int, ...] = (),
        standby_cores: tuple[int, ...] = (),
    ) -> None:
        """cores: where a judge runs its job (its slot's; (): anywhere). standby_cores: where
        warm judges start and wait (the CPU work's), so their start-up stays off `cores`."""
        self.size = size
        self.cores, self.standby_cores = cores, standby_cores
        self.device = device
        self.env_extra = env_extra
        self._warm: deque[Standby] = deque()
        self._lock = threading.Lock()
        self.fill()

    def fill(self) -> None:
        with self._lock:
            while len(self._warm) < self.size:
                self._warm.append(
                    Standby.spawn(self.device, self.env_extra, self.standby_cores or self.cores)
                )

    def take(self) -> Standby:
        """A warm judge if one is alive, else a fresh one; the pool refills at once."""
        with self._lock:
            waited = True
            while self._warm:
                judge = self._warm.popleft()
                if judge.alive():
                    break
                judge.discard()
            else:
                judge = Standby.spawn(self.device, self.env_extra, self.cores)
                waited = False  # a fresh one starts on its cores
        if waited:
            _move_group(judge.proc.pid, self.cores)
        self.fill()
        return judge

    def put_back(self, judge: Standby) -> None:
        """A judge that served a job and waits for another (its next sandbox is starting)."""
        _move_group(judge.proc.pid, self.standby_cores)
        with self._lock:
            self._warm.append(judge)

    def close(self) -> None:
        with self._lock:
            while self._warm:
                self._warm.popleft().discard()
        wait_retired()

    def __enter__(self) -> StandbyPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
