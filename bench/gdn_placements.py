"""Gated DeltaNet prefill in CUDA graphs over several memory placements, side by side with FLA.

    python bench/gdn_placements.py                                   # qwen_tp1_short, 8 placements
    python bench/gdn_placements.py --cases qwen_tp1_short,mha_16 --placements 6 \\
        --candidate variant_a --candidate variant_b                  # kernel variants, same run

One run of bench/gdn_vs_fla.py times each row with its buffers wherever the allocator put them.
Where they lie moves our kernels more than FLA's, so this bench repeats the graph timing over
--placements placements. For placement i (0, 1, ...):
- a pad of pad_bytes(i) is allocated and kept until the case ends, so everything allocated after
  it (the inputs, and each graph's outputs and workspace) lands somewhere else;
- the inputs are drawn anew (seed i);
- every row (FLA chunk_gated_delta_rule, the seed problems/gated_delta_net/seeds/chunked, each
  --candidate folder) is captured in its own graph and timed with bench/gdn_vs_fla.py's Timer and
  protocol (hold kernel, caches flushed, median of --trials trials).
Prints, per case and row, the median, min and max over placements, each placement's time, and
FLA's median over the row's (> 1: faster than FLA). Correctness is bench/gdn_vs_fla.py's job.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from hipevolve.core.reference import build_inputs, load_module
from hipevolve.problems import get_task

HERE = Path(__file__).resolve().parent
PAD_STEP = 7919 * 4096  # a prime number of 4 KiB pages: placements differ by odd page counts


def _gdn_vs_fla():
    spec = importlib.util.spec_from_file_location("gdn_vs_fla", HERE / "gdn_vs_fla.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gb = _gdn_vs_fla()


def pad_bytes(placement: int) -> int:
    """Bytes of the pad allocated before placement `placement` (never zero)."""
    return 4096 + placement * PAD_STEP


def summary_line(case: str, row: str, times: Sequence[float], fla_median: float) -> str:
    med = statistics.median(times)
    each = " ".join(f"{t:.1f}" for t in times)
    return (f"{case:16s} {row:24s} {med:8.1f} {min(times):8.1f} {max(times):8.1f} "
            f"{fla_median / med:6.3f}   {each}")  # fmt: skip


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", default="qwen_tp1_short", help="comma-separated prefill cases")
    p.add_argument("--placements", type=int, default=8, help="placements per case (8)")
    p.add_argument("--trials", type=int, default=15, help="graph trials per row and placement")
    p.add_argument("--candidate", action="append", default=[], type=Path, metavar="DIR",
                   help="a native candidate folder (kernel.hip, model.py); repeatable")  # fmt: skip
    p.add_argument("--build-cache", type=Path, default=Path("/tmp/hipevolve-gdn-bench"))
    opts = p.parse_args(argv)
    if opts.placements < 1 or opts.trials < 1:
        p.error("--placements and --trials must be >= 1")
    task = get_task(gb.PREFILL)
    known = {c.name for c in task.cases}
    opts.cases = [c for c in opts.cases.split(",") if c]
    unknown = [c for c in opts.cases if c not in known]
    if unknown or not opts.cases:
        p.error(f"unknown case(s) {unknown}: pick from {', '.join(sorted(known))}")
    for folder in opts.candidate:
        if gb.candidate_missing(folder):
            p.error(f"--candidate {folder} needs kernel.hip and model.py")
    opts.task = task
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    if gb.no_gpu():
        return 2
    fla = gb.fla_calls()
    if isinstance(fla, str):
        print(fla, file=sys.stderr)
        return 2
    folders = {f"seed {opts.task.seeds[0].name}": opts.task.seeds[0]}
    folders |= {f"candidate {f.name}": f for f in opts.candidate}
    models = gb.native_models(folders, opts.build_cache)
    broken = {n: m for n, m in models.items() if isinstance(m, str)}
    if broken:
        print("; ".join(f"{n}: {m}" for n, m in broken.items()), file=sys.stderr)
        return 1
    calls = {"FLA chunk": fla["FLA chunk"]}
    calls |= {name: (lambda a, m=m: m(*a)) for name, m in models.items()}
    module = load_module(opts.task.reference)
    timer = gb.Timer()
    print(f"device {torch.cuda.get_device_name()}; graph us over {opts.placements} placements")
    print(f"{'case':16s} {'row':24s} {'median':>8s} {'min':>8s} {'max':>8s} {'xFLA':>6s}   "
          "each placement")  # fmt: skip
    for case in opts.cases:
        inputs = opts.task.case(case).inputs
        times: dict[str, list[float]] = {name: [] for name in calls}
        pads = []
        for i in range(opts.placements):
            pads.append(torch.empty(pad_bytes(i), dtype=torch.uint8, device="cuda"))
            sets = [build_inputs(module, inputs, "cuda", seed=i, draw_on_device=True)]
            for name, call in calls.items():
                graph, _ = gb.capture(call, sets)
                times[name].append(timer.graph(graph, 1, opts.trials))
                del graph
        fla_median = statistics.median(times["FLA chunk"])
        for name, row in times.items():
            print(summary_line(case, name, row, fla_median), flush=True)
        del pads
    if timer.late_holds:
        print(f"note: {timer.late_holds} graph trial(s) were enqueued after their hold ended")
    return 0


if __name__ == "__main__":
    sys.exit(main())
