"""The static backend: real gfx90a/gfx942 device compiles and the facts read from them.

The parser tests read compiler output captured from clang-19 here (tests/data/amd/*.txt) and run
everywhere; the `amd_static` tests compile the HIP sources in tests/data/amd/ and need the
toolchain (scripts/install_amd_toolchain.sh, or ROCm).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hipevolve.core.evaluation import StaticFacts
from hipevolve.verifier.build.amd_static import (
    AmdCompileError,
    analyze,
    device_compile_command,
    find_toolchain,
    isa_facts,
    load_width,
    parse_resource_usage,
)

DATA = Path(__file__).parent / "data" / "amd"
TARGETS = ("gfx942", "gfx90a")

# --- parsing real compiler output (no toolchain needed) ---------------------------------------


def test_resource_remarks_parse_into_per_kernel_counts():
    usage = parse_resource_usage((DATA / "remarks_gfx942.txt").read_text())
    assert usage == {
        "_Z11spill_heavyPKfPfi": {
            "sgprs": 14,
            "vgprs": 128,
            "agprs": 0,
            "scratch_bytes": 304,
            "dynamic_stack": False,
            "occupancy": 4,
            "spills_sgpr": 0,
            "spills_vgpr": 75,
            "lds_bytes": 0,
        },
        "_Z15transpose_tiledPKfPfi": {
            "sgprs": 18,
            "vgprs": 8,
            "agprs": 0,
            "scratch_bytes": 0,
            "dynamic_stack": False,
            "occupancy": 8,
            "spills_sgpr": 0,
            "spills_vgpr": 0,
            "lds_bytes": 4480,
        },
    }


def test_remark_parser_ignores_warnings_and_source_excerpts():
    text = (
        "kernel.hip:3:9: warning: unused variable 'x' [-Wunused-variable]\n"
        "    3 |   int x;\n"
        "kernel.hip:2:1: remark: Function Name: k [-Rpass-analysis=kernel-resource-usage]\n"
        "    2 | __global__ void k() {}\n"
        "kernel.hip:2:1: remark:     VGPRs: 3 [-Rpass-analysis=kernel-resource-usage]\n"
    )
    assert parse_resource_usage(text) == {"k": {"vgprs": 3}}


def test_isa_facts_count_mfma_load_widths_and_gfx90a_spill_traffic():
    facts = isa_facts((DATA / "objdump_gfx90a.txt").read_text())
    mfma = facts["_Z9mfma_tilePKDv4_sS1_PDv4_f"]
    assert mfma["mfma"] == 1
    assert mfma["global_loads"] == {"64": 2, "128": 1}
    assert mfma["instructions"] == 14  # the s_nop padding after s_endpgm is not counted
    spill = facts["_Z11spill_heavyPKfPfi"]
    # gfx90a spills through the private-segment buffer (`buffer_store_dword v1, off, ...`):
    # scratch traffic, not a buffer load the kernel's author wrote.
    assert spill["scratch_ops"] == 1 and spill["buffer_loads"] == {}
    assert spill["global_loads"] == {"32": 5}


def test_isa_facts_count_lds_reads_and_writes_on_gfx942():
    facts = isa_facts((DATA / "objdump_gfx942.txt").read_text())
    assert facts["_Z15transpose_tiledPKfPfi"]["lds_ops"] == 4  # 2 ds_write_b32, 2 ds_read_b32
    assert facts["_Z15transpose_tiledPKfPfi"]["global_loads"] == {"32": 1}


@pytest.mark.parametrize(
    ("suffix", "bits"),
    [
        ("dword", "32"),
        ("dwordx2", "64"),
        ("dwordx3", "96"),
        ("dwordx4", "128"),
        ("b32", "32"),
        ("b128", "128"),
        ("ubyte", "8"),
        ("sbyte_d16_hi", "8"),
        ("u8", "8"),
        ("ushort", "16"),
        ("short_d16_hi", "16"),
        ("d16_b16", "16"),
        ("lds_dword", "32"),
        ("format_xyzw", "format"),
    ],
)
def test_load_width_reads_cdna_and_rdna_mnemonics(suffix, bits):
    assert load_width(suffix) == bits


# --- compiling for gfx942 and gfx90a -------------------------------------------------------------

TOOLCHAIN = find_toolchain()
needs_toolchain = pytest.mark.skipif(
    TOOLCHAIN is None,
    reason="no AMD device toolchain: run scripts/install_amd_toolchain.sh (or install ROCm)",
)


@pytest.fixture(scope="module")
def facts_of(tmp_path_factory):
    """(source file, target) -> its single kernel's StaticFacts, compiled once per module."""
    cache: dict[tuple[str, str], StaticFacts] = {}

    def get(name: str, target: str) -> StaticFacts:
        if (name, target) not in cache:
            work = tmp_path_factory.mktemp(f"{Path(name).stem}-{target}")
            facts = analyze((DATA / name).read_text(), target, work, toolchain=TOOLCHAIN)
            assert len(facts) == 1, facts
            cache[(name, target)] = facts[0]
        return cache[(name, target)]

    return get


