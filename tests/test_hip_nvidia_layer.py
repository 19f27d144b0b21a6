"""The cuda backend's HIP-to-CUDA header layer (verifier/build/hip_nvidia) and its nvcc command.

CPU tests compile with the real nvcc: one translation unit that uses every covered API group
(so COVERAGE.md is proven by compiling), the softmax worked example, and small sources using
uncovered APIs, whose errors must name them. GPU tests run the example against torch.softmax
and check the warp intrinsics against HIP's lane rules.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
import torch

from hipevolve.core.errors import UserError
from hipevolve.runtime import Kernels, kernels
from hipevolve.verifier.build import nvidia as nvidia_layer

REPO = Path(__file__).resolve().parents[1]
HIP_DATA = REPO / "tests" / "data" / "hip"
EXAMPLE = REPO / "prompts" / "examples" / "softmax_native"
COVERAGE_MD = REPO / "verifier" / "build" / "hip_nvidia" / "COVERAGE.md"

NVCC = nvidia_layer.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) not installed")


def _arch() -> str:
    """The GPU's own architecture when there is one, else sm_90 (H100/H200)."""
    if torch.cuda.is_available() and not torch.version.hip:
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    return "sm_90"


def _nvcc(source: Path, output: Path) -> subprocess.CompletedProcess:
    argv = nvidia_layer.nvcc_command(NVCC, source, output, arch=_arch())
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def _build(source: Path, output: Path) -> Path:
    result = _nvcc(source, output)
    assert result.returncode == 0, result.stdout + result.stderr
    return output


@pytest.fixture(scope="module")
def example_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if NVCC is None:
        pytest.skip("nvcc (CUDA toolkit) not installed")
    return _build(EXAMPLE / "kernel.hip", tmp_path_factory.mktemp("softmax") / "lib.so")


