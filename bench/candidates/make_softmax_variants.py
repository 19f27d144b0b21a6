"""Writes the 20 softmax candidates of bench/verifier_throughput.py, each in both formats.

    python bench/candidates/make_softmax_variants.py           # (re)write bench/candidates/softmax/
    python bench/candidates/make_softmax_variants.py --check   # exit 1 if the files are stale

Every variant is one row softmax for the task `softmax` (fp32 and bf16, fp32 accumulation),
varied over block size, rows per block, vector width, reduction style (shared-memory tree or
warp shuffles) and two-pass "online" versus three-pass, and written twice:
- native: softmax/native/<name>/kernel.hip + model.py (HIP; extern "C" launchers, see
  hipevolve/runtime.py), compiled by the verifier with nvcc through the layer or with hipcc;
- KernelBench: softmax/kernelbench/<name>.py (ModelNew + load_inline of the same kernels written
  in plain CUDA with __nv_bfloat16), evaluated by bench/kernelbench_harness.py.
10 are correct, 5 are wrong and 5 do not compile; softmax/manifest.json says which and why.
The manifest lists them interleaved (ok, ok, incorrect, compile_error, ...) so that any prefix,
such as the subset a time-boxed KernelBench-style run gets through, keeps the same mix.

The wrong ones are chosen to fail by a wide margin, because the softmax task's tolerance
(atol 1e-2) is loose for probabilities near 1/cols: a bug that only perturbs values by ~1e-3
(reading the transposed element, or a missing max subtraction, which randn inputs never make
overflow) would pass there. Generated files are committed; edit this script, not them.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # run as a script or loaded by path: its device code beside it
from softmax_device_code import cuda_source, hip_source  # noqa: E402

OUT = HERE / "softmax"
Platform = Literal["hip", "cuda"]
Expect = Literal["ok", "incorrect", "compile_error"]


@dataclass(frozen=True)
class Variant:
    name: str
    expect: Expect
    threads: int  # threads per block
    rows: int  # rows per block (threads / rows share one row)
    vec_bytes: int  # bytes per vector load and store; 0 = scalar
    reduce: Literal["smem", "shfl"]  # shared-memory tree, or warp butterflies plus shared memory
    online: bool  # one pass for max and sum (rescaled running sum), else separate passes
    fast_exp: bool = False  # __expf instead of expf
    bug: str = ""  # key into BUGS: what goes wrong, on purpose
    note: str = ""

    @property
    def bug_text(self) -> str:
        """What goes wrong in this variant, on purpose ('' for a correct one)."""
        return BUGS.get(self.bug, "")

    @property
    def group(self) -> int:
        return self.threads // self.rows

    def describe(self) -> str:
        loads = f"{self.vec_bytes}-byte loads" if self.vec_bytes else "scalar loads"
        reduce = "warp-shuffle" if self.reduce == "shfl" else "shared-memory"
        passes = "online max/sum" if self.online else "three passes"
        exp = ", __expf" if self.fast_exp else ""
        return (
            f"{self.threads} threads, {self.rows} row(s) per block, {loads}, {reduce} "
            f"reductions, {passes}{exp}"
        )


# Each bug, one line: what it does (quoted in the kernel header and the manifest).
BUGS = {
    "mul_sum": "wrong normalisation: multiplies by the row sum instead of dividing by it",
    "row_shift": "off-by-one row: stores row r's result in row r+1 (row 0 is never written)",
    "warp_only": "the reduction skips the cross-warp step: each warp normalises its own slice",
    "sum_inputs": "the sum pass adds the raw inputs instead of their exponentials",
    "exp_plus_max": "sign slip in the output pass: exp(x + max) instead of exp(x - max)",
    "typo": "does not compile: misspelt variable (inv_summ)",
    "semicolon": "does not compile: missing semicolon",
    "vla_shared": "does not compile: __shared__ array sized by blockDim.x, not a constant",
    "launch_args": "does not compile: kernel launched without its cols argument",
    "const_drop": "does not compile: a const input pointer bound to a non-const pointer",
}

# Interleaved ok, ok, incorrect, compile_error: every prefix keeps the 2:1:1 mix.
VARIANTS = [
    Variant("s01_ok_b256_scalar_smem", "ok", 256, 1, 0, "smem", False),
    Variant("s02_ok_b128_v16_smem", "ok", 128, 1, 16, "smem", False),
    Variant("s03_bad_mul_sum", "incorrect", 256, 1, 16, "smem", False, bug="mul_sum"),
    Variant("s04_cc_typo", "compile_error", 256, 1, 16, "shfl", True, bug="typo"),
    Variant("s05_ok_b512_v16_shfl", "ok", 512, 1, 16, "shfl", False),
    Variant("s06_ok_b1024_v8_shfl_online", "ok", 1024, 1, 8, "shfl", True),
    Variant("s07_bad_row_shift", "incorrect", 128, 2, 8, "shfl", True, bug="row_shift"),
    Variant("s08_cc_semicolon", "compile_error", 128, 1, 0, "smem", False, bug="semicolon"),
    Variant("s09_ok_b256_r2_v16_smem_online", "ok", 256, 2, 16, "smem", True),
    Variant("s10_ok_b256_r4_v8_shfl", "ok", 256, 4, 8, "shfl", False),
    Variant("s11_bad_warp_only", "incorrect", 256, 1, 0, "shfl", False, bug="warp_only"),
    Variant("s12_cc_vla_shared", "compile_error", 512, 1, 8, "smem", False, bug="vla_shared"),
    Variant("s13_ok_b64_v4_shfl_online", "ok", 64, 1, 4, "shfl", True),
    Variant("s14_ok_b512_r2_v16_shfl_online", "ok", 512, 2, 16, "shfl", True),
    Variant("s15_bad_sum_inputs", "incorrect", 512, 1, 16, "smem", False, bug="sum_inputs"),
    Variant("s16_cc_launch_args", "compile_error", 256, 2, 16, "shfl", False, bug="launch_args"),
    Variant("s17_ok_b128_v16_shfl_online_fastexp", "ok", 128, 1, 16, "shfl", True, True),
    Variant(
        "s18_ok_b256_r8_v8_shfl",
        "ok",
        256,
        8,
        8,
        "shfl",
        False,
        note="32 threads per row: narrower than an AMD wavefront, shuffles use width 32",
    ),
    Variant("s19_bad_exp_plus_max", "incorrect", 256, 1, 8, "shfl", True, bug="exp_plus_max"),
    Variant("s20_cc_const_drop", "compile_error", 1024, 1, 16, "shfl", True, bug="const_drop"),
]


# ----------------------------------------------------------------------------- Python sides


def native_model(v: Variant) -> str:
    return f'''"""Row softmax through two native launchers (fp32 and bf16): bench variant {v.name}."""

import torch
import torch.nn as nn

from hipevolve.runtime import kernels


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 1:
            raise ValueError(f"softmax needs at least one dimension, got shape {{tuple(x.shape)}}")
        x = x.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        rows = x.numel() // cols if cols else 0
        if x.dtype == torch.float32:
            kernels.softmax_f32(x, out, rows, cols)
        elif x.dtype == torch.bfloat16:
            kernels.softmax_bf16(x, out, rows, cols)
        else:
            raise TypeError(f"softmax kernel supports float32 and bfloat16, got {{x.dtype}}")
        return out
'''


def kernelbench_model(v: Variant) -> str:
    source = cuda_source(v)
    if '"""' in source:
        raise ValueError(f"{v.name}: CUDA source contains a triple quote")
    return f'''"""KernelBench-format twin of native candidate {v.name}: {v.describe()}."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
{source}"""

cpp_source = "torch::Tensor softmax_forward(torch::Tensor x);"

softmax_ext = load_inline(
    name="hipevolve_bench_{v.name}",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["softmax_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = softmax_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ext.softmax_forward(x)
'''


