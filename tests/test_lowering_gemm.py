"""The offline translator's GEMM lowering (agents/lowering/gemm.py) and chained Level-2 graphs
(agents/lowering/chain.py), on the test tasks of tests/data/lowering/.

Without a GPU:
- each GEMM and chain task lowers, passes the static screen (its only warning: the PTX mma.sync
  under the NVIDIA guard is inline asm) and declares the GEMM tunables; chains launch one kernel
  per segment, with the GEMM's pointwise epilogue fused into it;
- l1_matmul at every tile (fp32: the FMA path; bf16: the matrix-core paths) and a sample for the
  other tasks compile for gfx942 without spills, with MFMA instructions in the ISA exactly for
  the 16-bit variants; a sample of every task compiles with nvcc for sm_90 through the HIP
  layer, with cp.async, ldmatrix and mma.sync in the PTX exactly for 16-bit operands and for
  fp32 ones with nn.Linear's [N, K] weight (3xTF32), and ptxas reports no spills for the
  tensor-core kernels;
- (tests/test_lowering_gemm_cpu.py: the kernels computing the reference on CPU threads;)
- unsupported graphs come back as one line naming the op; model.py refuses operands whose inner
  sizes differ.
With a GPU (marked): each lowered candidate, and a sample of GEMM configurations, is `ok`
through verifier.pipeline.evaluate_many.
"""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest
import torch
from gemm_emulation import PRIMITIVES
from lowering_gemm_support import (
    CHAINS,
    GEMM,
    GEMM_TUNABLES,
    PTX,
    SIXTEEN_BIT,
    TASKS,
    candidate,
)
from test_lowering import (
    import_model,
    task_named,
)

from hipevolve.agents.lowering.lower import Unlowered, lower
from hipevolve.core.candidate import Candidate
from hipevolve.core.reference import load_module
from hipevolve.evolution.offline.tunables import (
    configuration_key,
    configurations,
    parse_tunables,
    with_values,
)
from hipevolve.problems import load_task_folder

# ----------------------------------------------------------------------------- lowering


@pytest.mark.parametrize("name", TASKS)
def test_gemm_task_lowers_and_passes_the_static_screen_with_only_the_ptx_asm_noted(name):
    from hipevolve.verifier.screen.screening import screen

    got = candidate(name)
    assert got.format == "native" and "from hipevolve.runtime import kernels" in got.python_source
    screening = screen(got)
    assert screening.passed, screening.flags
    assert {f.check for f in screening.warnings} <= {"inline-asm"}
    lines = got.hip_source.splitlines()
    for f in screening.warnings:  # the asm is PTX, among the primitives of the NVIDIA block
        before = "\n".join(lines[: f.line])
        assert any(op in "\n".join(lines[f.line - 1 : f.line + 2]) for op in PTX)
        assert before.rfind("#if GEMM_MATRIX_CORES == 1") > before.rfind("#elif")
        assert before.rfind(PRIMITIVES[0]) > before.rfind(PRIMITIVES[1])


@pytest.mark.parametrize("name", TASKS)
def test_lowered_gemm_declares_tile_and_thread_tunables(name):
    tunables = {t.name: t.values for t in parse_tunables(candidate(name).hip_source)}
    assert {k: tunables[k] for k in GEMM_TUNABLES} == GEMM_TUNABLES
    chain = name in CHAINS
    assert ("ROWS" in tunables) == chain  # the row kernels of a chain keep their own tunables


