"""Verifier throughput: the same candidates through our pipeline and a KernelBench-style harness.

    python bench/verifier_throughput.py                                   # 20 candidates
    python bench/verifier_throughput.py --candidates 4 --kb-candidates 2  # smoke run, ~3 min
    python bench/verifier_throughput.py --out throughput.json             # also write JSON
    python bench/verifier_throughput.py --baseline-tree /work/base0dc     # two trees (issue 32)

One GPU, one run, one harness at a time: our pipeline (hipevolve.verifier.pipeline.evaluate_many
on the native candidates) and bench/kernelbench_harness.py (serial, load_inline, a fresh process
per candidate, on the KernelBench-format twins of the same candidates), in the order ours cold
(empty compile cache), KernelBench-style cold (fresh TORCH_EXTENSIONS_DIR), ours warm (same
cache), KernelBench-style warm (same extensions folder). The candidates are
bench/candidates/softmax/ (10 correct, 5 wrong, 5 that do not compile; see manifest.json).
Prints one table (evaluations per minute, statuses), the ratio ours/KernelBench-style for cold
and warm (goal: at least 15x), and every candidate on which the two harnesses, or a harness and
the manifest, disagree.

With --baseline-tree PATH the bench compares two checkouts instead (bench/throughput_trees.py):
this tree's pipeline and PATH's, on softmax and gated_delta_net, side by side in one run, and
prints evaluations per minute of each with the ratio this/baseline (goals: throughput_trees.GOALS,
issue 47's: 2x on gated_delta_net, no fewer on softmax).

A load_inline build of even a tiny extension takes tens of seconds cold, so the whole bench is
time-boxed (--deadline-s): the KernelBench-style harness stops starting candidates when the
next would not fit, runs warm on exactly those that ran cold, and its rate is over what ran (the
table says how many). The manifest interleaves the three kinds, so any prefix keeps the mix.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, Field

BENCH = Path(__file__).resolve().parent
CANDIDATES = BENCH / "candidates" / "softmax"
GOAL = 15.0
KINDS = ("ok", "incorrect", "compile_error")

sys.path.insert(0, str(BENCH))  # bench/ is a folder of scripts, not a package
import kernelbench_harness as kb  # noqa: E402
import throughput_trees as trees  # noqa: E402


class Phase(BaseModel):
    """One harness over one cache state."""

    harness: str  # ours, kernelbench-style
    cache: str  # cold, warm
    statuses: dict[str, str] = Field(description="candidate -> status, for those evaluated")
    wall_s: float
    offered: int = Field(description="candidates this phase was given")
    seconds: dict[str, dict[str, float]] = Field(default_factory=dict)

    @property
    def evaluated(self) -> int:
        return len(self.statuses)

    @property
    def per_minute(self) -> float:
        return 60.0 * self.evaluated / self.wall_s if self.wall_s > 0 else 0.0

    def counts(self) -> dict[str, int]:
        counts = {k: 0 for k in (*KINDS, "other")}
        for status in self.statuses.values():
            counts[kind_of(status)] += 1
        return counts


def kind_of(status: str) -> str:
    """ok / incorrect / compile_error / other. `suspect` is correct but too fast to crown: ok."""
    if status in ("ok", "suspect"):
        return "ok"
    return status if status in KINDS else "other"


def ratio(ours: Phase, theirs: Phase) -> float | None:
    """Evaluations per minute, ours over KernelBench-style."""
    if not theirs.per_minute or not ours.evaluated:
        return None
    return ours.per_minute / theirs.per_minute


def disagreements(
    ours: dict[str, str], theirs: dict[str, str], expected: dict[str, str]
) -> list[str]:
    """One line per candidate where ours, KernelBench-style or the manifest differ on correctness.

    Only candidates both harnesses evaluated are compared with each other; each harness is
    compared with the manifest on everything it evaluated.
    """
    lines = []
    for name in sorted(set(ours) | set(theirs)):
        verdicts = {}
        if name in ours:
            verdicts["ours"] = kind_of(ours[name])
        if name in theirs:
            verdicts["kernelbench-style"] = kind_of(theirs[name])
        correct = {h: v == "ok" for h, v in verdicts.items()}
        want = expected.get(name)
        if len(set(correct.values())) > 1 or (
            want is not None and any(c != (want == "ok") for c in correct.values())
        ):
            said = ", ".join(f"{h} {verdicts[h]}" for h in verdicts)
            lines.append(f"{name}: {said}; manifest {want}")
    return lines


def summary_line(phase: Phase) -> str:
    counts = ", ".join(f"{n} {k}" for k, n in phase.counts().items() if n)
    return (
        f"{phase.harness} {phase.cache}: {phase.evaluated} in {phase.wall_s:.1f} s, "
        f"{phase.per_minute:.2f} evaluations/min ({counts or 'none'})"
    )


def table(phases: list[Phase]) -> str:
    header = (
        f"{'harness':<18} {'cache':<5} {'evaluated':>10} {'wall s':>8} {'evals/min':>10}  "
        f"{'ok':>3} {'incorrect':>9} {'compile_error':>13} {'other':>5}"
    )
    lines = [header, "-" * len(header)]
    for p in phases:
        c = p.counts()
        ran = f"{p.evaluated}" if p.evaluated == p.offered else f"{p.evaluated} of {p.offered}"
        lines.append(
            f"{p.harness:<18} {p.cache:<5} {ran:>10} {p.wall_s:>8.1f} "
            f"{p.per_minute:>10.2f}  {c['ok']:>3} {c['incorrect']:>9} "
            f"{c['compile_error']:>13} {c['other']:>5}"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the two harnesses


def run_ours(
    folders: list[Path], cache_dir: Path, cache: str, trials: int | None, backend: str
) -> Phase:
    from hipevolve.core.candidate import load_candidate
    from hipevolve.core.config import load_settings
    from hipevolve.problems import get_task
    from hipevolve.verifier.pipeline import evaluate_many

    task = get_task("softmax")
    update: dict = {"cache_dir": cache_dir}
    if trials:
        update["trials"] = trials
    settings = load_settings().verifier.model_copy(update=update)
    candidates = [load_candidate(f) for f in folders]
    start = time.monotonic()
    evaluations = evaluate_many(candidates, task, settings, backend)
    wall = time.monotonic() - start
    statuses = {c.name: str(e.status) for c, e in zip(candidates, evaluations, strict=True)}
    seconds = {c.name: dict(e.seconds) for c, e in zip(candidates, evaluations, strict=True)}
    for c, e in zip(candidates, evaluations, strict=True):
        print(f"  ours {cache} {c.name}: {e.status} {e.message[:100]}", flush=True)
    return Phase(
        harness="ours",
        cache=cache,
        statuses=statuses,
        wall_s=wall,
        offered=len(folders),
        seconds=seconds,
    )


def run_kernelbench(
    files: list[Path],
    offered: int,
    ext_dir: Path,
    log_dir: Path,
    cache: str,
    trials: int,
    correct_trials: int,
    timeout_s: float,
    stop_starting_at: float,
    cut_at: float,
) -> tuple[Phase, kb.HarnessRun]:
    run = kb.run_harness(
        files,
        "softmax",
        ext_dir,
        log_dir,
        trials,
        correct_trials,
        timeout_s,
        stop_starting_at=stop_starting_at,
        cut_at=cut_at,
    )
    done = run.evaluated
    # The rate's clock covers what counted: a candidate cut by the hard stop is left out.
    wall = sum(r.wall_s for r in done) if len(done) < len(run.results) else run.wall_s
    phase = Phase(
        harness="kernelbench-style",
        cache=cache,
        statuses={r.name: r.status for r in done},
        wall_s=wall,
        offered=offered,
        seconds={r.name: r.seconds for r in done},
    )
    return phase, run


# ----------------------------------------------------------------------------- main


def _parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Evaluations per minute: our verifier vs a KernelBench-style harness.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    what = p.add_argument_group("what runs")
    what.add_argument("--candidates", type=int, default=20, help="candidates, from the manifest")
    what.add_argument(
        "--kb-candidates",
        type=int,
        default=None,
        help="at most this many through the KernelBench-style harness "
        "(default: as many as the time box holds)",
    )
    what.add_argument(
        "--trials",
        type=int,
        default=None,
        help="timed trials per case for both harnesses (default: each its own, "
        f"ours from the settings, KernelBench-style {kb.PERF_TRIALS})",
    )
    what.add_argument(
        "--correct-trials",
        type=int,
        default=kb.CORRECT_TRIALS,
        help="KernelBench-style correctness trials per case",
    )
    what.add_argument("--backend", default="auto", help="our pipeline's backend: auto, cuda, rocm")
    limits = p.add_argument_group("time box")
    limits.add_argument(
        "--deadline-s",
        type=float,
        default=500.0,
        help="seconds for the whole bench; the KernelBench-style harness starts "
        "no candidate that would end after it",
    )
    limits.add_argument(
        "--kb-timeout-s",
        type=float,
        default=kb.TIMEOUT_S,
        help="seconds per KernelBench-style candidate (KernelBench's default)",
    )
    two = p.add_argument_group("two trees (issue 32: this tree against an older checkout)")
    two.add_argument(
        "--baseline-tree",
        type=Path,
        default=None,
        help="another hipevolve checkout (e.g. a git worktree of 0dc28ca): its pipeline and "
        "this tree's run side by side instead of the KernelBench-style comparison",
    )
    two.add_argument(
        "--tasks",
        default="softmax,gated_delta_net",
        help="with --baseline-tree: the tasks, comma-separated (softmax, gated_delta_net)",
    )
    two.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --baseline-tree: the whole schedule this many times, empty caches each "
        "round; each ratio is the rounds' median",
    )
    two.add_argument(
        "--gdn-candidates",
        type=int,
        default=4,
        help="with --baseline-tree: gated_delta_net candidates (the seed, then tunable "
        f"configurations of it; at most {len(trees.GDN_CONFIGS)})",
    )
    two.add_argument(
        "--gdn-seed",
        choices=("baseline", "this"),
        default="baseline",
        help="with --baseline-tree: whose chunked seed the gated_delta_net candidates come from",
    )
    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    out.add_argument("--keep", action="store_true", help="keep the work folder (caches, logs)")
    return p.parse_args(argv)


def main() -> None:
    args = _parse_args()
    if args.baseline_tree is not None:
        from hipevolve.core.errors import UserError

        try:
            trees.side_by_side(args)
        except trees.TreeError as e:
            sys.exit(str(e))
        except UserError as e:  # no GPU backend here, for one
            sys.exit(e.line())
        return
    missing = kb.missing_tools()
    if missing:
        sys.exit(f"cannot run the KernelBench-style baseline: {missing}")
    begin = time.monotonic()
    hard_stop = begin + args.deadline_s + 20.0  # a candidate still running then is cut
    manifest = json.loads((CANDIDATES / "manifest.json").read_text())
    chosen = manifest["candidates"][: args.candidates]
    expected = {c["name"]: c["expect"] for c in chosen}
    kb_count = len(chosen) if args.kb_candidates is None else min(args.kb_candidates, len(chosen))
    work = Path(tempfile.mkdtemp(prefix="hipevolve-throughput-"))
    print(
        f"{len(chosen)} candidates ({', '.join(f'{n} {k}' for k, n in _mix(chosen).items())});"
        f" work folder {work}",
        flush=True,
    )

    from hipevolve.verifier.build.backends import resolve_backend

    backend = resolve_backend(args.backend)
    folders = [CANDIDATES / c["native"] for c in chosen]
    files = [CANDIDATES / c["kernelbench"] for c in chosen[:kb_count]]
    ours_cache, ext_dir = work / "ours-cache", work / "torch_extensions"
    kb_trials = args.trials or kb.PERF_TRIALS

    # Cold, then warm, each harness in turn: a run cut short still has its cold comparison.
    print(f"ours, cold ({backend}):", flush=True)
    ours_cold = run_ours(folders, ours_cache, "cold", args.trials, backend)
    print(f"  -> {summary_line(ours_cold)}", flush=True)
    # The KernelBench-style cold pass gets 60% of what is left once our warm pass (about as
    # long as our cold one) is set aside; its warm pass gets the rest.
    now = time.monotonic()
    left = max(0.0, begin + args.deadline_s - now - ours_cold.wall_s)
    print(f"kernelbench-style, cold (up to {len(files)} candidates):", flush=True)
    cold, cold_run = run_kernelbench(
        files,
        len(chosen),
        ext_dir,
        work / "kb-cold",
        "cold",
        kb_trials,
        args.correct_trials,
        args.kb_timeout_s,
        now + 0.6 * left,
        hard_stop,
    )
    print(f"  -> {summary_line(cold)}", flush=True)
    print(f"ours, warm ({backend}):", flush=True)
    ours_warm = run_ours(folders, ours_cache, "warm", args.trials, backend)
    print(f"  -> {summary_line(ours_warm)}", flush=True)
    ran = [f for f in files if f.stem in cold.statuses]
    print(f"kernelbench-style, warm (the {len(ran)} that ran cold):", flush=True)
    warm, warm_run = run_kernelbench(
        ran,
        len(chosen),
        ext_dir,
        work / "kb-warm",
        "warm",
        kb_trials,
        args.correct_trials,
        args.kb_timeout_s,
        begin + args.deadline_s,
        hard_stop,
    )
    print(f"  -> {summary_line(warm)}", flush=True)
    phases = [ours_cold, ours_warm, cold, warm]

    print()
    print(table(phases))
    print()
    ratios = {}
    for ours, theirs in ((ours_cold, cold), (ours_warm, warm)):
        r = ratio(ours, theirs)
        ratios[ours.cache] = r
        shown = f"{r:.1f}x" if r is not None else "n/a (nothing ran)"
        verdict = (
            "" if r is None else ("  goal met" if r >= GOAL else f"  below the {GOAL:g}x goal")
        )
        print(f"ratio ours/kernelbench-style, {ours.cache}: {shown}{verdict}")
    if cold.evaluated < len(chosen):
        print(
            f"kernelbench-style ran {cold.evaluated} of {len(chosen)} candidates cold and "
            f"{warm.evaluated} warm (time box {args.deadline_s:.0f} s); its rates are over "
            "what ran"
        )
    lines = []
    for ours in (ours_cold, ours_warm):
        theirs = cold if ours.cache == "cold" else warm
        lines += [
            f"{ours.cache}: {line}"
            for line in disagreements(ours.statuses, theirs.statuses, expected)
        ]
    print("disagreements on correctness:" if lines else "disagreements on correctness: none")
    for line in lines:
        print(f"  {line}")
    print(f"total {time.monotonic() - begin:.0f} s")

    if args.out:
        report = {
            "candidates": len(chosen),
            "backend": backend,
            "goal": GOAL,
            "phases": [
                p.model_dump()
                | {"evaluated": p.evaluated, "per_minute": p.per_minute, "counts": p.counts()}
                for p in phases
            ],
            "ratios": ratios,
            "disagreements": lines,
            "expected": expected,
            "kernelbench_style_runs": {
                "cold": cold_run.model_dump(mode="json"),
                "warm": warm_run.model_dump(mode="json"),
            },
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print(f"wrote {args.out}")
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


def _mix(chosen: list[dict]) -> dict[str, int]:
    return {k: sum(c["expect"] == k for c in chosen) for k in KINDS}


if __name__ == "__main__":
    main()
