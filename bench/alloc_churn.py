"""Does the size of a sandbox's one device allocation slow the GPUs of a machine down?

    python bench/alloc_churn.py             # needs 2 GPUs; about 4 minutes

A sandbox (verifier/gpu/sandbox/sandbox.py) starts, creates its device context, takes its whole
memory in one allocation (worker.Judge.sandbox_reserve) and is killed; one per evaluation. This
plays that on GPU 0 for each size: 8 processes in turn, each creating its context (timed),
allocating SIZE bytes in one block (timed) and filling it (timed), then SIGKILLed, the parent timing
the kill until the process is reaped (its context torn down). Alone, then while 2 loops do the same
on GPU 1. Mean milliseconds per step.
"""

import os
import signal
import subprocess
import sys
import threading
import time

CHILD = r"""
import sys, time, torch
t = time.perf_counter(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
ctx = time.perf_counter() - t
t = time.perf_counter()
n = int(sys.argv[1])
b = torch.empty(n, dtype=torch.uint8, device="cuda") if n else None
torch.cuda.synchronize()
alloc = time.perf_counter() - t
t = time.perf_counter()
if n: b.fill_(255); torch.cuda.synchronize()
fill = time.perf_counter() - t
print(f"{ctx:.4f} {alloc:.4f} {fill:.4f}", flush=True)
time.sleep(100)
"""


def one(gpu: str, size: int) -> tuple[float, float, float, float]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(size)], stdout=subprocess.PIPE, env=env)
    line = p.stdout.readline().decode().split()
    t = time.perf_counter()
    p.send_signal(signal.SIGKILL)
    p.wait()
    down = time.perf_counter() - t
    ctx, alloc, fill = map(float, line)
    return ctx, alloc, fill, down


def loop(gpu: str, size: int, stop: threading.Event) -> None:
    while not stop.is_set():
        one(gpu, size)


def main() -> None:
    import torch  # counts the GPUs without creating a context here

    if torch.cuda.device_count() < 2:
        raise SystemExit("alloc_churn plays two GPUs against each other: fewer are visible")
    n = 8
    for size_gib in (0, 0.5, 1.5, 4.25):
        size = int(size_gib * 2**30)
        for busy in (0, 2):
            stop = threading.Event()
            threads = [threading.Thread(target=loop, args=("1", size, stop)) for _ in range(busy)]
            for t in threads:
                t.start()
            time.sleep(2 if busy else 0)
            rows = [one("0", size) for _ in range(n)]
            stop.set()
            for t in threads:
                t.join()
            mean = [sum(r[i] for r in rows) / n * 1e3 for i in range(4)]
            print(
                f"size {size_gib:5.2f} GiB, {busy} loops on GPU 1: context {mean[0]:6.1f} ms, "
                f"alloc {mean[1]:6.1f} ms, fill {mean[2]:6.1f} ms, kill->reaped {mean[3]:6.1f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main()
