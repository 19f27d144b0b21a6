"""The CUDA build's static facts (verifier/build/cuda_static.py): where the AMD toolchain is
absent, the grid's occ, lds, vec and mfma axes come from the nvcc build that runs, flagged by
their target (sm_90). The compiles are real (nvcc, sm_90); no GPU is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipevolve.core.candidate import load_candidate
from hipevolve.core.config import load_settings
from hipevolve.core.evaluation import StaticFacts
from hipevolve.evolution.descriptors import axes_source, cell_of
from hipevolve.problems import get_task
from hipevolve.verifier.build import amd_static, cuda_static
from hipevolve.verifier.build.compile import Compiler
from hipevolve.verifier.build.nvidia import find_nvcc, nvcc_command, nvcc_version
from hipevolve.verifier.build.rocm_limits import gate

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "prompts" / "examples" / "softmax_native"
TILE_GEMM = ROOT / "tests" / "data" / "tile_gemm.hip"
NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed here")


def library_argv() -> list[str]:
    return nvcc_command(NVCC, Path("kernel.hip"), Path("lib.so"), arch="sm_90", report=True)


def fact_axes(cell: tuple[str, ...]) -> tuple[str, ...]:
    return cell[:4]  # occ, lds, vec, mfma


@pytest.fixture(scope="module")
def softmax_facts(tmp_path_factory) -> list[StaticFacts]:
    source = (SOFTMAX / "kernel.hip").read_text()
    return cuda_static.analyze(source, library_argv(), tmp_path_factory.mktemp("softmax"))


@needs_nvcc
def test_the_softmax_example_built_by_nvcc_fills_every_fact_axis(softmax_facts):
    assert softmax_facts and {f.target for f in softmax_facts} == {"sm_90"}
    assert {f.platform for f in softmax_facts} == {"cuda"}
    cell = cell_of(softmax_facts)
    assert not any(label.endswith(":?") for label in fact_axes(cell)), cell
    # float4 and 8 x bf16 loads (ld.global.nc.v4): LDG.E.128; no tensor cores in a softmax.
    assert fact_axes(cell)[2:] == ("vec:128", "mfma:no")
    assert axes_source(softmax_facts) == "CUDA build (sm_90)"
    for f in softmax_facts:
        assert f.vgprs > 0 and f.lds_bytes > 0 and 1 <= f.occupancy <= 16
        assert "softmax_" in f.kernel and "(" in f.kernel  # demangled where c++filt is


@needs_nvcc
def test_a_tensor_core_kernel_reads_mfma_yes(tmp_path):
    facts = cuda_static.analyze(TILE_GEMM.read_text(), library_argv(), tmp_path)
    cell = cell_of(facts)
    assert "mfma:yes" in cell and not any(label.endswith(":?") for label in fact_axes(cell))


@needs_nvcc
def test_prepare_on_cuda_without_the_amd_toolchain_records_the_cuda_builds_facts(
    tmp_path, monkeypatch
):
    """The pipeline's CPU stages for the cuda backend on a machine without the AMD static
    toolchain: the library builds, its facts are the CUDA build's (cached: a second prepare
    compiles nothing), the AMD gate ignores them."""
    from hipevolve.verifier import pipeline
    from hipevolve.verifier.build import backends

    compiler = Compiler(name="cuda", argv=tuple(library_argv()), toolchain=nvcc_version(NVCC))
    monkeypatch.setattr(backends, "compiler_for", lambda backend: compiler)
    monkeypatch.setattr(amd_static, "find_toolchain", lambda: None)
    settings = load_settings().verifier.model_copy(update={"cache_dir": tmp_path})
    candidate = load_candidate(SOFTMAX)
    prepared = pipeline.prepare(candidate, get_task("softmax"), settings, "cuda")
    assert prepared.done is None and prepared.library is not None
    assert prepared.static and {f.target for f in prepared.static} == {"sm_90"}
    assert not any(label.endswith(":?") for label in fact_axes(cell_of(prepared.static)))
    calls = []
    monkeypatch.setattr(cuda_static, "analyze", lambda *a, **k: calls.append(a) or [])
    again = pipeline.prepare(candidate, get_task("softmax"), settings, "cuda")
    assert again.static == prepared.static and calls == []


@needs_nvcc
def test_the_library_build_reads_the_facts_a_facts_compile_gives_in_one_compile(
    tmp_path, monkeypatch
):
    """The cuda build keeps ptxas's report and the PTX: prepare records the same facts a
    separate facts compile gives, and runs none (a GDN child's second compile cost 3 s)."""
    from hipevolve.verifier import pipeline
    from hipevolve.verifier.build import backends

    source = (SOFTMAX / "kernel.hip").read_text()
    apart = cuda_static.analyze(source, library_argv(), tmp_path / "apart")
    compiler = Compiler(name="cuda", argv=tuple(library_argv()), toolchain=nvcc_version(NVCC))
    monkeypatch.setattr(backends, "compiler_for", lambda backend: compiler)
    monkeypatch.setattr(amd_static, "find_toolchain", lambda: None)
    monkeypatch.setattr(cuda_static, "analyze", lambda *a, **k: pytest.fail("a second compile"))
    settings = load_settings().verifier.model_copy(update={"cache_dir": tmp_path / "cache"})
    prepared = pipeline.prepare(load_candidate(SOFTMAX), get_task("softmax"), settings, "cuda")
    assert prepared.done is None and prepared.static
    assert sorted(prepared.static, key=lambda f: f.kernel) == sorted(apart, key=lambda f: f.kernel)


@needs_nvcc
def test_a_library_cached_without_its_facts_gets_them_from_a_facts_compile(tmp_path, monkeypatch):
    """A cache written before the build kept its facts: the library is reused, and the facts
    come from the facts compile, once."""
    from hipevolve.verifier import pipeline
    from hipevolve.verifier.build import backends

    compiler = Compiler(name="cuda", argv=tuple(library_argv()), toolchain=nvcc_version(NVCC))
    monkeypatch.setattr(backends, "compiler_for", lambda backend: compiler)
    monkeypatch.setattr(amd_static, "find_toolchain", lambda: None)
    settings = load_settings().verifier.model_copy(update={"cache_dir": tmp_path})
    first = pipeline.prepare(load_candidate(SOFTMAX), get_task("softmax"), settings, "cuda")
    kept = list((tmp_path / "lib").rglob("*.facts.json"))
    assert len(kept) == 1 and first.static
    kept[0].unlink()
    calls = []
    analyze = cuda_static.analyze
    monkeypatch.setattr(cuda_static, "analyze", lambda *a, **k: calls.append(1) or analyze(*a, **k))
    again = pipeline.prepare(load_candidate(SOFTMAX), get_task("softmax"), settings, "cuda")
    assert again.library == first.library and again.static == first.static and calls == [1]


@needs_nvcc
def test_a_candidate_that_does_not_build_is_a_compile_error_without_cuda_facts(
    tmp_path, monkeypatch
):
    """A library build that fails: the verdict is the library's (compile_error, its log, no
    ptxas report in it), and no facts of a source that does not build are recorded."""
    from hipevolve.core.evaluation import Status
    from hipevolve.verifier import pipeline
    from hipevolve.verifier.build import backends

    compiler = Compiler(name="cuda", argv=tuple(library_argv()), toolchain=nvcc_version(NVCC))
    monkeypatch.setattr(backends, "compiler_for", lambda backend: compiler)
    monkeypatch.setattr(amd_static, "find_toolchain", lambda: None)
    settings = load_settings().verifier.model_copy(update={"cache_dir": tmp_path})
    candidate = load_candidate(SOFTMAX)
    broken = candidate.hip_source.replace("__global__", "__global__ not_a_type", 1)
    candidate = candidate.model_copy(update={"hip_source": broken})
    prepared = pipeline.prepare(candidate, get_task("softmax"), settings, "cuda")
    assert prepared.done is not None and prepared.done.status is Status.compile_error
    assert prepared.done.compile_log and not prepared.done.static
    assert "ptxas info" not in prepared.done.compile_log


@needs_nvcc
@pytest.mark.skipif(amd_static.find_toolchain() is None, reason="no AMD static toolchain here")
def test_with_the_amd_toolchain_the_facts_stay_amd(tmp_path, monkeypatch):
    from hipevolve.verifier import pipeline

    compiler = Compiler(name="cuda", argv=tuple(library_argv()), toolchain=nvcc_version(NVCC))
    settings = load_settings().verifier.model_copy(update={"cache_dir": tmp_path})
    found = pipeline.static_analysis((SOFTMAX / "kernel.hip").read_text(), settings,
                                     compiler=compiler)  # fmt: skip
    assert found.facts and {f.platform for f in found.facts} == {"amd"}


def test_the_facts_command_is_the_library_command_without_its_link_steps():
    argv = nvcc_command("/usr/bin/nvcc", Path("kernel.hip"), Path("lib.so"), arch="sm_90a")
    cmd = cuda_static.facts_command(argv)
    for gone in ("-shared", "-fPIC", "-cudart", "static", "-lineinfo", "lib.so"):
        assert gone not in cmd
    shaping = [a for a in argv if a.startswith(("-gencode", "-I", "-D", "-O", "-std", "--expt"))]
    assert all(a in cmd for a in shaping)
    assert cmd[-6:] == ["-cubin", "--resource-usage", "-keep", "-o", "kernel.cubin", "kernel.hip"]
    assert cuda_static.architecture(cmd) == "sm_90a"
    with pytest.raises(ValueError):
        cuda_static.facts_command(["g++", "-shared", "kernel.hip", "-o", "lib.so"])


PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z4fastPKfPf' for 'sm_90'
ptxas info    : Function properties for _Z4fastPKfPf
    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 49152 bytes smem, 368 bytes cmem[0]
ptxas info    : Compiling entry function 'plain' for 'sm_90'
ptxas info    : Function properties for plain
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 360 bytes cmem[0]
"""


def test_ptxas_resource_report_is_read_per_kernel():
    assert cuda_static.parse_resource_usage(PTXAS) == {
        "_Z4fastPKfPf": {"registers": 255, "smem": 49152, "stack": 16, "spill_stores": 8,
                         "spill_loads": 8},
        "plain": {"registers": 10, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0},
    }  # fmt: skip


PTX = """\
.visible .func  (.param .b32 func_retval0) helper(
)
{
    ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];
}
.visible .entry k(
    .param .u64 k_param_0
)
.reqntid 128, 2, 1
{
    ld.param.u64 %rd1, [k_param_0];
    @%p1 ld.global.nc.v2.bf16x2 {%r1, %r2}, [%rd1];
    ld.global.u8 %rs1, [%rd1];
    cp.async.cg.shared.global [%r3], [%rd1], 16;
    {
    ld.shared.f32 %f5, [%r3];
    }
    wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%f1}, %rd2, %rd3, 1, 1, 1, 0, 0;
    mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1}, {%r1}, {%r2}, {%f1};
}
.entry bare(
)
{
    ld.global.f64 %fd1, [%rd1];
}
"""


def test_ptx_loads_tensor_core_ops_and_launch_bounds_are_read_per_kernel():
    facts = cuda_static.ptx_facts(PTX)
    assert facts["k"] == {"threads": 256, "global_loads": {"8": 1, "64": 1, "128": 1}, "mfma": 2,
                          "lds_ops": 1}  # fmt: skip
    assert facts["bare"] == {"threads": 0, "global_loads": {"64": 1}, "mfma": 0, "lds_ops": 0}
    assert "helper" not in facts  # a .func's loads are not a kernel's


@pytest.mark.parametrize(("registers", "smem", "threads", "arch", "warps"), [
    (32, 0, 256, "sm_90", 16),  # 64 warps an SM: the hardware's limit
    (64, 0, 256, "sm_90", 8),  # 2048 registers a warp: 8 warps a scheduler
    (255, 0, 256, "sm_90", 2),  # 8192 a warp
    (57, 0, 512, "sm_90", 8),  # 2 blocks of 16 warps by registers
    (32, 100 << 10, 256, "sm_90", 4),  # 2 blocks of 101 KB in 228 KB
    (32, 100 << 10, 256, "sm_89", 0),  # 101 KB does not fit in 100 KB
    (16, 0, 32, "sm_90", 8),  # 32 one-warp blocks: the block limit
    (32, 0, 256, "sm_90a", 16),
])  # fmt: skip
def test_cuda_occupancy_is_warps_per_scheduler(registers, smem, threads, arch, warps):
    assert cuda_static.occupancy(registers, smem, threads, arch) == warps


def test_the_amd_gate_and_the_grid_put_amd_facts_first():
    cuda = StaticFacts(kernel="k", target="sm_90", vgprs=255, scratch_bytes=1 << 20,
                       lds_bytes=200 << 10, occupancy=2, mfma=1, global_loads={"128": 1})  # fmt: skip
    amd = StaticFacts(kernel="k", target="gfx942", occupancy=8, global_loads={"32": 1})
    assert gate("", [cuda]).passed  # CUDA numbers are no AMD limit
    assert cell_of([cuda, amd])[:4] == ("occ:5-8", "lds:none", "vec:<=32", "mfma:no")
    assert axes_source([cuda, amd]) == "AMD static compile (gfx942)"
    assert axes_source([]) == ""
