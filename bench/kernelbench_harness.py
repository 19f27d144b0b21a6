"""A KernelBench-style evaluator: the baseline of bench/verifier_throughput.py.

It follows KernelBench's own evaluation (src/eval.py eval_kernel_against_ref, driven by
scripts/eval_from_generations.py with its defaults), one candidate at a time, serially:
1. a fresh Python process per candidate, as eval_from_generations gives each sample a fresh
   one-process pool. Inside it, as in KernelBench, the candidate's file is exec'd in the
   evaluating process and its load_inline builds there, into TORCH_EXTENSIONS_DIR (cold: a fresh
   folder; warm: the folder of an earlier run, so load_inline finds its builds). A crash or a hang
   ends that process only, never the bench; the parent kills its process group at the time limit
   (KernelBench's default: 180 s);
2. any exception while loading is a compile failure (KernelBench's rule);
3. Model and ModelNew are built from get_init_inputs() under seed 42; 5 correctness trials, each
   with inputs from get_inputs() under a seed drawn from seed 42, compared by shape and by
   torch.allclose at KernelBench's tolerances for the output dtype (1e-4 float32, 1e-2 float16
   and bfloat16); the first failure ends the check;
4. when correct: CUDA-event timing as KernelBench's time_execution_with_cuda_event (3 warm-ups,
   100 trials plus one discarded, the L2 cache thrashed by a 256 MiB fill before each trial,
   synchronise after each), then the reference timed the same way (its excessive-speedup check).

Two differences, both so that both harnesses do the same work: every case of the task is
evaluated (a KernelBench problem has one input set), and inputs keep each case's dtype
(KernelBench casts all inputs to one `precision`). KernelBench's optional parallel CPU pre-build
(eval_from_generations' build_cache, off by default) is not modelled: this is its default flow.

    python bench/kernelbench_harness.py CANDIDATE.py [CANDIDATE.py ...] --task softmax

The child side imports torch, the standard library and hipevolve's torch-only helpers.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

HARNESS = Path(__file__).resolve()
SEED = 42  # KernelBench's seed_num
CORRECT_TRIALS = 5  # eval_from_generations' num_correct_trials
PERF_TRIALS = 100  # eval_from_generations' num_perf_trials
TIMEOUT_S = 180.0  # eval_from_generations' timeout
WARMUP = 3  # time_execution_with_cuda_event's num_warmup
DISCARD_FIRST = 1
KEEP_LOG = 4000


class KbCase(BaseModel):
    case: str
    correct: bool
    max_abs_err: float | None = None
    time_ms: float | None = Field(default=None, description="mean over the trials, as KernelBench")
    ref_time_ms: float | None = None


class KbResult(BaseModel):
    name: str
    status: str  # ok, incorrect, compile_error, runtime_error, timeout, cut
    message: str = ""
    wall_s: float = 0.0
    seconds: dict[str, float] = Field(default_factory=dict, description="stage -> seconds")
    cases: list[KbCase] = Field(default_factory=list)


class HarnessRun(BaseModel):
    """One pass of the harness over a list of candidates (cold or warm)."""

    extensions_dir: Path
    wall_s: float
    results: list[KbResult]
    not_started: list[str] = Field(default_factory=list, description="left out by the deadline")

    @property
    def evaluated(self) -> list[KbResult]:
        """Results that count: a candidate cut short by the bench's own hard stop does not."""
        return [r for r in self.results if r.status != "cut"]


# ----------------------------------------------------------------------------- parent side


def missing_tools() -> str:
    """Why load_inline cannot build here (empty when it can): without ninja or nvcc every
    candidate would fail in a second as a "compile error", which would be no baseline at all."""
    from torch.utils.cpp_extension import CUDA_HOME, is_ninja_available

    if not is_ninja_available():
        return "ninja is not installed: load_inline needs it (pip install ninja)"
    if CUDA_HOME is None:
        return "no CUDA toolkit found (CUDA_HOME): load_inline needs nvcc"
    return ""


def _tail(path: Path, limit: int = KEEP_LOG) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-limit:].decode(errors="replace")


