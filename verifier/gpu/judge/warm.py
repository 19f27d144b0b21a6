"""Compiles a task's strong baselines beside a run's first evaluations, off the GPU slot.

A cold FLA spent about 45 s of each case's strong-baseline job (issue 47, H200) holding the run's
only GPU slot, about 40 s of it Triton compiling on the CPU. This process, started by the
controller (verifier/baseline_warm.py) while the run's evaluations go on, calls each `module`
baseline once on each case it is given, with Triton told to compile every kernel (every
configuration its autotuner would try) and launch none, into the baselines' shared compile
folder (BaselineJob.compiles). The judge's job for that case then finds the kernels compiled
and only autotunes and times them. What does not go through Triton (a torch operation, another
library's kernel) runs once, as in one timed call; nothing is timed or compared here, and an
error ends that item only, said in its line: the judge's job is what decides.

Trusted code only: the task's reference (for the inputs) and its baseline modules, never a
candidate. Usage: python -m hipevolve.verifier.gpu.judge.warm JOB.json; one JSON line a
(baseline, case) on stdout: {"baseline", "case", "seconds", "error"}.

Imports torch, the standard library and hipevolve.{core.reference, verifier.gpu.job,
verifier.gpu.judge.strong} only.
"""

from __future__ import annotations

import json
import sys
import time
import types
from pathlib import Path

import torch

from hipevolve.core import reference
from hipevolve.verifier.gpu.job import BaselineJob
from hipevolve.verifier.gpu.judge import strong


def compile_without_launching() -> bool:
    """Makes every Triton kernel call compile (into the cache) and return without launching,
    and every autotuned kernel compile each configuration it would benchmark (after its
    pruning) without benchmarking any; False where Triton is not installed."""
    try:
        import triton.runtime.autotuner as autotuner
        import triton.runtime.jit as jit
    except ImportError:
        return False
    run = jit.JITFunction.run

    def compile_only(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        kwargs["warmup"] = True  # Triton's own compile-without-launch switch
        return run(self, *args, **kwargs)

    def every_config(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        kwargs.pop("warmup", None)
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        try:
            for config in self.prune_configs(kwargs):
                self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            self.nargs = None

    jit.JITFunction.run = compile_only
    autotuner.Autotuner.run = every_config
    return True


def warm(job: dict) -> None:
    """Each item of `job` called once, its line printed as it ends."""
    device, seed = job["device"], job["seed"]
    ref = reference.load_module(job["reference"])
    makers: dict[str, types.ModuleType | str] = {}
    for item in job["items"]:
        spec = BaselineJob(**item["baseline"])
        case = item["case"]
        start, error = time.monotonic(), ""
        try:
            if spec.name not in makers:
                strong.share_compiles(spec)
                makers[spec.name] = strong.load(spec)
            module = makers[spec.name]
            shim = types.SimpleNamespace(Model=module.Model, get_init_inputs=ref.get_init_inputs)
            model = reference.build_model(shim, case["init"], device, seed)
            inputs = reference.build_inputs(ref, case["inputs"], device, seed, draw_on_device=True)
            with torch.no_grad():
                model(*inputs)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            del model, inputs
        except Exception as e:  # noqa: BLE001 (the judge's job says why, with the same code)
            error = strong.why(e)
        line = {"baseline": spec.name, "case": case["name"], "error": error}
        print(json.dumps(line | {"seconds": round(time.monotonic() - start, 2)}), flush=True)


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    compile_without_launching()
    warm(job)


if __name__ == "__main__":
    main()
