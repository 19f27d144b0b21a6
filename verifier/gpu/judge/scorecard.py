"""The judge's verdict on one evaluation: what the sandbox's reports add up to.

Each case's outcome (values compared by compare.py, trials checked against the reference's and
the judge's own wall clock), the flags, the hacks, the first mismatch, and the status they
make. It knows the job and the references and runs no process: the judge (worker.py) feeds it
the sandbox's reports as they come.

Imports the standard library and hipevolve.verifier.gpu.{judge.channel,judge.compare,
judge.compare_chunks,job} only (no pydantic).
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any

from hipevolve.verifier.gpu.job import WorkerJob
from hipevolve.verifier.gpu.judge.channel import SandboxError
from hipevolve.verifier.gpu.judge.wide_case import wide_note

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.judge.references import Refs

ESCAPE_SLACK_US = 50.0  # the synchronise round trip is about 10 us; escaped work shows above


class Scorecard:
    """What the sandbox's reports add up to: each case's outcome, the flags, the hacks and the
    first mismatch, and the status they make. Knows the job and the references, no process."""

    def __init__(self, job: WorkerJob) -> None:
        from hipevolve.verifier.gpu.judge import compare, compare_chunks

        self.compare = compare
        self.compare_chunks = compare_chunks
        self.job = job
        self.flags: list[str] = []
        self.hacks: list[str] = []
        self.window_hacks = 0  # of those, late timing windows (see judge_timing)
        self.mismatch = ""
        self.beyond_roofline = False  # a suspect reason is physics, not a margin (gates)
        self.case_out = {
            c.name: {"case": c.name, "correct": True, "message": ""} for c in job.cases
        }

    def reference_trials(self, times: dict[str, list[float]]) -> None:
        for name, trials in times.items():
            self.case_out[name]["ref_trials"] = trials

    def fail(self, case: str, message: str, mismatch: str = "") -> None:
        out = self.case_out[case]
        if out["correct"]:
            out["correct"] = False
            out["message"] = message[:300]
            if mismatch and not self.mismatch:
                self.mismatch = mismatch

    def judge_outputs(self, header: dict, tensors: list, refs: Refs) -> None:
        name, seed, run = header["case"], header["seed"], header["run"]
        where = f"seed {seed} run {run}"
        if (name, seed) not in refs:
            raise SandboxError(
                "hacked", "the candidate process sent outputs for a case or seed it was not given"
            )
        ref_inputs, ref_outs = refs[(name, seed)]
        metas = header["meta"]
        n_in = int(header.get("n_inputs", 0))
        values, inputs_after = tensors[: len(tensors) - n_in], tensors[len(tensors) - n_in :]
        # The sandbox itself never starts a Python thread: any other one is the candidate's.
        if header["threads_after"] > 1:
            self.hacks.append(f"{name}: a thread started by the call is still running ({where})")
        if any(not m["exact"] for m in metas):
            bad = next(m["type"] for m in metas if not m["exact"])
            self.hacks.append(f"{name}: output is a {bad}, not a plain torch.Tensor")
            return
        if run == "post":
            where = "after timing"
        elif run in ("timed", "interleaved"):
            where = f"{'an' if run == 'interleaved' else 'a'} {run} call, seed {seed}"
        if len(metas) != len(ref_outs) or len(values) != len(metas):
            self.fail(name, f"{len(metas)} outputs, expected {len(ref_outs)} ({where})")
            return
        for i, (meta, ref) in enumerate(zip(metas, ref_outs, strict=True)):
            if meta["aliases_input"]:
                self.fail(
                    name,
                    f"output {i} shares memory with input {meta['aliases_input'][0]} ({where})",
                )
                return
            problem = self.compare.check_meta(i, meta, ref, self.job.device)
            if problem:
                self.fail(name, f"{problem} ({where})")
                return
        if header.get("guards_broken"):
            self.fail(
                name,
                f"out-of-bounds write: the canary next to input "
                f"{header['guards_broken'][0]} was overwritten ({where})",
            )
            return
        if n_in:
            changed = self.compare_chunks.unchanged_anywhere(ref_inputs, inputs_after)
            if changed:
                self.fail(name, f"{changed} ({where})")
        errors = self.case_out[name]
        for i, (got, ref) in enumerate(zip(values, ref_outs, strict=True)):
            ok, max_abs, rel_rms, mismatch = self.compare_chunks.compare_anywhere(
                i, got, ref, self.job.tolerance
            )
            errors["max_abs_err"] = max(errors.get("max_abs_err") or 0.0, max_abs)
            errors["rel_rms_err"] = max(errors.get("rel_rms_err") or 0.0, rel_rms)
            if not ok:
                if run == "post":
                    self.hacks.append(
                        f"{name}: outputs correct in the checks but wrong after "
                        "timing (behaviour changed after warm-up)"
                    )
                    return
                if run in ("timed", "interleaved"):
                    self.hacks.append(
                        f"{name}: outputs correct in the checks but wrong in {where} "
                        "(behaviour changed in timed calls)"
                    )
                    return
                wide = wide_note(name)
                self.fail(name, f"wrong values{wide} ({where})", f"case {name} {where}: {mismatch}")
                return

    def judge_timing(self, name: str, trials: Any, windows: Any, wall_us: float) -> None:
        out = self.case_out[name]
        if not all(
            isinstance(series, list)
            and len(series) == self.job.trials
            and all(isinstance(t, (int, float)) for t in series)
            for series in (trials, windows)
        ):
            self.hacks.append(f"{name}: malformed timing report")
            return
        if not all(math.isfinite(t) and t > 0 for t in trials + windows):
            self.hacks.append(f"{name}: timer reported non-positive or non-finite times")
            return
        total = sum(trials)
        median = statistics.median(trials)
        window = statistics.median(windows)
        if window > median + max(ESCAPE_SLACK_US, median):
            # Read from GPU timestamps, which another process's work on the device can delay
            # too (seen once in 960 evaluations of honest softmax configurations on H200s,
            # bench/scaling.py): see window_only.
            self.window_hacks += 1
            self.hacks.append(
                f"{name}: the device stayed busy until {window:.0f} us but the timed stream "
                f"finished at {median:.0f} us: work outside the timed stream"
            )
        if total > wall_us * 1.02 + 1000:
            self.hacks.append(
                f"{name}: trials add up to {total:.0f} us but the judge saw {wall_us:.0f} us pass"
            )
        if median < self.job.min_trial_us:
            self.hacks.append(
                f"{name}: median trial {median:.3g} us is below the "
                f"{self.job.min_trial_us} us any call takes"
            )
        out["trials"] = trials
        out["time_us"] = median
        mean = statistics.fmean(trials)
        out["cv"] = statistics.pstdev(trials) / mean if mean > 0 else None
        out["wall_us"] = wall_us

    def gates(self) -> list[str]:
        """Suspect reasons, each a physical claim about the card: faster than the roofline (the
        card's own peaks), or faster than the case's `fastest_us` (the strongest baseline timed
        in this run, over the run's margin). Only a case with neither bound falls back on a
        speedup over the reference timed in this job above `suspect_speedup`: a slow reference
        is evidence of nothing (a GDN seed was refused at 203.8x a 95 ms fp32 reference)."""
        reasons = []
        peak = self.job.peak
        for name, out in self.case_out.items():
            ref_trials = out.get("ref_trials")
            if ref_trials:
                out["ref_time_us"] = statistics.median(ref_trials)
            t = out.get("time_us")
            if not t:
                continue
            case = self.job.case(name)
            roof = case.roofline if peak else None
            if roof:
                mem_us = roof["bytes"] / peak.bytes_per_s * 1e6
                flop_us = roof["flops"] / peak.flops_per_s * 1e6
                out["roofline_fraction"] = mem_us / t
                if t < max(mem_us, flop_us):
                    self.beyond_roofline = True
                    reasons.append(
                        f"{name}: {t:.2f} us beats the roofline bound {max(mem_us, flop_us):.2f} us"
                    )
            if case.fastest_us is not None:
                if t < case.fastest_us:
                    reasons.append(f"{name}: {t:.1f} us, faster than {case.fastest_why}")
            elif not roof and out.get("ref_time_us"):
                speedup = out["ref_time_us"] / t
                if speedup > self.job.suspect_speedup:
                    reasons.append(
                        f"{name}: speedup {speedup:.1f}x above {self.job.suspect_speedup:g}x "
                        "(the case has no roofline and no strong baseline)"
                    )
        return reasons

    def failed(self) -> list[str]:
        return [n for n, c in self.case_out.items() if not c["correct"]]

    def verdict(self) -> tuple[str, str]:
        if self.hacks:
            return "hacked", self.hacks[0]
        failed = [c for c in self.case_out.values() if not c["correct"]]
        if failed:
            return "incorrect", f"case {failed[0]['case']}: {failed[0]['message']}"
        reasons = self.gates()
        if reasons:
            return "suspect", reasons[0]
        return "ok", ""

    def result(self, status: str, message: str, *, checked: bool = True) -> dict:
        """The answer's verdict fields. checked: False when the check stage never ran, so a
        crash or timeout leaves no case counted correct."""
        if status in ("runtime_error", "timeout") and not checked:
            for out in self.case_out.values():
                out["correct"] = False  # never (completely) checked
        return {
            "status": status,
            "message": message[:500],
            "cases": list(self.case_out.values()),
            "flags": self.flags,
            "hacks": self.hacks[:10],
            "window_only": bool(self.hacks) and self.window_hacks == len(self.hacks),
            "beyond_roofline": self.beyond_roofline,
            "mismatch": self.mismatch,
        }
