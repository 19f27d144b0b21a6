"""GPU probe for tests/test_confine.py: a confined sandbox (private /dev/shm, Landlock on the
device nodes) shares a CUDA tensor by IPC and a judge outside its mount namespace opens it.

    python tests/confine_ipc_probe.py        # prints one JSON line; needs torch and a GPU

Imports torch and the verifier's GPU modules only (no pydantic), so it runs wherever torch does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

SANDBOX = """
import json, os, sys
from hipevolve.verifier.gpu import confine
flags = confine.confine_process([sys.argv[1], "/dev", "/proc/self"])
import torch
from hipevolve.verifier.gpu import ipc
t = torch.arange(1 << 20, device="cuda", dtype=torch.float32) * 0.5
torch.cuda.synchronize()
shared = ipc.share(t)
note = "written"
try:
    open("/dev/shm/hipevolve_probe_note", "w").write("x")
except OSError as e:
    note = type(e).__name__
print(json.dumps({"flags": flags, "spec": shared[0] if isinstance(shared, tuple) else shared,
                  "shm": sorted(os.listdir("/dev/shm")), "note": note}), flush=True)
sys.stdin.readline()
"""


def main() -> None:
    import torch

    from hipevolve.verifier.gpu import ipc

    torch.zeros(1, device="cuda")  # the judge's context exists before it opens a handle
    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as workdir:
        child = subprocess.Popen([sys.executable, "-c", SANDBOX, workdir], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
        report = json.loads(child.stdout.readline())
        result = {"flags": report["flags"], "note": report["note"], "spec": report["spec"]}
        if isinstance(report["spec"], dict):
            counter = ipc.JudgeCounter()
            n = 1 << 20
            got = counter.open(ipc.parse(report["spec"], torch.float32, [n]))
            want = torch.arange(n, device="cuda", dtype=torch.float32) * 0.5
            result["opened_equal"] = bool(torch.equal(got, want))
            del got
            counter.close()
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(timeout=60)
        sandbox_only = set(report["shm"]) - set(os.listdir("/dev/shm"))
        result["sandbox_shm_files_hidden"] = bool(sandbox_only) or report["shm"] == []
        result["note_on_host"] = os.path.exists("/dev/shm/hipevolve_probe_note")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