def launchers(c: Candidate) -> list[str]:
    return re.findall(r'extern "C" hipError_t (\w+)\(', c.hip_source)


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chain_launches_one_kernel_per_segment_in_order_with_the_epilogue_fused(name):
    c = candidate(name)
    names = launchers(c)
    assert names == [f"lowered_{name}_v0_s{j}" for j in range(len(CHAINS[name]))]
    calls = re.findall(r"kernels\.(\w+)\(", c.python_source)
    assert calls == names
    kernels = re.split(r'extern "C"', c.hip_source)
    for launcher, pattern in zip(names, CHAINS[name], strict=True):
        body = next(k for k in kernels if f"{launcher}_kernel(" in k)
        assert ("gemm_block<" in body) == (pattern == "lower_gemm")
    if name == "l2_gemm_relu_layernorm":  # bias and relu happen in the GEMM's registers
        gemm = next(k for k in kernels if f"{names[0]}_kernel(" in k)
        assert "fmaxf(" in gemm and "in1[c]" in gemm
    assert "buf0 = torch.empty(" in c.python_source


def test_single_gemm_tasks_are_one_kernel_per_dtype_variant():
    assert launchers(candidate("l1_matmul")) == ["lowered_l1_matmul_v0", "lowered_l1_matmul_v1"]
    for name in GEMM[1:]:
        assert launchers(candidate(name)) == [f"lowered_{name}_v0"]


def test_linear_reads_the_weight_transposed_and_matmul_reads_it_as_stored():
    # the fourth argument is LONG_K, the launcher's choice of the two-level sum
    assert "gemm_block<DT_BF16, DT_BF16, true, LONG_K>" in candidate("l1_linear_bias").hip_source
    source = candidate("l1_matmul").hip_source
    assert "gemm_block<DT_F32, DT_F32, false, LONG_K>" in source
    assert "gemm_block<DT_BF16, DT_BF16, false, LONG_K>" in source


def write_task(folder: Path, forward: str, init: str = "", inputs: str = "[torch.randn(4, 8)]"):
    folder.mkdir()
    (folder / "reference.py").write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n{init}\n"
        f"    def forward(self, x):\n        return {forward}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\ndef get_init_inputs():\n    return []\n"
    )
    (folder / "task.toml").write_text(
        f'name = "{folder.name}"\ndescription = "t"\nfamily = "gemm"\n'
        '[tolerance]\nkind = "kernelbench"\n[[cases]]\nname = "a"\nsmall = true\n'
    )
    return load_task_folder(folder, "user")


@pytest.mark.parametrize(
    "forward,init,inputs,op",
    [
        ("self.conv(x)", "        self.conv = nn.Conv2d(3, 4, 3)\n", "[torch.randn(1, 3, 8, 8)]",
         "convolution"),
        ("torch.bmm(x, x)", "", "[torch.randn(2, 4, 4)]", "bmm"),
    ],
)  # fmt: skip
def test_unsupported_graph_is_still_refused_in_one_line_naming_the_op(
    forward, init, inputs, op, tmp_path
):
    got = lower(write_task(tmp_path / "t", forward, init, inputs))
    assert isinstance(got, Unlowered) and op in got.reason and "\n" not in got.reason


def test_model_refuses_operands_with_different_inner_sizes_before_any_launch(tmp_path):
    task = task_named("l2_gemm_bias_gelu")
    module = import_model(candidate("l2_gemm_bias_gelu"), tmp_path)
    reference = load_module(task.reference)
    case = task.small_cases[0]
    torch.manual_seed(0)
    model = module.ModelNew(*reference.get_init_inputs(**case.init))
    x = torch.zeros(4, case.init["k"] + 1, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="inner sizes"):
        model(x)


# ----------------------------------------------------------------------------- compiles


def grid(name: str) -> list[dict[str, str]]:
    return list(configurations(parse_tunables(candidate(name).hip_source)))


NVIDIA_ONLY = ("GEMM_STAGES",)  # tunables that only the NVIDIA tensor-core path reads


def amd_grid(name: str) -> list[dict[str, str]]:
    """Every tile and thread count at the deepest BK (the most LDS and the longest unrolled
    MFMA sequence), the NVIDIA-only tunables as written (the AMD code is the same text at each
    of their values)."""
    deepest = max(GEMM_TUNABLES["BK"], key=int)
    return [c for c in grid(name) if c["BK"] == deepest
            and all(c[t] == default(name, t) for t in NVIDIA_ONLY)]  # fmt: skip