def evaluate_one(
    candidate: Path,
    task: str,
    extensions_dir: Path,
    log_dir: Path,
    trials: int = PERF_TRIALS,
    correct_trials: int = CORRECT_TRIALS,
    timeout_s: float = TIMEOUT_S,
    cut_at: float | None = None,
) -> KbResult:
    """Evaluates one KernelBench-format file in a fresh process; never raises for its failures.

    cut_at (time.monotonic) is the bench's hard stop: a candidate still running then is killed
    and recorded as `cut`, which the rates leave out.
    """
    name = candidate.stem
    result_file = log_dir / f"{name}.json"
    log_file = log_dir / f"{name}.log"
    result_file.unlink(missing_ok=True)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(extensions_dir))
    argv = [
        sys.executable,
        str(HARNESS),
        "--child",
        str(candidate),
        "--task",
        task,
        "--result",
        str(result_file),
        "--trials",
        str(trials),
        "--correct-trials",
        str(correct_trials),
    ]
    limit = timeout_s
    if cut_at is not None:
        limit = max(1.0, min(timeout_s, cut_at - time.monotonic()))
    start = time.monotonic()
    with log_file.open("wb") as log:
        # Its own session: a time-out kills ninja and nvcc with it.
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        try:
            code: int | None = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    wall = time.monotonic() - start
    if code is None:
        cut = limit < timeout_s
        return KbResult(
            name=name,
            status="cut" if cut else "timeout",
            wall_s=wall,
            message=(
                f"stopped at the bench's time box after {wall:.0f} s"
                if cut
                else f"killed after {timeout_s:.0f} s"
            ),
        )
    if result_file.is_file():
        result = KbResult.model_validate_json(result_file.read_text())
        return result.model_copy(update={"wall_s": wall})
    last = [ln for ln in _tail(log_file).splitlines() if ln.strip()][-1:] or [""]
    return KbResult(
        name=name,
        status="runtime_error",
        wall_s=wall,
        message=f"evaluator process exited with code {code} and no result: {last[0]}",
    )


def run_harness(
    candidates: list[Path],
    task: str,
    extensions_dir: Path,
    log_dir: Path,
    trials: int = PERF_TRIALS,
    correct_trials: int = CORRECT_TRIALS,
    timeout_s: float = TIMEOUT_S,
    stop_starting_at: float | None = None,
    cut_at: float | None = None,
    progress: bool = True,
) -> HarnessRun:
    """Evaluates candidates one after the other, as KernelBench does on one GPU.

    stop_starting_at (time.monotonic): no candidate starts when the mean time per candidate so
    far says it would end after it; the ones left are listed in `not_started`.
    """
    extensions_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    results: list[KbResult] = []
    start = time.monotonic()
    for index, path in enumerate(candidates):
        if stop_starting_at is not None and results:
            mean = (time.monotonic() - start) / len(results)
            if time.monotonic() + mean > stop_starting_at:
                return HarnessRun(
                    extensions_dir=extensions_dir,
                    results=results,
                    wall_s=time.monotonic() - start,
                    not_started=[p.stem for p in candidates[index:]],
                )
        result = evaluate_one(
            path, task, extensions_dir, log_dir, trials, correct_trials, timeout_s, cut_at
        )
        results.append(result)
        if progress:
            print(
                f"  kernelbench-style {index + 1}/{len(candidates)} {result.name}: "
                f"{result.status} in {result.wall_s:.1f} s {result.message[:100]}",
                flush=True,
            )
        if result.status == "cut":
            return HarnessRun(
                extensions_dir=extensions_dir,
                results=results,
                wall_s=time.monotonic() - start,
                not_started=[p.stem for p in candidates[index + 1 :]],
            )
    return HarnessRun(
        extensions_dir=extensions_dir, results=results, wall_s=time.monotonic() - start
    )


# ----------------------------------------------------------------------------- child side


def _set_seed(seed: int) -> None:
    import torch

    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)


def _clear_l2_cache(device: Any) -> None:
    import torch

    # KernelBench's clear_l2_cache: 256 MiB of int64 written, more than an H200's L2.
    dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device=device)
    dummy.fill_(42)
    del dummy


