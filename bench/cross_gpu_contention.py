"""What work on one GPU slows the host-side calls that drive another?

    python bench/cross_gpu_contention.py            # needs 2 GPUs; about 2 minutes

A probe process on GPU 0 measures, in windows of --seconds, the kinds of call a judge and its
sandbox make (medians): 200 tiny kernels then a synchronise (microseconds per kernel, wall
clock), the same 200 as the GPU saw them between two events (microseconds per kernel: the GPU
waiting for the host shows here), one 64 MiB device allocation, filled and given back to the
driver (milliseconds), and one tensor shared by IPC as a sandbox shares each output it sends
(torch: an IPC handle, an interprocess event made and destroyed; milliseconds).
Meanwhile two processes on GPU 1 do one kind of work each row:

- idle: nothing (the baseline, first and last);
- kernels: the probe's own kernel loop, forever (steady work, no driver calls);
- contexts: fork a child that creates a device context, allocates, runs one kernel and exits,
  again and again: what a sandbox per evaluation does;
- bare contexts: the same child, creating its context only;
- allocations: a 256 MiB device allocation, given back to the driver, again and again;
- host memory: copying 1 GiB arrays on the CPU (host memory bandwidth, no GPU).

Each column's "x" is the ratio to the first idle row, all measured in this one run. First, how
many contexts per second one forking loop creates, with and without launch queues scaled to a
quarter (CUDA_SCALE_LAUNCH_QUEUES=0.25x), which a context must allocate and map.

    python bench/cross_gpu_contention.py --capacity   # about 1 minute

How many contexts per second the machine creates with several forking loops at once, all on
GPU 0 or split over GPUs 0 and 1, started together: whether more GPUs raise that number or the
loops share one machine-wide ceiling. Each evaluation's sandbox creates one context.
"""

import argparse
import json
import os
import subprocess
import sys
import time

PROBE = r"""
import json, statistics, sys, time, torch
x = torch.zeros(1024, device="cuda")
def kernels():
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(200): x.add_(1)
    torch.cuda.synchronize(); return (time.perf_counter() - t) / 200 * 1e6
def gpu():
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(200): x.add_(1)
    b.record(); b.synchronize(); return a.elapsed_time(b) / 200 * 1e3
def allocation():
    t = time.perf_counter(); y = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    y.fill_(0); torch.cuda.synchronize(); del y; torch.cuda.empty_cache()
    return (time.perf_counter() - t) * 1e3
def share():
    y = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
    t = time.perf_counter(); got = y.untyped_storage()._share_cuda_()
    torch.UntypedStorage._release_ipc_counter_cuda(got[4], got[5]); del y, got
    return (time.perf_counter() - t) * 1e3
probes = (kernels, gpu, allocation, share)
for f in probes: f(); f()
seen = {f.__name__: [] for f in probes}
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for f in probes: seen[f.__name__].append(f())
print(json.dumps({k: statistics.median(v) for k, v in seen.items()}))
"""

KERNELS = r"""
import torch
x = torch.zeros(1024, device="cuda")
while True:
    for _ in range(200): x.add_(1)
    torch.cuda.synchronize()
"""

CONTEXTS = r"""
import os, sys, time, torch
bare, seconds = sys.argv[1] == "bare", float(sys.argv[2])
time.sleep(max(0.0, float(sys.argv[3]) - time.time()) if len(sys.argv) > 3 else 0.0)
end, n = time.monotonic() + seconds, 0
while time.monotonic() < end:
    pid = os.fork()
    if pid == 0:
        torch.cuda.synchronize() if bare else torch.zeros(1, device="cuda").add_(1).item()
        os._exit(0)
    os.waitpid(pid, 0)
    n += 1
print(n / seconds)
"""

ALLOCATIONS = r"""
import torch
while True:
    y = torch.empty(256 << 20, dtype=torch.uint8, device="cuda"); del y; torch.cuda.empty_cache()
"""

HOST_MEMORY = r"""
import numpy as np
a = np.ones(1 << 27); b = np.empty_like(a)
while True: np.copyto(b, a)
"""

