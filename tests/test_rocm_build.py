"""The ROCm path built for real, short of running it (issue 36; docs/ROCM.md).

The rocm backend's own compile and link (backends.rocm_command through compile.build, the
verifier's cached, limited build) turns each native source into one shared library holding host
launchers and device code for gfx942 and gfx90a (gfx950 where the packaged clang knows it),
linked with --no-undefined against the HIP runtime Debian ships (libamdhip64). Built: every
task seed, every prompt example, a sample of lowered candidates (agents/lowering), and the
exported package's hipcc loader. Each library is read back: one code object per target, each
with the source's kernels and their metadata, and the HIP runtime calls the host code makes.

Marker `rocm_build`. The toolchain comes from scripts/install_amd_toolchain.sh (setup.sh runs it);
where it is missing the tests skip, except under CI=true, where a missing toolchain is a failure
(setup.sh ran there). The counts print at the end of the run: "rocm build: gfx942 N built, ...".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hipevolve.agents.lowering.lower import Unlowered, lower
from hipevolve.problems import get_task
from hipevolve.verifier.build.amd_static import find_toolchain
from hipevolve.verifier.build.backends import rocm_command
from hipevolve.verifier.build.compile import Compiler, build
from hipevolve.verifier.build.rocm_build import find_hipcc, inspect_library
from hipevolve.verifier.build.rocm_limits import LDS_LIMIT, REGISTER_BUDGET, SCRATCH_LIMIT

pytestmark = pytest.mark.rocm_build

ROOT = Path(__file__).resolve().parents[1]
WANTED = ("gfx942", "gfx90a", "gfx950")
REQUIRED = ("gfx942", "gfx90a")
SEEDS = sorted(ROOT.glob("problems/*/seeds/*/kernel.hip"))
EXAMPLES = sorted(ROOT.glob("prompts/examples/*/kernel.hip"))
# A sample of the offline translator's lowerings: one per template family and a GEMM.
LOWERED = ("softmax", "layernorm", "gelu", "silu_and_mul", "fused_add_rmsnorm", "gemm_bf16")


def _toolchain():
    tc, hipcc = find_toolchain(), find_hipcc()
    if tc is None or hipcc is None or not set(REQUIRED) <= set(tc.targets):
        message = ("the ROCm build toolchain is missing (hipcc and a clang for gfx942/gfx90a): "
                   "run scripts/install_amd_toolchain.sh")  # fmt: skip
        if os.environ.get("CI"):
            pytest.fail(message + " (CI ran setup.sh, which should have installed it)")
        pytest.skip(message)
    return tc, hipcc


def _sources() -> dict[str, str]:
    found = {f"seed {p.parent.parent.parent.name}/{p.parent.name}": p.read_text() for p in SEEDS}
    found |= {f"example {p.parent.name}": p.read_text() for p in EXAMPLES}
    for name in LOWERED:
        got = lower(get_task(name))
        assert not isinstance(got, Unlowered), got
        found[f"lowered {name}"] = got.hip_source
    return found


def test_every_seed_and_example_is_in_the_build_list():
    assert len(SEEDS) >= 5 and len(EXAMPLES) >= 1


@pytest.fixture(scope="module")
def built(tmp_path_factory, request):
    """name -> (RocmLibrary or the build log), every source built once for every target."""
    tc, hipcc = _toolchain()
    targets = tuple(t for t in WANTED if t in tc.targets)
    compiler = Compiler(name="rocm", argv=tuple(rocm_command(hipcc, targets)),
                        toolchain=f"{tc.version} rocm-build")  # fmt: skip
    cache = tmp_path_factory.mktemp("rocm-cache")
    work = tmp_path_factory.mktemp("rocm-objects")
    results = {}
    for name, source in _sources().items():
        done = build(source, compiler, cache, timeout_s=900)
        results[name] = inspect_library(done.library, tc.objdump, work) if done.ok else done.log
    counts = {t: sum(1 for r in results.values() if not isinstance(r, str) and t in r.targets)
              for t in targets}  # fmt: skip
    failed = sorted(n for n, r in results.items() if isinstance(r, str))
    missing = [t for t in WANTED if t not in targets]
    line = "rocm build: " + ", ".join(f"{t} {n} built" for t, n in counts.items())
    line += f", {len(failed)} failed" + "".join(f", {t}: not known to {tc.version}" for t in missing)
    request.config.rocm_build_summary = [line]  # conftest.py prints it at the end of the run
    return targets, results


def test_every_source_builds_and_links_for_every_target(built):
    targets, results = built
    failed = {n: r[-1500:] for n, r in results.items() if isinstance(r, str)}
    assert not failed, failed
    for name, lib in results.items():
        assert sorted(lib.targets) == sorted(targets), (name, lib.targets)


def test_each_library_links_the_hip_runtime_and_registers_its_kernels(built):
    _, results = built
    for name, lib in results.items():
        assert any(n.startswith("libamdhip64.so") for n in lib.needed), (name, lib.needed)
        assert "__hipRegisterFatBinary" in lib.hip_symbols, (name, lib.hip_symbols)
        assert {"hipLaunchKernel", "hipGetLastError"} <= set(lib.hip_symbols), name
        for co in lib.code_objects:
            assert co.kernels, (name, co.target)
            assert all(k.wavefront_size == 64 for k in co.kernels), (name, co.target)


def test_every_built_kernel_is_within_the_amd_limits(built):
    """The static gate's limits (rocm_limits) hold for every shipped kernel, as the code objects
    declare them to the runtime: LDS per workgroup, VGPRs + AGPRs, scratch per lane."""
    _, results = built
    for name, lib in results.items():
        for co in lib.code_objects:
            for k in co.kernels:
                assert k.lds_bytes <= LDS_LIMIT[co.target], (name, co.target, k)
                assert k.vgprs + k.agprs <= REGISTER_BUDGET, (name, co.target, k)
                assert k.scratch_bytes <= SCRATCH_LIMIT, (name, co.target, k)


def test_softmax_example_artefact_lists_its_static_facts(built, capsys):
    _, results = built
    lib = results["example softmax_native"]
    text = lib.describe()
    with capsys.disabled():
        print("\nexample softmax_native, rocm build: " + text)
    gfx942 = next(co for co in lib.code_objects if co.target == "gfx942")
    names = " ".join(k.name for k in gfx942.kernels)
    assert "softmax_cached" in names and "softmax_online" in names
    assert all(k.lds_bytes <= 64 << 10 and k.scratch_bytes == 0 for k in gfx942.kernels)
    assert "LDS" in text and "VGPRs" in text and "gfx90a" in text


def test_exported_package_loader_builds_with_hipcc_for_rocm(tmp_path):
    """The exported package's loader, run where hipevolve cannot be imported, compiles and links
    its kernel.hip with the hipcc it finds (here the prefix's), for a given gfx target."""
    tc, _ = _toolchain()
    from test_export import PACKAGE, TASK_NAME, export_package, standin_run, without_hipevolve

    db = standin_run(tmp_path)
    out = tmp_path / "kernel"
    export_package(db, TASK_NAME, out)
    code = f"""
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from {PACKAGE} import loader

print(loader.build_library("rocm", "gfx942", cache_dir=Path(sys.argv[2])))
"""
    done = without_hipevolve(code, str(out), str(tmp_path / "cache"), cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    library = Path(done.stdout.split()[-1])
    lib = inspect_library(library, tc.objdump, tmp_path)
    assert lib.targets == ("gfx942",)
    assert [k.name for k in lib.code_objects[0].kernels] == ["_Z12scale_kernelPKfPfi"]
    assert lib.code_objects[0].kernels[0].readable == "scale_kernel(float const*, float*, int)"
    assert "hipLaunchKernel" in lib.hip_symbols