def _time_cuda_event(fn: Any, args: list[Any], trials: int, device: Any) -> list[float]:
    """KernelBench's time_execution_with_cuda_event: milliseconds per trial."""
    import torch

    with torch.cuda.device(device):
        for _ in range(WARMUP):
            fn(*args)
            torch.cuda.synchronize(device=device)
        torch.cuda.empty_cache()
        times: list[float] = []
        for trial in range(trials + DISCARD_FIRST):
            torch.cuda.synchronize(device=device)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            _clear_l2_cache(device)
            start.record()
            fn(*args)
            end.record()
            torch.cuda.synchronize(device=device)
            if trial >= DISCARD_FIRST:
                times.append(start.elapsed_time(end))
    return times


def _one_line(error: BaseException, limit: int = 400) -> str:
    text = f"{type(error).__name__}: {error}"
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # load_inline's message ends with the build log: keep its first error line.
    errors = [ln for ln in lines if " error" in ln or ln.startswith("error")]
    return " | ".join(lines[:1] + errors[:1])[:limit]


def child_evaluate(candidate: Path, task_name: str, trials: int, correct_trials: int) -> dict:
    """The evaluation itself, in the evaluating process: mirrors eval_kernel_against_ref."""
    t0 = time.perf_counter()
    seconds: dict[str, float] = {}
    cases: list[dict] = []

    def done(status: str, message: str = "") -> dict:
        seconds["total"] = time.perf_counter() - t0
        return {
            "name": candidate.stem,
            "status": status,
            "message": message,
            "seconds": seconds,
            "cases": cases,
        }

    import torch

    from hipevolve.core.reference import load_module, to_device
    from hipevolve.core.taskspec import Tolerance
    from hipevolve.problems import get_task

    task = get_task(task_name)
    if not torch.cuda.is_available():  # KernelBench asserts this too
        return done("runtime_error", "no CUDA device: the evaluation runs on a GPU")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.zeros(1, device=device)  # create the context here, not inside the first timed stage
    reference = load_module(task.reference)
    tolerance = Tolerance(kind="kernelbench")
    seconds["startup"] = time.perf_counter() - t0

    mark = time.perf_counter()
    os.environ["TORCH_USE_CUDA_DSA"] = "1"  # as KernelBench, before compiling
    context: dict[str, Any] = {}
    try:
        code = compile(candidate.read_text(), str(candidate), "exec")
        exec(code, context)  # noqa: S102 - KernelBench's load_custom_model does exactly this
        model_new = context.get("ModelNew")
        torch.cuda.synchronize(device=device)
    except Exception as e:  # KernelBench: any exception while loading is a compile failure
        seconds["load"] = time.perf_counter() - mark
        return done("compile_error", _one_line(e))
    seconds["load"] = time.perf_counter() - mark
    if model_new is None:
        return done("compile_error", "the file defines no ModelNew")

    mark = time.perf_counter()
    built: dict[str, tuple[Any, Any]] = {}
    with torch.no_grad():
        for case in task.cases:
            _set_seed(SEED)
            init = to_device(list(reference.get_init_inputs(**case.init)), device)
            try:
                _set_seed(SEED)
                model = reference.Model(*init).to(device)
                _set_seed(SEED)
                custom = model_new(*init).to(device)
                torch.cuda.synchronize(device=device)
            except Exception as e:
                seconds["check"] = time.perf_counter() - mark
                return done("runtime_error", f"case {case.name}: building ModelNew: {_one_line(e)}")
            built[case.name] = (model, custom)
            torch.manual_seed(SEED)
            trial_seeds = [
                int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(correct_trials)
            ]
            worst = 0.0
            for trial_seed in trial_seeds:
                _set_seed(trial_seed)
                inputs = to_device(list(reference.get_inputs(**case.inputs)), device)
                output = model(*inputs)
                torch.cuda.synchronize(device=device)
                try:
                    output_new = custom(*inputs)
                    torch.cuda.synchronize(device=device)
                except Exception as e:
                    seconds["check"] = time.perf_counter() - mark
                    return done("runtime_error", f"case {case.name}: {_one_line(e)}")
                if not isinstance(output_new, torch.Tensor) or output.shape != output_new.shape:
                    cases.append({"case": case.name, "correct": False})
                    seconds["check"] = time.perf_counter() - mark
                    shape = getattr(output_new, "shape", type(output_new).__name__)
                    return done(
                        "incorrect",
                        f"case {case.name}: output shape {shape}, expected {tuple(output.shape)}",
                    )
                if output_new.dtype != output.dtype:  # torch.allclose refuses mixed dtypes
                    cases.append({"case": case.name, "correct": False})
                    seconds["check"] = time.perf_counter() - mark
                    return done(
                        "incorrect",
                        f"case {case.name}: output dtype "
                        f"{output_new.dtype}, expected {output.dtype}",
                    )
                atol, rtol = tolerance.for_dtype(str(output.dtype).removeprefix("torch."))
                if not torch.allclose(output, output_new, atol=atol, rtol=rtol):
                    diff = (output.float() - output_new.float()).abs().max().item()
                    cases.append({"case": case.name, "correct": False, "max_abs_err": diff})
                    seconds["check"] = time.perf_counter() - mark
                    return done(
                        "incorrect",
                        f"case {case.name}: output mismatch, max abs "
                        f"difference {diff:.3g} (atol {atol:g}, rtol {rtol:g})",
                    )
                if output.numel():
                    worst = max(worst, (output.float() - output_new.float()).abs().max().item())
            cases.append({"case": case.name, "correct": True, "max_abs_err": worst})
    seconds["check"] = time.perf_counter() - mark

    mark = time.perf_counter()
    with torch.no_grad():
        for entry in cases:
            case = task.case(entry["case"])
            if not case.timed:
                continue
            model, custom = built[case.name]
            _set_seed(SEED)
            inputs = to_device(list(reference.get_inputs(**case.inputs)), device)
            try:
                mine = _time_cuda_event(custom, inputs, trials, device)
            except Exception as e:
                seconds["time"] = time.perf_counter() - mark
                return done("runtime_error", f"case {case.name}: while timing: {_one_line(e)}")
            ref = _time_cuda_event(model, inputs, trials, device)
            entry["time_ms"] = sum(mine) / len(mine)
            entry["ref_time_ms"] = sum(ref) / len(ref)
    seconds["time"] = time.perf_counter() - mark
    torch.cuda.empty_cache()
    return done("ok")


