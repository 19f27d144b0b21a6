"""Does our timer agree with triton.testing.do_bench? Five reference kernels, side by side.

    python bench/timer_agreement.py                 # on a GPU machine with triton
    python bench/timer_agreement.py --trials 30 --scale 0.25   # smaller, faster

Both sides flush the cache before every trial (ours: 512 MiB zeroed; do_bench: its own buffer)
and report a median in microseconds. Ours also synchronises the whole device before the end
window (so side-stream work is seen); the time itself is between events on the timing stream, as
in do_bench. Both sides make the same number of calls. The goal is a ratio within 5%.
Prints one line per kernel: ours, do_bench, ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from hipevolve.verifier.gpu.timing import Clock, time_trials


def kernels(scale: float) -> dict[str, tuple]:
    """name -> (function of inputs, input builder)."""
    n = int(64 * 1024 * 1024 * scale)  # elements of the large 1-D cases
    m = int(8192 * scale**0.5) // 64 * 64
    g = int(4096 * scale ** (1 / 3)) // 64 * 64
    dev, bf16 = "cuda", torch.bfloat16
    return {
        f"copy {n * 4 >> 20} MiB fp32": (
            lambda a, o: o.copy_(a),
            lambda: [torch.randn(n, device=dev), torch.empty(n, device=dev)],
        ),
        f"gemm {g}^3 bf16": (
            lambda a, b: a @ b,
            lambda: [
                torch.randn(g, g, device=dev, dtype=bf16),
                torch.randn(g, g, device=dev, dtype=bf16),
            ],
        ),
        f"softmax {m}x4096 bf16": (
            lambda x: torch.softmax(x, dim=-1),
            lambda: [torch.randn(m, 4096, device=dev, dtype=bf16)],
        ),
        f"layernorm {m}x4096 bf16": (
            lambda x, w, b: torch.nn.functional.layer_norm(x, (4096,), w, b),
            lambda: [
                torch.randn(m, 4096, device=dev, dtype=bf16),
                torch.ones(4096, device=dev, dtype=bf16),
                torch.zeros(4096, device=dev, dtype=bf16),
            ],
        ),
        f"gelu {n * 2 >> 20} MiB bf16": (
            lambda x: torch.nn.functional.gelu(x),
            lambda: [torch.randn(n, device=dev, dtype=bf16)],
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100, help="our trials per kernel (100)")
    parser.add_argument("--warmup", type=int, default=10, help="our warm-up calls (10)")
    parser.add_argument("--scale", type=float, default=1.0, help="problem size factor (1.0)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a GPU: torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    try:
        from triton.testing import do_bench
    except ImportError:
        print("needs triton (pip install triton): it provides do_bench", file=sys.stderr)
        return 2
    clock = Clock("cuda")
    print(f"{'kernel':28} {'ours (us)':>10} {'do_bench (us)':>14} {'ratio':>7}")
    worst = 0.0
    with torch.no_grad():
        for name, (fn, make) in kernels(args.scale).items():
            sets = [make() for _ in range(2)]  # our protocol: distinct inputs per trial

            def ours_once(f=fn, sets=sets) -> float:
                times = time_trials(clock, lambda a: f(*a), sets, args.trials, args.warmup)[0]
                return statistics.median(times)

            def theirs_once(f=fn, s=sets[0], calls_us=None) -> float:
                # the same number of calls as ours: sustained load lowers clocks
                rep_ms = max(args.trials * (calls_us or 100.0) / 1e3, 1.0)
                return do_bench(lambda: f(*s), warmup=25, rep=rep_ms, return_mode="median") * 1e3

            # ABBA order: clock and thermal drift across the four runs cancels in the means
            a1 = ours_once()
            b1 = theirs_once(calls_us=a1)
            b2 = theirs_once(calls_us=a1)
            a2 = ours_once()
            ours, theirs = (a1 + a2) / 2, (b1 + b2) / 2
            ratio = ours / theirs
            worst = max(worst, abs(ratio - 1))
            print(f"{name:28} {ours:10.1f} {theirs:14.1f} {ratio:7.3f}")
            del sets
            torch.cuda.empty_cache()
    print(f"worst disagreement: {worst * 100:.1f}% (goal: within 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