def manifest() -> dict:
    return {
        "task": "softmax",
        "generator": "bench/candidates/make_softmax_variants.py",
        "counts": {
            e: sum(v.expect == e for v in VARIANTS) for e in ("ok", "incorrect", "compile_error")
        },
        "candidates": [
            {
                "name": v.name,
                "expect": v.expect,
                "native": f"native/{v.name}",
                "kernelbench": f"kernelbench/{v.name}.py",
                "description": v.describe(),
                "bug": v.bug_text,
                "params": {k: val for k, val in asdict(v).items() if k not in ("name", "expect")},
            }
            for v in VARIANTS
        ],
    }


def rendered() -> dict[Path, str]:
    """Every generated file (path relative to softmax/) and its content."""
    files: dict[Path, str] = {}
    for v in VARIANTS:
        files[Path("native") / v.name / "kernel.hip"] = hip_source(v)
        files[Path("native") / v.name / "model.py"] = native_model(v)
        files[Path("kernelbench") / f"{v.name}.py"] = kernelbench_model(v)
    files[Path("manifest.json")] = json.dumps(manifest(), indent=2) + "\n"
    return files


def stale(out: Path = OUT) -> list[Path]:
    """Generated files that are missing or differ from what this script writes."""
    return [
        rel
        for rel, text in rendered().items()
        if not (out / rel).is_file() or (out / rel).read_text() != text
    ]


def write(out: Path = OUT) -> int:
    for rel, text in rendered().items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    return len(rendered())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the files are stale")
    args = parser.parse_args()
    if args.check:
        bad = stale()
        for rel in bad:
            print(f"stale: {OUT / rel}")
        sys.exit(1 if bad else 0)
    print(f"wrote {write()} files under {OUT}")


if __name__ == "__main__":
    main()