def _child_main(args: argparse.Namespace) -> None:
    result_path = Path(args.result)
    try:
        result = child_evaluate(Path(args.child), args.task, args.trials, args.correct_trials)
    except Exception as e:  # KernelBench's last-level catch: an evaluator failure, recorded
        traceback.print_exc()
        result = {
            "name": Path(args.child).stem,
            "status": "runtime_error",
            "message": f"evaluator: {_one_line(e)}",
        }
    # Written beside the target and renamed: the parent never reads half a result.
    fd, tmp = tempfile.mkstemp(dir=result_path.parent, prefix=f".{result_path.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: extension modules and CUDA state can hang or crash on exit,
    # and the result is already on disk.
    os._exit(0)


def main() -> None:
    parser = argparse.ArgumentParser(description="KernelBench-style evaluation, serial.")
    parser.add_argument("candidates", nargs="*", type=Path, help="KernelBench-format .py files")
    parser.add_argument("--task", default="softmax", help="task name (default: softmax)")
    parser.add_argument(
        "--trials",
        type=int,
        default=PERF_TRIALS,
        help=f"timed trials per case (default {PERF_TRIALS})",
    )
    parser.add_argument(
        "--correct-trials",
        type=int,
        default=CORRECT_TRIALS,
        help=f"correctness trials per case (default {CORRECT_TRIALS})",
    )
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=TIMEOUT_S,
        help=f"seconds per candidate (default {TIMEOUT_S:.0f})",
    )
    parser.add_argument(
        "--extensions-dir",
        type=Path,
        default=None,
        help="TORCH_EXTENSIONS_DIR to build in (default: a fresh one: cold)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child_main(args)
        return
    work = Path(tempfile.mkdtemp(prefix="kernelbench-style-"))
    ext = args.extensions_dir or work / "torch_extensions"
    run = run_harness(
        args.candidates,
        args.task,
        ext,
        work / "logs",
        args.trials,
        args.correct_trials,
        args.timeout_s,
    )
    print(f"{len(run.results)} evaluated in {run.wall_s:.1f} s; logs in {work / 'logs'}")


if __name__ == "__main__":
    main()