@pytest.mark.amd_static
@needs_toolchain
def test_toolchain_compiles_gfx942_and_gfx90a():
    assert set(TARGETS) <= set(TOOLCHAIN.targets), TOOLCHAIN


@pytest.mark.amd_static
@needs_toolchain
@pytest.mark.parametrize("target", TARGETS)
def test_softmax_kernel_reports_registers_and_demangled_name(facts_of, target):
    f = facts_of("softmax.hip", target)
    assert f.kernel == "softmax_rows(float const*, float*, int)"
    assert f.target == target
    assert f.vgprs > 0 and f.sgprs > 0 and f.occupancy > 0
    assert f.lds_bytes == 32 * 4  # its __shared__ float scratch[32]
    assert f.spills == 0 and f.scratch_bytes == 0


@pytest.mark.amd_static
@needs_toolchain
@pytest.mark.parametrize("target", TARGETS)
def test_lds_kernel_reports_its_exact_lds_bytes(facts_of, target):
    f = facts_of("lds_transpose.hip", target)
    assert f.lds_bytes == 32 * 33 * 4 + 64 * 4
    assert f.lds_ops >= 3  # two tile/row_sums writes, then reads back


@pytest.mark.amd_static
@needs_toolchain
@pytest.mark.parametrize("target", TARGETS)
def test_mfma_builtin_shows_as_mfma_instruction(facts_of, target):
    assert facts_of("mfma_bf16.hip", target).mfma >= 1


@pytest.mark.amd_static
@needs_toolchain
@pytest.mark.parametrize("target", TARGETS)
def test_float4_loads_become_128_bit_global_loads(facts_of, target):
    f = facts_of("float4_scale.hip", target)
    assert f.global_loads.get("128", 0) >= 1
    assert set(f.global_loads) == {"128"}


@pytest.mark.amd_static
@needs_toolchain
@pytest.mark.parametrize("target", TARGETS)
def test_register_array_under_launch_bounds_1024_spills(facts_of, target):
    f = facts_of("register_spill.hip", target)
    assert f.vgprs <= 128  # what 1024 threads per block leave each lane
    assert f.spills_vgpr > 0 and f.scratch_bytes > 0


@pytest.mark.amd_static
@needs_toolchain
@pytest.mark.parametrize("target", TARGETS)
def test_hip_bf16_types_compile(facts_of, target):
    f = facts_of("bf16_axpy.hip", target)
    assert f.kernel.startswith("axpy_bf16(__hip_bfloat16 const*")
    assert f.global_loads.get("16", 0) >= 2  # one bf16 each from x and y


@pytest.mark.amd_static
@needs_toolchain
def test_syntax_error_raises_with_a_log_naming_the_line(tmp_path):
    source = (
        "#include <hip/hip_runtime.h>\n__global__ void k(float* y) {\n  y[threadIdx.x] = 1.0f\n}\n"
    )
    with pytest.raises(AmdCompileError) as err:
        analyze(source, "gfx942", tmp_path, toolchain=TOOLCHAIN)
    assert "kernel.hip:3:" in err.value.log and "error" in err.value.log
    assert not err.value.timed_out
    assert "kernel.hip:3:" in str(err.value)  # the one-line message is the first error


@pytest.mark.amd_static
@needs_toolchain
def test_extern_c_kernels_keep_their_names_and_come_in_source_order(tmp_path):
    source = (
        "#include <hip/hip_runtime.h>\n"
        'extern "C" __global__ void second_in_alphabet(float* y) { y[threadIdx.x] = 2.0f; }\n'
        'extern "C" __global__ void a_first(float* y) { y[threadIdx.x] = 1.0f; }\n'
    )
    facts = analyze(source, "gfx942", tmp_path, toolchain=TOOLCHAIN)
    assert [f.kernel for f in facts] == ["second_in_alphabet", "a_first"]


@pytest.mark.amd_static
@needs_toolchain
def test_compile_past_the_time_limit_is_killed_and_reported(tmp_path):
    # A macro bomb: 2^18 dependent statements take the compiler far past a one-second budget.
    macros = "".join(f"#define E{i + 1} E{i} E{i}\n" for i in range(18))
    source = (
        "#include <hip/hip_runtime.h>\n#define E0 s = s * y[i++ & 1023] + 1.0f;\n"
        + macros
        + "__global__ void k(float* y) { float s = 0; int i = 0; E18 y[0] = s; }\n"
    )
    with pytest.raises(AmdCompileError) as err:
        analyze(source, "gfx942", tmp_path, timeout_s=1, toolchain=TOOLCHAIN)
    assert err.value.timed_out


@pytest.mark.amd_static
@needs_toolchain
def test_compile_command_is_device_only_for_the_target():
    cmd = device_compile_command(TOOLCHAIN, Path("kernel.hip"), Path("k.co"), "gfx942")
    assert "--offload-arch=gfx942" in cmd and "--offload-device-only" in cmd
    assert "-Rpass-analysis=kernel-resource-usage" in cmd and "-D__HIP_PLATFORM_AMD__" in cmd
    assert f"--rocm-device-lib-path={TOOLCHAIN.device_libs}" in cmd
