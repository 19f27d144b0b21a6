"""Where a Gated DeltaNet prefill call spends its GPU time: each kernel it launches, timed alone.

    python bench/gdn_kernels.py --cases long_32,qwen35_tp8_32k
    python bench/gdn_kernels.py --cases long_32 --variant TC_WCOLS=16 --variant TC_BV=64
    python bench/gdn_kernels.py --cases long_32 --anchor flashqla   # FlashQLA's kernels too

For the seed (problems/gated_delta_net/seeds/chunked), each --variant of it (the seed with
other `// @tunable` values, as in bench/gdn_vs_fla.py) and each --anchor (FlashQLA, FlashInfer:
bench/gdn_rows.py's calls, where they import), on each case: --calls calls, each after
the L2 is flushed (a 512 MiB buffer zeroed) and the device synchronised, under PyTorch's profiler
(CUPTI). Per kernel (its name with template arguments, as launched): launches per call, and its
GPU time per call, median over the calls; then the sum of the kernels and the gaps between them
(first kernel start to last kernel end, less the sum). Kernel times are the GPU's own; the gaps
are eager-mode launch gaps, which CUDA graphs shrink (bench/gdn_vs_fla.py times the whole call).
Needs a CUDA GPU and nvcc; exit 2 without a GPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import gdn_vs_fla as bench
import torch
from graph_timer import FLUSH_BYTES, kernel_events

from hipevolve.problems import get_task


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", action="append", default=[], metavar="NAMES",
                   help="prefill cases, comma-separated or repeated (default: every timed one)")  # fmt: skip
    p.add_argument("--variant", action="append", default=[], metavar="NAME=VALUE[,NAME=VALUE]",
                   help="the seed with these tunable values, beside the seed; repeatable")  # fmt: skip
    p.add_argument("--anchor", action="append", default=[], choices=["flashqla", "flashinfer"],
                   help="also profile this anchor's call; repeatable")  # fmt: skip
    p.add_argument("--calls", type=int, default=5, help="profiled calls per row and case (5)")
    p.add_argument("--build-cache", type=Path,
                   default=Path(tempfile.gettempdir()) / "hipevolve-gdn-bench")  # fmt: skip
    opts = p.parse_args(argv)
    task = get_task(bench.PREFILL)
    tasks = {bench.PREFILL: task, bench.DECODE: get_task(bench.DECODE)}
    try:
        opts.cases = bench.select_cases(opts.cases, {bench.PREFILL: task})[bench.PREFILL]
        opts.variants = [bench.parse_variant(v, tasks) for v in opts.variant]
    except ValueError as e:
        p.error(str(e))
    if opts.calls < 1:
        p.error("--calls must be >= 1")
    if any(t != bench.PREFILL for t, _, _ in opts.variants):
        p.error("--variant: prefill tunables only (this bench runs the prefill task)")
    opts.task, opts.tasks = task, tasks
    return opts


def kernel_times(call: Callable[[], object], calls: int) -> tuple[dict, float]:
    """(kernel name -> (launches per call, median GPU us per call), median span us per call)."""
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    per_call: list[list[dict]] = []
    call()
    torch.cuda.synchronize()
    for _ in range(calls):
        flush.zero_()
        torch.cuda.synchronize()
        per_call.append(kernel_events(call))
    times: dict[str, list[float]] = defaultdict(list)
    counts: dict[str, int] = {}
    spans = []
    for kernels in per_call:
        mine: dict[str, float] = defaultdict(float)
        for e in kernels:
            mine[e["name"]] += e["dur"]
        for name, us in mine.items():
            times[name].append(us)
        counts.update({n: sum(1 for e in kernels if e["name"] == n) for n in mine})
        if kernels:
            spans.append(max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels))
    table = {n: (counts[n], statistics.median(ts)) for n, ts in times.items()}
    return table, statistics.median(spans) if spans else 0.0


def short(name: str) -> str:
    """`void gdn_tc_scan<32, 3, 0>(unsigned short const*, ...)` -> `gdn_tc_scan<32, 3, 0>`."""
    head = name.split("(")[0]
    return head.split(" ", 1)[1] if head.startswith("void ") else head


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    if bench.no_gpu():
        return 2
    t0 = time.monotonic()
    seed = opts.task.seeds[0]
    folders = {f"{bench.PREFILL}:seed {seed.name}": seed}
    root = Path(tempfile.mkdtemp(prefix="gdn-variants-"))
    folders.update(bench.variant_folders(opts.variants, opts.tasks, root))
    models: dict[str, object] = dict(bench.native_models(folders, opts.build_cache))
    if opts.anchor:
        calls = bench.anchor_calls()
        for name in opts.anchor:
            row = bench.ANCHOR_ROWS[name]
            call = calls[row]
            models[f"{bench.PREFILL}:{row}"] = (
                call if isinstance(call, str) else (lambda *a, c=call: c(list(a)))
            )
    print(f"device {torch.cuda.get_device_name()}, {opts.calls} profiled calls per row and case",
          flush=True)  # fmt: skip
    failed = False
    for case in opts.cases:
        sets, _ = bench.case_inputs(opts.task, case)
        args = sets[0]
        for key, model in models.items():
            row = key.split(":", 1)[1]
            if isinstance(model, str):
                print(f"\n{case} | {row}: {model}", flush=True)
                failed = True
                continue
            with torch.no_grad():
                table, span = kernel_times(lambda m=model, a=args: m(*a), opts.calls)
            total = sum(us for _, us in table.values())
            print(f"\n{case} | {row} ({time.monotonic() - t0:.0f} s)", flush=True)
            for name, (n, us) in sorted(table.items(), key=lambda x: -x[1][1]):
                print(f"  {us:9.1f} us  {100 * us / total:5.1f}%  x{n}  {short(name)}")
            print(f"  {total:9.1f} us  kernels; {span - total:.1f} us of gaps in a {span:.1f} us "
                  "eager span", flush=True)  # fmt: skip
        del sets, args
        torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