FOREVER = "1e9"
# --capacity's rows: one forking loop per digit, on the GPU the digit names
CAPACITY_ROWS = ("0", "00", "01", "0000", "0011", "00000000", "00001111")
ROWS = {  # name: the code two processes on GPU 1 run, and its arguments
    "idle": None,
    "kernels": (KERNELS, []),
    "contexts": (CONTEXTS, ["full", FOREVER]),
    "bare contexts": (CONTEXTS, ["bare", FOREVER]),
    "allocations": (ALLOCATIONS, []),
    "host memory": (HOST_MEMORY, []),
}


def env_on(gpu: str, **extra: str) -> dict[str, str]:
    # One hardware queue per context, as the judges run (verifier.isolate.JUDGE_ENV_FIXED).
    return dict(os.environ, CUDA_VISIBLE_DEVICES=gpu, CUDA_DEVICE_MAX_CONNECTIONS="1", **extra)


def contexts_per_second(bare: bool, **extra: str) -> float:
    args = [sys.executable, "-c", CONTEXTS, "bare" if bare else "full", "4"]
    out = subprocess.run(args, env=env_on("1", **extra), capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def contexts_together(gpus: str, seconds: float) -> float:
    """Contexts per second, all loops together: one forking loop per character of `gpus` (the
    GPU it runs on), every loop's window starting at the same moment, past torch's import."""
    start = str(time.time() + 8.0)
    command = [sys.executable, "-c", CONTEXTS, "full", str(seconds), start]
    loops = [
        subprocess.Popen(command, env=env_on(g), stdout=subprocess.PIPE, text=True) for g in gpus
    ]
    return sum(float(p.communicate()[0].split()[-1]) for p in loops)


def probe(seconds: float, row: str) -> dict[str, float]:
    work = ROWS[row]
    others = [
        subprocess.Popen([sys.executable, "-c", work[0], *work[1]], env=env_on("1"))
        for _ in range(2 if work else 0)
    ]
    try:
        time.sleep(3 if others else 0)  # the loops past their start
        out = subprocess.run([sys.executable, "-c", PROBE, str(seconds)], env=env_on("0"),
                             capture_output=True, text=True, check=True)  # fmt: skip
        return json.loads(out.stdout.splitlines()[-1])
    finally:
        for p in others:
            p.kill()
            p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="probe window per row")
    parser.add_argument("--capacity", action="store_true",
                        help="only the machine's contexts per second, loops over 1 and 2 GPUs")  # fmt: skip
    args = parser.parse_args()
    import torch  # counts the GPUs without creating a context here

    if torch.cuda.device_count() < 2:
        raise SystemExit(
            "cross_gpu_contention plays two GPUs against each other: fewer are visible"
        )
    if args.capacity:
        print(f"{'loops on GPU 0, GPU 1':<24}{'contexts/s':>11}{'per loop':>10}")
        for gpus in CAPACITY_ROWS:
            rate = contexts_together(gpus, args.seconds)
            loops = f"{gpus.count('0'):>8}, {gpus.count('1')}"
            print(f"{loops:<24}{rate:>11.2f}{rate / len(gpus):>10.2f}", flush=True)
        return
    print("contexts per second, one forking loop on GPU 1:")
    for bare in (False, True):
        for extra in ({}, {"CUDA_SCALE_LAUNCH_QUEUES": "0.25x"}):
            label = f"{'bare' if bare else 'full'}, {'queues 0.25x' if extra else 'default queues'}"
            print(f"  {label:<28}{contexts_per_second(bare, **extra):6.2f}", flush=True)
    print(f"\n{'GPU 1: 2 processes of':<24}{'kernel us':>10}{'x':>7}{'GPU us':>9}{'x':>7}"
          f"{'alloc ms':>10}{'x':>7}{'share ms':>10}{'x':>7}")  # fmt: skip
    base: dict[str, float] | None = None
    for row in (*ROWS, "idle"):
        m = probe(args.seconds, row)
        base = base or m
        print(f"{row:<24}{m['kernels']:>10.2f}{m['kernels'] / base['kernels']:>6.2f}x"
              f"{m['gpu']:>9.2f}{m['gpu'] / base['gpu']:>6.2f}x"
              f"{m['allocation']:>10.2f}{m['allocation'] / base['allocation']:>6.2f}x"
              f"{m['share']:>10.3f}{m['share'] / base['share']:>6.2f}x", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
