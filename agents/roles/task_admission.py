"""Admitting model-written tasks in a child process: the synthetic generator's own admission
(problems/synthetic/generate.py admit: measure, verify, WL-hash dedupe, write), run out of our reach.

The synthetic generator runs its references in its own process because they are its own
templates. A model's reference is code nobody has read, so here it runs in a child process:
- protects against: a reference that hangs at import or in its forward (the child is killed,
  with its process group, after `timeout_s`), one that crashes the interpreter, prints to
  stdout (results travel on a private pipe), or reads API keys (the child's environment is the
  verifier's allowlist, with HOME and TMPDIR in a scratch folder);
- does not protect against: a reference that writes files or opens sockets as the user (no
  sandbox beyond that; read what a model wrote before you use it elsewhere).

The child is started once and reused; a killed one is replaced on the next admission.
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
import time
from pathlib import Path

from hipevolve.core.errors import UserError
from hipevolve.problems.synthetic.generate import STAGING, KeptTask, Rejection
from hipevolve.problems.synthetic.render import Candidate

STARTUP_S = 120.0  # importing torch in a fresh interpreter, on a busy 2-core machine


class AdmissionWorker:
    """One child process that admits candidates into `out_dir`; a context manager."""

    def __init__(self, out_dir: Path, timeout_s: float = 60.0) -> None:
        self.out_dir, self.timeout_s = Path(out_dir), timeout_s
        self._proc: subprocess.Popen | None = None
        self._results: int | None = None
        self._scratch = tempfile.TemporaryDirectory(prefix="hipevolve-admit-")
        self._log = Path(self._scratch.name) / "stderr.log"

    def __enter__(self) -> AdmissionWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        from hipevolve.verifier.isolate import ENV_ALLOWLIST

        read_fd, write_fd = os.pipe()
        env = {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}
        home = Path(self._scratch.name) / "home"
        home.mkdir(exist_ok=True)
        env |= {
            "HOME": str(home),
            "TMPDIR": str(home),
            "PYTHONUNBUFFERED": "1",
            "HIPEVOLVE_RESULT_FD": str(write_fd),
        }
        with self._log.open("ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "hipevolve.agents.roles.task_admission"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                pass_fds=(write_fd,),
                start_new_session=True,
                cwd=home,
            )
        os.close(write_fd)
        self._results = read_fd
        if self._read(STARTUP_S) != {"ready": True}:
            self._kill()
            raise UserError(
                f"the task admission process did not start: {self._last_log_line()}",
                "check that `python -m hipevolve.agents.roles.task_admission` imports torch here",
            )

    def existing_hashes(self) -> dict[str, str]:
        """Graph hash -> name of the tasks already in out_dir (problems.synthetic's
        existing_hashes, which traces their references: model-written ones, so in the child)."""
        answer = self._ask({"existing": str(self.out_dir)})
        if answer is None:
            self._kill()
            raise UserError(
                f"reading the tasks already in {self.out_dir} took over {self.timeout_s:g} s",
                "move them elsewhere, or pass another --out",
            )
        return dict(answer["existing"])

    def _ask(self, job: dict) -> dict | None:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(job) + "\n").encode())
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass  # it died: _read says so
        return self._read(self.timeout_s)

    def admit(self, candidate: Candidate, seen: dict[str, str]) -> KeptTask | Rejection:
        """The synthetic admission of `candidate` in the child; `seen` (graph hash -> task
        name) gains the kept task's hash, as with problems.synthetic.admit."""
        job = {
            "candidate": candidate.model_dump(mode="json"),
            "out_dir": str(self.out_dir),
            "seen": seen,
        }
        answer = self._ask(job)
        if answer is None:
            assert self._proc is not None
            died = self._proc.poll()
            self._kill()
            # what the killed admission was writing; a kept task is only ever renamed into place
            shutil.rmtree(self.out_dir / STAGING / candidate.name, ignore_errors=True)
            reason = (
                f"admission process died (exit code {died}): {self._last_log_line()}"
                if died is not None
                else f"slow: admission ran past {self.timeout_s:g} s and was killed"
            )
            return Rejection(name=candidate.name, mode=candidate.mode, reason=reason)
        if "kept" in answer:
            kept = KeptTask.model_validate(answer["kept"])
            seen[kept.graph_hash] = kept.name
            return kept
        return Rejection.model_validate(answer["rejected"])

    def _read(self, timeout_s: float) -> dict | None:
        """One JSON line from the child within `timeout_s`, or None (timeout or end of file)."""
        assert self._results is not None
        deadline, data = time.monotonic() + timeout_s, b""
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._results], [], [], left)[0]:
                return None
            chunk = os.read(self._results, 65536)
            if not chunk:
                return None
            data += chunk
        return json.loads(data)

    def _last_log_line(self) -> str:
        lines = (
            self._log.read_text(errors="replace").strip().splitlines() if self._log.exists() else []
        )
        return lines[-1][:300] if lines else "no output"

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)  # the child and all it started
            self._proc.wait()
            if self._proc.stdin:
                self._proc.stdin.close()
            self._proc = None
        if self._results is not None:
            os.close(self._results)
            self._results = None

    def close(self) -> None:
        if self._proc is not None and self._proc.stdin is not None and self._proc.poll() is None:
            try:
                self._proc.stdin.close()  # end of input: the child exits
                self._proc.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                pass
        self._kill()
        self._scratch.cleanup()


def _serve() -> None:
    """The child: admits one job per stdin line, answers on the result pipe."""
    results = os.fdopen(int(os.environ.pop("HIPEVOLVE_RESULT_FD")), "w")
    from hipevolve.problems.synthetic.generate import admit, existing_hashes

    def answer(data: dict) -> None:
        results.write(json.dumps(data) + "\n")
        results.flush()

    answer({"ready": True})
    for line in sys.stdin:
        job = json.loads(line)
        if "existing" in job:  # tasks a model wrote in an earlier run: traced here, not there
            answer({"existing": existing_hashes(Path(job["existing"]))})
            continue
        candidate = Candidate.model_validate(job["candidate"])
        try:
            outcome = admit(candidate, Path(job["out_dir"]), dict(job["seen"]))
        except Exception as e:  # what admit does not catch is still this candidate's fault
            first = (str(e).strip().splitlines() or [""])[0][:200]
            outcome = Rejection(
                name=candidate.name,
                mode=candidate.mode,
                reason=f"does not load: {type(e).__name__}: {first}",
            )
        key = "kept" if isinstance(outcome, KeptTask) else "rejected"
        answer({key: outcome.model_dump(mode="json")})


if __name__ == "__main__":
    _serve()
