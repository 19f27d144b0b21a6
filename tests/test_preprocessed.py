"""A source that preprocesses exactly as one already built is served that build's library and
facts without a compile (verifier/build/preprocessed.py), and only such a source:
- nvcc for sm_90 (no GPU needed): a knob read only under __HIP_PLATFORM_AMD__ is served, one the
  NVIDIA code reads is compiled, and so is a comment line that moves the code (line markers are
  part of what is compared, so -lineinfo stays right);
- the CUDA facts and the gfx942 facts of such a source come from the cache;
- hipcc for gfx942 (marker rocm_build): an NVIDIA-only knob is served.
"""

from __future__ import annotations

import pytest
from compilers import hipcc_gfx942, nvcc_sm90_or_skip
from standin import KERNEL

from hipevolve.core.config import VerifierSettings
from hipevolve.verifier.build import preprocessed
from hipevolve.verifier.build.compile import build

# One knob only AMD code reads, one NVIDIA code reads, both in the stand-in scale kernel.
VENDOR_KNOBS = """\
// @tunable AMD_ONLY: 1, 2
#define AMD_ONLY 1
// @tunable NV_ONLY: 1, 2
#define NV_ONLY 1
#if defined(__HIP_PLATFORM_AMD__)
#define SCALE (2.0f * AMD_ONLY / AMD_ONLY)
#else
#define SCALE (2.0f * NV_ONLY / NV_ONLY)
#endif
"""
SOURCE = KERNEL.replace(
    "#include <hip/hip_runtime.h>\n", "#include <hip/hip_runtime.h>\n" + VENDOR_KNOBS
)
SOURCE = SOURCE.replace("2.0f * x[i + u]", "SCALE * x[i + u]")
VARIANTS = {
    "first": SOURCE,
    "AMD_ONLY=2": SOURCE.replace("#define AMD_ONLY 1", "#define AMD_ONLY 2"),
    "NV_ONLY=2": SOURCE.replace("#define NV_ONLY 1", "#define NV_ONLY 2"),
    "a comment line": SOURCE.replace("__global__", "// one more line\n__global__", 1),
}


def test_nvccs_preprocessing_passes_are_the_gcc_E_lines_of_its_dryrun():
    compiler = nvcc_sm90_or_skip()
    passes = preprocessed.nvcc_passes(compiler.argv)
    assert len(passes) == 2  # the host pass and the device pass of the one architecture
    assert sum("-D__CUDA_ARCH__=900" in p for p in passes) == 1
    for i, command in enumerate(passes):
        assert "-E" in command and "kernel.hip" in command
        assert command[command.index("-o") + 1] == preprocessed.OUTPUT.format(i)


def test_clangs_passes_are_the_host_and_one_device_pass_per_target():
    argv = [
        "hipcc",
        "-x",
        "hip",
        "-shared",
        "-O3",
        "--offload-arch=gfx942",
        "--offload-arch=gfx90a",
        "kernel.hip",
        "-o",
        "lib.so",
    ]
    host, *devices = preprocessed.clang_hip_passes(argv)
    assert "--offload-host-only" in host and "-shared" not in host and "lib.so" not in host
    assert [d[d.index("-E") - 1] for d in devices] == [
        "--offload-arch=gfx942",
        "--offload-arch=gfx90a",
    ]
    device_only = preprocessed.clang_hip_passes(
        [*argv[:3], "--offload-device-only", *argv[4:6], *argv[7:]]
    )
    assert len(device_only) == 1 and "--offload-host-only" not in device_only[0]
    assert preprocessed.passes_for("metal", argv) == ()


def test_on_nvidia_an_amd_only_knob_is_served_the_built_library_and_the_rest_compile(tmp_path):
    compiler = nvcc_sm90_or_skip()
    built = {
        name: build(source, compiler, tmp_path, timeout_s=600) for name, source in VARIANTS.items()
    }
    assert all(result.ok for result in built.values()), {n: r.log for n, r in built.items()}
    served = built["AMD_ONLY=2"]
    assert served.cached and "not compiled again" in served.log
    assert served.library != built["first"].library  # published under its own key
    assert served.library.read_bytes() == built["first"].library.read_bytes()
    assert built["first"].facts and served.facts == built["first"].facts  # the facts go with it
    for compiled in ("first", "NV_ONLY=2", "a comment line"):
        assert not built[compiled].cached, compiled
    # The exact source again is the ordinary cache hit, with no preprocessing.
    again = build(VARIANTS["AMD_ONLY=2"], compiler, tmp_path, timeout_s=600)
    assert again.cached and again.log == "" and again.library == served.library


def test_the_cuda_facts_of_a_source_that_preprocesses_alike_come_without_a_compile(
    tmp_path, monkeypatch
):
    from hipevolve.verifier import static_facts
    from hipevolve.verifier.build import amd_static, cuda_static

    compiler = nvcc_sm90_or_skip()
    monkeypatch.setattr(amd_static, "find_toolchain", lambda: None)  # the NVIDIA machine's case
    settings = VerifierSettings(cache_dir=tmp_path)
    first = static_facts.static_analysis(VARIANTS["first"], settings, compiler=compiler)
    assert first.facts and first.facts[0].target == "sm_90"
    monkeypatch.setattr(cuda_static, "analyze", lambda *a, **k: pytest.fail("compiled again"))
    served = static_facts.static_analysis(VARIANTS["AMD_ONLY=2"], settings, compiler=compiler)
    assert served.facts == first.facts


@pytest.mark.amd_static
def test_the_gfx942_facts_of_a_source_that_preprocesses_alike_come_without_a_compile(
    tmp_path, monkeypatch
):
    from hipevolve.verifier import static_facts
    from hipevolve.verifier.build import amd_static

    if amd_static.find_toolchain() is None:
        pytest.skip("no AMD static toolchain: run scripts/install_amd_toolchain.sh")
    settings = VerifierSettings(cache_dir=tmp_path, amd_targets=["gfx942"])
    first = static_facts.static_analysis(VARIANTS["first"], settings)
    assert first.facts and first.facts[0].target == "gfx942"
    analyze = amd_static.analyze
    compiled = []
    monkeypatch.setattr(
        amd_static, "analyze", lambda *a, **k: compiled.append(1) or analyze(*a, **k)
    )
    served = static_facts.static_analysis(VARIANTS["NV_ONLY=2"], settings)
    assert served.facts == first.facts and compiled == []
    static_facts.static_analysis(VARIANTS["AMD_ONLY=2"], settings)
    assert compiled == [1]  # what the AMD code reads is compiled


@pytest.mark.rocm_build
def test_on_gfx942_an_nvidia_only_knob_is_served_the_built_library(tmp_path):
    compiler = hipcc_gfx942()
    built = {
        name: build(VARIANTS[name], compiler, tmp_path, timeout_s=600)
        for name in ("first", "NV_ONLY=2", "AMD_ONLY=2")
    }
    assert all(result.ok for result in built.values()), {n: r.log for n, r in built.items()}
    assert built["NV_ONLY=2"].cached and not built["AMD_ONLY=2"].cached