def default(name: str, tunable: str) -> str:
    return re.search(rf"^#define {tunable} (\w+)$", candidate(name).hip_source, re.M)[1]


def sources(full: tuple[str, ...], sampled: tuple[str, ...], k: int = 3) -> dict[str, str]:
    """amd_grid of the `full` tasks; for the others their own
    configuration and k random GEMM configurations (fixed), with the other tunables as
    written."""
    out = {}
    for name in full + sampled:
        source = candidate(name).hip_source
        if name in full:
            chosen = amd_grid(name)
        else:
            gemm = [dict(zip(GEMM_TUNABLES, v, strict=True)) for v in _product()]
            chosen = [{}] + random.Random(name).sample(gemm, k)
        for config in chosen:
            out[f"{name}@{configuration_key(config) if config else 'own'}"] = with_values(
                source, config
            )
    return out


def _product():
    import itertools

    return itertools.product(*GEMM_TUNABLES.values())


FULL = ("l1_matmul",)  # fp32 and bf16 variants: every path at each of 18 tiles, BK 64
SAMPLED = tuple(n for n in TASKS if n not in FULL)


def test_nvidia_only_tunables_appear_only_in_the_nvidia_code():
    """What lets the gfx942 sweep below hold GEMM_STAGES fixed: outside its definition it is
    read only under the NVIDIA platform guard (the tensor-core path and the launch size)."""
    source = candidate("l1_matmul").hip_source
    lines = source.splitlines()
    for tunable in NVIDIA_ONLY:
        uses = [i for i, line in enumerate(lines) if re.search(rf"\b{tunable}\b", line)
                and not line.lstrip().startswith(("#define", "//"))]  # fmt: skip
        assert uses
        for i in uses:
            before = "\n".join(lines[:i])
            nvidia = max(before.rfind("#if GEMM_MATRIX_CORES == 1"),
                         before.rfind("#if defined(__HIP_PLATFORM_NVIDIA__)"))  # fmt: skip
            assert nvidia > max(before.rfind("#elif"), before.rfind("#else"),
                                before.rfind("#endif")), lines[i]  # fmt: skip


def test_a_sample_of_gemm_configurations_of_every_task_compiles_with_nvcc(tmp_path):
    """Each task at its own configuration and two sampled GEMM configurations."""
    from test_tunable_seeds import assert_all_compile, nvcc_compiler

    assert_all_compile(sources((), TASKS, k=2), nvcc_compiler(), tmp_path)


def ptxas_report(source: str, folder: Path) -> dict[str, dict[str, int]]:
    """kernel -> registers, spill bytes, stack bytes, from nvcc -Xptxas -v for sm_90."""
    nvidia_layer = pytest.importorskip("hipevolve.verifier.build.nvidia")
    nvcc = nvidia_layer.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    include = Path(nvidia_layer.__file__).parent / "hip_nvidia" / "include"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.hip").write_text(source)
    argv = [str(nvcc), "-x", "cu", "-cubin", "-O3", "-std=c++17", "--expt-relaxed-constexpr",
            "-gencode=arch=compute_90,code=sm_90", f"-I{include}", "-D__HIP_PLATFORM_NVIDIA__",
            "-Xptxas", "-v", "kernel.hip", "-o", "kernel.cubin"]  # fmt: skip
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = {}
    for kernel, stack, stores, loads, registers in re.findall(
        r"Function properties for (\w+)\s+(\d+) bytes stack frame, (\d+) bytes spill stores, "
        r"(\d+) bytes spill loads\s+ptxas info\s+: Used (\d+) registers",
        done.stderr,
    ):
        report[kernel] = {"stack": int(stack), "spills": int(stores) + int(loads),
                          "registers": int(registers)}  # fmt: skip
    assert report, done.stderr[-2000:]
    return report


