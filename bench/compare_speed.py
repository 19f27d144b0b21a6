"""How long the judge takes to compare one passing output: the quick check against the full policy.

    python bench/compare_speed.py [--rows 32768] [--cols 4096] [--dtype bfloat16] [--repeats 20]

Softmax's attn_scores_4k case by default (a 256 MiB output). Both ways run alternately in one
process on one device, each compare ending in its host read as in the judge; the ratio is the
full policy's median time over the quick check's.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hipevolve.verifier.gpu.judge import compare

TOL = {"kind": "allclose", "atol": 1e-5, "rtol": 1e-2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32768)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    ref = torch.softmax(torch.randn(args.rows, args.cols, device=device), -1).to(dtype)
    got = (ref.float() * (1 + 1e-3 * torch.randn_like(ref, dtype=torch.float32))).to(dtype)
    ways = {"full": compare.compare_fully, "quick": compare.compare_values}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(args.repeats + 2):  # two rounds of warm-up
        for name, way in ways.items():
            if device == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            ok = way(0, got, ref, TOL)[0]
            if i >= 2:
                times[name].append((time.perf_counter() - t) * 1e3)
            assert ok, name
    full, quick = (statistics.median(times[n]) for n in ("full", "quick"))
    print(f"{device} {torch.cuda.get_device_name() if device == 'cuda' else ''} "
          f"{args.rows}x{args.cols} {args.dtype}: full {full:.2f} ms, quick {quick:.2f} ms, "
          f"ratio {full / quick:.2f}x (medians of {args.repeats})")  # fmt: skip


if __name__ == "__main__":
    main()