def _load_model_module():
    spec = importlib.util.spec_from_file_location("softmax_native_model", EXAMPLE / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- the command and the layer's files ----------------------------------------------------


def test_nvcc_command_builds_a_shared_library_for_one_arch_through_the_layer():
    argv = nvidia_layer.nvcc_command("nvcc", Path("kernel.hip"), Path("lib.so"), arch="sm_90")
    assert argv[0] == "nvcc"
    assert argv[1:3] == ["-x", "cu"]
    for flag in (
        "-shared",
        "-O3",
        "-std=c++17",
        "-D__HIP_PLATFORM_NVIDIA__",
        f"-I{nvidia_layer.include_dir()}",
        "-gencode=arch=compute_90,code=sm_90",
    ):
        assert flag in argv
    assert argv[argv.index("-Xcompiler") + 1] == "-fPIC"
    assert argv[argv.index("-o") + 1] == "lib.so"
    assert argv[-1] == "kernel.hip"
    assert sum(a.startswith("-gencode") for a in argv) == 1


def test_nvcc_command_keeps_arch_suffixes():
    argv = nvidia_layer.nvcc_command("nvcc", Path("k.hip"), Path("k.so"), arch="sm_90a")
    assert "-gencode=arch=compute_90a,code=sm_90a" in argv


@pytest.mark.parametrize("arch", ["gfx942", "sm90", "sm_90; rm -rf /", ""])
def test_nvcc_command_rejects_a_non_nvidia_arch(arch: str):
    with pytest.raises(UserError):
        nvidia_layer.nvcc_command("nvcc", Path("k.hip"), Path("k.so"), arch=arch)


def test_every_header_coverage_md_names_exists_in_the_include_dir():
    named = set(re.findall(r"hip/[\w/]+\.h\b", COVERAGE_MD.read_text()))
    assert "hip/hip_runtime.h" in named
    missing = [h for h in sorted(named) if not (nvidia_layer.include_dir() / h).is_file()]
    # Headers the page lists as not covered must be absent, all others present.
    not_covered = {"hip/hip_bfloat16.h", "hip/hip_ext.h"}
    assert sorted(set(missing) - not_covered) == []
    assert all(not (nvidia_layer.include_dir() / h).exists() for h in not_covered)


@needs_nvcc
def test_nvcc_version_is_the_full_release_number():
    assert re.fullmatch(r"\d+\.\d+\.\d+", nvidia_layer.nvcc_version(NVCC))


# ---- what is covered compiles; what is not is named ----------------------------------------


@needs_nvcc
def test_every_covered_api_group_compiles_without_warnings(tmp_path: Path):
    result = _nvcc(HIP_DATA / "coverage.hip", tmp_path / "coverage.so")
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert "warning" not in log.lower(), log
    assert (tmp_path / "coverage.so").stat().st_size > 0


LAUNCH_BOUNDS_SOURCE = """
#include <hip/hip_runtime.h>
template <int A, int B, int C> struct Sum { static constexpr int value = A + B + C; };
__global__ void __launch_bounds__(256, 2) hip_two(float* y) { y[threadIdx.x] = 1.0f; }
__global__ void __launch_bounds__(128) one(float* y) { y[threadIdx.x] = 1.0f; }
__global__ void __launch_bounds__(128, 4, 1) cuda_three(float* y) { y[threadIdx.x] = 1.0f; }
template <int N>
__global__ void __launch_bounds__(Sum<N, 32, 32>::value) commas(float* y) { y[0] = 1.0f; }
template __global__ void commas<64>(float*);
"""


@needs_nvcc
def test_launch_bounds_keeps_the_thread_limit_and_drops_hips_waves_per_eu(tmp_path: Path):
    source = tmp_path / "bounds.hip"
    source.write_text(LAUNCH_BOUNDS_SOURCE)
    ptx = tmp_path / "bounds.ptx"
    argv = [
        NVCC,
        "-x",
        "cu",
        "-ptx",
        "-arch=sm_90",
        f"-I{nvidia_layer.include_dir()}",
        "-D__HIP_PLATFORM_NVIDIA__",
        "-o",
        str(ptx),
        str(source),
    ]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    entries = {
        re.search(r"_Z\w*?(hip_two|one|cuda_three|commas)", chunk).group(1): chunk
        for chunk in ptx.read_text().split(".entry ")[1:]
    }
    assert ".maxntid 256, 1, 1" in entries["hip_two"]
    # HIP's 2 (waves per SIMD) must not become CUDA's "2 blocks per SM" register cap.
    assert ".minnctapersm" not in entries["hip_two"]
    assert ".maxntid 128, 1, 1" in entries["one"]
    assert ".minnctapersm 4" in entries["cuda_three"]
    assert ".maxntid 128, 1, 1" in entries["commas"]


@needs_nvcc
def test_softmax_example_compiles_through_the_layer(example_library: Path):
    assert example_library.stat().st_size > 0


UNCOVERED = {
    "hipGraphCreate": (
        "#include <hip/hip_runtime.h>\n"
        'extern "C" hipError_t go() { return hipGraphCreate(nullptr, 0); }\n',
        'identifier "hipGraphCreate" is undefined',
    ),
    "__builtin_amdgcn_readfirstlane": (
        "#include <hip/hip_runtime.h>\n"
        "__global__ void k(int* x) { x[0] = __builtin_amdgcn_readfirstlane(x[1]); }\n",
        'identifier "__builtin_amdgcn_readfirstlane" is undefined',
    ),
    "hipcub": ("#include <hip/hip_runtime.h>\n#include <hipcub/hipcub.hpp>\n", "hipcub/hipcub.hpp"),
    "__HIP_PLATFORM_AMD__": (
        "#define __HIP_PLATFORM_AMD__ 1\n#include <hip/hip_runtime.h>\n",
        "__HIP_PLATFORM_AMD__ defined",
    ),
}


@needs_nvcc
@pytest.mark.parametrize("api", sorted(UNCOVERED))
def test_uncovered_api_fails_to_compile_naming_it(api: str, tmp_path: Path):
    source_text, expected = UNCOVERED[api]
    source = tmp_path / "kernel.hip"
    source.write_text(source_text)
    result = _nvcc(source, tmp_path / "lib.so")
    assert result.returncode != 0
    assert expected in result.stdout + result.stderr
    assert not (tmp_path / "lib.so").exists()


# ---- the worked example's input checks (no GPU needed: they run before any launch) ---------


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: torch.randn(16), ValueError),
        (lambda: torch.randn(4, 16, dtype=torch.float16), TypeError),
        (lambda: torch.randn(16, 4).t(), ValueError),
        (lambda: torch.randn(4, 16), ValueError),  # a CPU tensor
    ],
    ids=["1-D", "float16", "non-contiguous", "cpu"],
)
def test_softmax_example_rejects_unsupported_inputs(make, error):
    model = _load_model_module().ModelNew()
    with pytest.raises(error):
        model(make())