NVCC_SPILL_SAMPLE = [{}, {"BK": "64", "GEMM_STAGES": "3"}, {"GEMM_THREADS": "256"},
                     {"BM": "64", "BN": "128", "BK": "64", "GEMM_THREADS": "128"}]  # fmt: skip


@pytest.mark.parametrize("name", (*SIXTEEN_BIT, "l2_matmul_relu", "l2_gemm_softmax"))
def test_tensor_core_kernels_assemble_for_sm90_without_spills(name, tmp_path):
    """ptxas for sm_90 at the default configuration and a few others: no spills, no stack
    (l2_matmul_relu: 3xTF32, whose split fragments take the most registers)."""
    source = candidate(name).hip_source
    full = ("l1_matmul", "l2_matmul_relu")
    configs = NVCC_SPILL_SAMPLE if name in full else NVCC_SPILL_SAMPLE[:1]
    for i, config in enumerate(configs):
        for kernel, facts in ptxas_report(with_values(source, config), tmp_path / str(i)).items():
            assert facts["spills"] == 0 and facts["stack"] == 0, (config, kernel, facts)


# kernel (by its name) -> the mma.sync shape its sm_90 PTX must use, None: no tensor cores
SM90_MMA = {
    "lowered_l1_matmul_v0": None,  # fp32 with a [K, N] B: the FMA path
    "lowered_l1_matmul_v1": "m16n8k16.row.col.f32.bf16",
    "lowered_l2_gemm_scale_residual_v0": "m16n8k16.row.col.f32.f16",
    "lowered_l2_gemm_softmax_v0_s0": "m16n8k8.row.col.f32.tf32",  # fp32 linear: 3xTF32
    "lowered_l2_gemm_softmax_v0_s1": None,  # the row softmax
}


def test_tensor_cores_take_16_bit_operands_and_fp32_linear_weights_in_the_nvidia_ptx(tmp_path):
    """The device pass for sm_90 takes the tensor-core path (cp.async pipeline, ldmatrix,
    mma.sync) for bf16/f16 operands, and for fp32 ones whose B is [N, K] in memory (3xTF32:
    three mma per product, and cvt.rna.tf32 to split the operands); an fp32 [K, N] B stays on
    the FMA path."""
    nvidia_layer = pytest.importorskip("hipevolve.verifier.build.nvidia")
    nvcc = nvidia_layer.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    include = Path(nvidia_layer.__file__).parent / "hip_nvidia" / "include"
    seen = set()
    for name in ("l1_matmul", "l2_gemm_scale_residual", "l2_gemm_softmax"):
        (tmp_path / "kernel.hip").write_text(candidate(name).hip_source)
        argv = [str(nvcc), "-x", "cu", "-ptx", "-O3", "-std=c++17", "--expt-relaxed-constexpr",
                "-arch=sm_90", f"-I{include}", "-D__HIP_PLATFORM_NVIDIA__", "kernel.hip",
                "-o", "kernel.ptx"]  # fmt: skip
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        ptx = (tmp_path / "kernel.ptx").read_text()
        for entry in re.split(r"\.visible \.entry ", ptx)[1:]:
            kernel = re.search(r"(lowered_\w+?)_kernel", entry.split("(")[0])[1]
            shape = SM90_MMA[kernel]
            seen.add(kernel)
            shapes = set(re.findall(r"mma\.sync\.aligned\.(m16n8k\d+\.row\.col\.f32\.\w+)", entry))
            assert shapes == ({shape} if shape else set()), (kernel, shapes)
            for op in ("ldmatrix.sync.aligned", "cp.async.cg"):
                assert (op in entry) == bool(shape), (kernel, op)
            assert ("cvt.rna.tf32.f32" in entry) == bool(shape and "tf32" in shape), kernel
    assert seen == set(SM90_MMA)


