"""What the GEMM lowering tests share: the test tasks of tests/data/lowering/ by kind, the GEMM
tunables, the NVIDIA tensor-core PTX, and a task's lowered candidate."""

from __future__ import annotations

from test_lowering import lowered

from hipevolve.core.candidate import Candidate

GEMM = ("l1_matmul", "l1_linear_bias", "l2_gemm_bias_gelu", "l2_gemm_scale_residual",
        "l2_matmul_relu", "l2_linear_long_k")  # fmt: skip
CHAINS = {  # task -> its kernels in launch order
    "l2_gemm_softmax": ["lower_gemm", "lower_rowreduce"],
    "l2_gemm_relu_layernorm": ["lower_gemm", "lower_rowreduce"],
    "l2_relu_layernorm_linear": ["lower_rowreduce", "lower_gemm"],
}
TASKS = GEMM + tuple(CHAINS)
SIXTEEN_BIT = ("l1_matmul", "l1_linear_bias", "l2_gemm_bias_gelu", "l2_gemm_scale_residual")
GEMM_TUNABLES = {"BM": ("32", "64", "128"), "BN": ("32", "64", "128"), "BK": ("16", "32", "64"),
                 "GEMM_THREADS": ("128", "256"), "GEMM_STAGES": ("2", "3", "4")}  # fmt: skip
PTX = ("mma.sync", "ldmatrix", "cp.async", "cvt.rna.tf32")  # the NVIDIA tensor-core PTX


def candidate(name: str) -> Candidate:
    got = lowered(name)
    assert isinstance(got, Candidate), got
    return got