# ---- on a GPU: the example is right, the intrinsics follow HIP -----------------------------


@pytest.fixture
def bound_kernels():
    """The shared runtime.kernels, restored afterwards so other tests see it unbound."""
    saved = dict(kernels.__dict__)
    yield kernels
    kernels.__dict__.clear()
    kernels.__dict__.update(saved)


def _masked_rows(x: torch.Tensor) -> torch.Tensor:
    """Rows that catch -inf handling: all -inf (NaN, as torch), a -inf prefix, and a single
    finite value near -100 among -inf (threads holding only -inf must contribute 0)."""
    x = x.clone()
    x[0] = float("-inf")
    x[1, : x.shape[1] // 2] = float("-inf")
    x[2] = float("-inf")
    x[2, 7] = -100.0
    return x


def _softmax_inputs(device: str) -> list[torch.Tensor]:
    g = torch.Generator(device=device).manual_seed(0)

    def randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)

    inputs = []
    for dtype in (torch.float32, torch.bfloat16):
        inputs += [
            randn(64, 1024, dtype=dtype) * 4,  # registers-cached path
            randn(37, 4096, dtype=dtype) * 4,
            randn(3, 151936, dtype=dtype),  # online path, vectorised
            randn(5, 20000, dtype=dtype),
            randn(6, 16384, dtype=dtype),  # bf16: the largest cached row; fp32: online
            randn(7, 1001, dtype=dtype),  # scalar path: columns not a multiple of the vector
            randn(4, 3, 333, dtype=dtype),  # 3-D input
            randn(8 * 4096 + 1, dtype=dtype)[1:].view(8, 4096),  # misaligned for 16-byte loads
            _masked_rows(randn(4, 4096, dtype=dtype)),
            _masked_rows(randn(3, 151936, dtype=dtype)),
            _masked_rows(randn(5, 1001, dtype=dtype)),
        ]
    return inputs


@pytest.mark.gpu
def test_softmax_example_matches_torch_softmax_for_fp32_and_bf16(
    example_library: Path, bound_kernels: Kernels
):
    bound_kernels.bind(example_library, (EXAMPLE / "kernel.hip").read_text())
    model = _load_model_module().ModelNew()
    inputs = _softmax_inputs("cuda")
    assert sum(x.data_ptr() % 16 != 0 for x in inputs) == 2, "one misaligned input per dtype"
    for x in inputs:
        got = model(x)
        torch.cuda.synchronize()
        want = torch.softmax(x.float(), dim=-1).to(x.dtype)
        assert got.shape == x.shape and got.dtype == x.dtype
        tol = dict(atol=1e-6, rtol=1e-4) if x.dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(
            got, want, equal_nan=True, **tol, msg=lambda m, x=x: f"{tuple(x.shape)} {x.dtype}: {m}"
        )


WARP_OPS = {"shfl": 0, "shfl_up": 1, "shfl_down": 2, "shfl_xor": 3}
WARP_ARGS = {
    "shfl": [0, 3, 13, 31, 45],
    "shfl_up": [1, 3, 7, 17],
    "shfl_down": [1, 3, 7, 17],
    "shfl_xor": [1, 5, 8, 16, 24],
}