@pytest.mark.amd_static
def test_l1_matmul_at_every_tile_and_a_sample_compile_for_gfx942_without_spills(tmp_path):
    from test_tunable_seeds import assert_gfx942_clean

    assert_gfx942_clean(sources(FULL, SAMPLED, k=2), tmp_path)


@pytest.mark.amd_static
@pytest.mark.parametrize("name", TASKS)
def test_mfma_is_in_the_gfx942_isa_exactly_for_sixteen_bit_operands(name, tmp_path):
    from hipevolve.core.config import VerifierSettings
    from hipevolve.verifier.build.amd_static import find_toolchain
    from hipevolve.verifier.static_facts import static_analysis

    toolchain = find_toolchain()
    if toolchain is None or "gfx942" not in toolchain.targets:
        pytest.skip("no AMD static toolchain for gfx942 (scripts/install_amd_toolchain.sh)")
    source = candidate(name).hip_source
    expected = {}  # kernel -> whether it multiplies 16-bit operands on matrix cores
    # A GEMM kernel is a template on LONG_K (the FMA path's two-level sum from K = GEMM_LONG_K
    # on): both instantiations are built, and the matrix-core paths ignore it.
    built = set()
    for chunk in source.split("__global__ void __launch_bounds__(")[1:]:
        kernel = re.search(r"\n(\w+_kernel)\(", chunk)[1]
        expected[kernel] = bool(re.search(r"gemm_block<(DT_BF16, DT_BF16|DT_F16, DT_F16)", chunk))
        gemm = "gemm_block<" in chunk.split("\n}\n")[0]
        built |= {(kernel, b) for b in ("true", "false")} if gemm else {(kernel, None)}
    settings = VerifierSettings(cache_dir=tmp_path, amd_targets=("gfx942",))
    result = static_analysis(source, settings)
    assert not result.error and result.facts, result.error or result.note
    found = {}
    for f in result.facts:
        readable = f.kernel.split("(")[0]
        kernel, long_k = re.fullmatch(r"(?:void )?(\w+)(?:<(true|false)>)?", readable).groups()
        found[kernel, long_k] = f.mfma
    assert set(found) == built
    for (kernel, long_k), mfma in found.items():
        assert (mfma > 0) == expected[kernel], (kernel, long_k, mfma)
    assert any(expected.values()) == (name in SIXTEEN_BIT)


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("name", TASKS)
def test_lowered_gemm_candidate_is_ok_through_the_verifier_pipeline(name, tmp_path):
    from hipevolve.core.config import VerifierSettings
    from hipevolve.verifier.build.backends import gpu_backend
    from hipevolve.verifier.pipeline import evaluate_many

    settings = VerifierSettings(cache_dir=tmp_path, trials=10)
    [evaluation] = evaluate_many([candidate(name)], task_named(name), settings, gpu_backend())
    assert evaluation.ok, (evaluation.status, evaluation.message, evaluation.mismatch,
                           evaluation.compile_log)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["l1_matmul", "l2_gemm_scale_residual"])
def test_sampled_gemm_configurations_are_ok_through_the_verifier_pipeline(name, tmp_path):
    from hipevolve.core.config import VerifierSettings
    from hipevolve.verifier.build.backends import gpu_backend
    from hipevolve.verifier.pipeline import evaluate_many

    c = candidate(name)
    every = grid(name)
    chosen = [every[0], every[-1], *random.Random(name).sample(every[1:-1], 2)]
    candidates = [c.model_copy(update={"hip_source": with_values(c.hip_source, config),
                                       "name": configuration_key(config), "origin": None})
                  for config in chosen]  # fmt: skip
    settings = VerifierSettings(cache_dir=tmp_path, trials=10)
    for config, evaluation in zip(
        chosen, evaluate_many(candidates, task_named(name), settings, gpu_backend()), strict=True
    ):
        assert evaluation.ok, (configuration_key(config), evaluation.status, evaluation.message,
                               evaluation.mismatch)  # fmt: skip