def _hip_source_lane(op: str, lane: int, arg: int, width: int) -> int:
    """The lane whose value `lane` receives, transcribed from HIP's amd_warp_functions.h."""
    if op == "shfl":
        return (arg & (width - 1)) + (lane & ~(width - 1))
    if op == "shfl_up":
        index = lane - arg
        return lane if index < (lane & ~(width - 1)) else index
    if op == "shfl_down":
        return lane if (lane & (width - 1)) + arg >= width else lane + arg
    index = lane ^ arg
    return lane if index >= ((lane + width) & ~(width - 1)) else index


@pytest.fixture(scope="module")
def warp_kernels(tmp_path_factory: pytest.TempPathFactory) -> Kernels:
    if NVCC is None:
        pytest.skip("nvcc (CUDA toolkit) not installed")
    source = HIP_DATA / "warp_semantics.hip"
    library = _build(source, tmp_path_factory.mktemp("warp") / "lib.so")
    bound = Kernels()
    bound.bind(library, source.read_text())
    return bound


def _warp_size(warp_kernels: Kernels) -> int:
    sizes = torch.zeros(64, dtype=torch.int32, device="cuda")
    scratch = [
        torch.zeros(64, dtype=t, device="cuda")
        for t in (torch.int64, torch.int32, torch.int32, torch.int32, torch.int64)
    ]
    warp_kernels.votes(scratch[0], scratch[1], scratch[2], scratch[3], sizes, scratch[4], 64)
    return int(sizes[0])


@pytest.mark.gpu
@pytest.mark.parametrize("width", [8, 16, 32, 64, 0], ids=["w8", "w16", "w32", "w64", "default"])
def test_warp_shuffles_follow_hip_lane_rules(warp_kernels: Kernels, width: int):
    warp = _warp_size(warp_kernels)
    # Width 0 leaves the argument out (HIP's default: warpSize); wider than the warp means the
    # whole warp, which is how wave64 code behaves on 32-lane hardware under this layer.
    effective = warp if width == 0 else min(width, warp)
    threads = 2 * warp  # two warps: each must shuffle only within itself
    types = {
        "int": (torch.int32, 1000),
        "float": (torch.float32, 1000.5),
        "double": (torch.float64, 1000.5),
        "int64": (torch.int64, 1 << 40),
    }
    for op, code in WARP_OPS.items():
        for arg in WARP_ARGS[op]:
            sources = [
                t // warp * warp + _hip_source_lane(op, t % warp, arg, effective)
                for t in range(threads)
            ]
            for name, (dtype, base) in types.items():
                out = torch.full((threads,), -1, dtype=dtype, device="cuda")
                getattr(warp_kernels, f"shuffle_{name}")(code, arg, width, out, threads)
                want = torch.tensor([base + s for s in sources], dtype=dtype)
                assert torch.equal(out.cpu(), want), (op, arg, width, name, out.cpu().tolist())


@pytest.mark.gpu
def test_warp_votes_are_per_warp_and_ballot_is_64_bit(warp_kernels: Kernels):
    warp = _warp_size(warp_kernels)
    threads = 2 * warp
    ballot, active = (torch.zeros(threads, dtype=torch.int64, device="cuda") for _ in range(2))
    any_, all_, lane, size = (
        torch.zeros(threads, dtype=torch.int32, device="cuda") for _ in range(4)
    )
    warp_kernels.votes(ballot, any_, all_, lane, size, active, threads)
    for t in range(threads):
        first = t // warp * warp
        members = range(first, first + warp)
        want_ballot = sum(1 << (m - first) for m in members if m % 3 == 0)
        assert int(ballot[t]) & ((1 << 64) - 1) == want_ballot
        assert bool(any_[t]) == (5 in members)
        assert bool(all_[t]) == all(m < 40 for m in members)
        assert int(lane[t]) == t % warp
        assert int(size[t]) == warp
        assert int(active[t]) & 0xFFFFFFFF == (1 << min(warp, 32)) - 1
