"""The machine-code digest (verifier/build/machine_code.py, pipeline.machine_digest) on real
builds of the Gated DeltaNet prefill seed, which declares tunables that only one platform reads
(issue 33):
- nvcc for sm_90 (the cuda backend's command; no GPU needed): MFMA_KSTEP, read only by the AMD
  MFMA path, builds the same machine code; TC_BV and TC_PREP_RUN, read by the NVIDIA tensor-core
  path, do not. Two builds of one source differ byte for byte (nvcc's module id) and still get
  one digest.
- hipcc for gfx942 (the rocm backend's command, scripts/install_amd_toolchain.sh; marker
  rocm_build): the NVIDIA-only TC_PREP_RUN and TC_BV build the same code object, MFMA_KSTEP
  does not.
- model.py is part of the digest: another ModelNew is another candidate; a comment is not.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from compilers import hipcc_gfx942, nvcc_sm90
from gdn_seed_support import PREFILL_SEED, source_of, with_define
from standin import KERNEL, MODEL

from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.verifier.build.compile import build
from hipevolve.verifier.build.machine_code import library_digest
from hipevolve.verifier.pipeline import machine_digest, prepare

SEED = source_of(PREFILL_SEED)
VARIANTS = {
    "seed": SEED,
    "MFMA_KSTEP=32": with_define(SEED, "MFMA_KSTEP", 32),  # the AMD MFMA path only
    "TC_BV=64": with_define(SEED, "TC_BV", 64),  # the NVIDIA tensor-core launcher
    "TC_PREP_RUN=4": with_define(SEED, "TC_PREP_RUN", 4),  # the NVIDIA tensor-core prep kernel
}


@pytest.fixture(scope="module")
def sm90(tmp_path_factory) -> dict[str, Path]:
    """Each variant's sm_90 library, built once for the module."""
    compiler = nvcc_sm90()
    if compiler is None:
        pytest.skip("nvcc or the HIP-to-CUDA layer is missing")
    built = {}
    for name, source in VARIANTS.items():
        # A cache each: in one, a variant that preprocesses as the seed does (MFMA_KSTEP) would
        # be served the seed's library uncompiled (tests/test_preprocessed.py).
        cache = tmp_path_factory.mktemp(name.replace("=", "_"))
        result = build(source, compiler, cache, timeout_s=600)
        assert result.ok, f"{name}: {result.log}"
        built[name] = result.library
    return built


def test_an_amd_only_tunable_builds_the_same_sm90_machine_code(sm90):
    assert sm90["seed"].read_bytes() != sm90["MFMA_KSTEP=32"].read_bytes()
    assert library_digest(sm90["seed"], "cuda") == library_digest(sm90["MFMA_KSTEP=32"], "cuda")


@pytest.mark.parametrize("variant", ["TC_BV=64", "TC_PREP_RUN=4"])
def test_an_nvidia_tunable_builds_other_sm90_machine_code(sm90, variant):
    digest = library_digest(sm90[variant], "cuda")
    assert digest is not None and digest != library_digest(sm90["seed"], "cuda")


def test_a_register_scan_the_launcher_cannot_take_is_not_built(sm90, tmp_path):
    """TC_RS picks the register-state scan per slice width; a TC_BV that forces the other width
    leaves that scan unreachable, and the seed then does not compile it: the choice builds the
    machine code of the one it equals at run time, which the run loop answers without a GPU
    evaluation (before, TC_BV 32 with TC_RS 1 built the unused 64-column scan and cost one)."""
    compiler = nvcc_sm90()

    def digest(defines: dict[str, int]) -> str | None:
        source = SEED
        for name, value in defines.items():
            source = with_define(source, name, value)
        folder = tmp_path / "_".join(f"{n}{v}" for n, v in defines.items())
        result = build(source, compiler, folder, timeout_s=600)
        assert result.ok, result.log
        return library_digest(result.library, "cuda")

    with ThreadPoolExecutor(max_workers=2) as pool:
        narrow_rs0, narrow_rs1, wide_rs2 = pool.map(
            digest,
            [{"TC_BV": 32, "TC_RS": 0}, {"TC_BV": 32, "TC_RS": 1}, {"TC_BV": 64, "TC_RS": 2}],
        )
    assert narrow_rs0 is not None and narrow_rs0 == narrow_rs1  # 32 columns: no register scan
    assert wide_rs2 == library_digest(sm90["TC_BV=64"], "cuda")  # TC_RS 1: the same scans
    assert narrow_rs0 != library_digest(sm90["TC_BV=64"], "cuda")


def test_two_builds_of_one_source_differ_in_bytes_but_not_in_digest(sm90):
    # A run builds in one cache folder; a second build there compiles in a build folder of its
    # own (another module id). A cache folder of another path length may move the host code
    # (the line tables' paths change the fatbin's size), as machine_code.py says.
    first, digest = sm90["seed"].read_bytes(), library_digest(sm90["seed"], "cuda")
    cache = sm90["seed"].parents[2]
    sm90["seed"].unlink()  # not cached any more: built again
    shutil.rmtree(cache / "preprocessed")  # nor under its preprocessed digest
    again = build(SEED, nvcc_sm90(), cache, timeout_s=600)
    assert again.ok, again.log
    assert again.library == sm90["seed"] and again.library.read_bytes() != first
    assert library_digest(again.library, "cuda") == digest


def test_model_py_is_part_of_the_digest_but_its_comments_are_not(tmp_path):
    compiler = nvcc_sm90()
    if compiler is None:
        pytest.skip("nvcc or the HIP-to-CUDA layer is missing")
    seed = load_candidate(PREFILL_SEED)
    settings = VerifierSettings(cache_dir=tmp_path)
    commented = seed.model_copy(update={"python_source": "# a note\n" + seed.python_source})
    other = seed.model_copy(update={"python_source": seed.python_source + "\nEXTRA = 1\n"})
    digests = []
    for candidate in (seed, commented, other):
        built = build(candidate.hip_source, compiler, settings.cache_dir, timeout_s=600)
        digests.append(machine_digest(candidate, built, compiler))
    assert digests[0] is not None and digests[0] == digests[1] != digests[2]


def test_prepare_builds_a_candidate_once_digest_and_verdict_in_one_trip(tmp_path, monkeypatch):
    from hipevolve.problems import get_task
    from hipevolve.verifier import pipeline
    from hipevolve.verifier.build import backends

    compiler = nvcc_sm90()
    if compiler is None:
        pytest.skip("nvcc or the HIP-to-CUDA layer is missing")
    compiles = []
    monkeypatch.setattr(backends, "compiler_for", lambda backend: compiler)
    monkeypatch.setattr(pipeline, "build", lambda *a, **k: compiles.append(a[0]) or build(*a, **k))
    task, settings = get_task("softmax"), VerifierSettings(cache_dir=tmp_path)
    good = Candidate(format="native", name="good", python_source=MODEL, hip_source=KERNEL)
    broken = good.model_copy(update={"hip_source": KERNEL.replace("2.0f * x", "2.0f * undeclared")})
    ready, failed = (prepare(c, task, settings, "cuda") for c in (good, broken))
    assert ready.done is None and ready.library is not None and ready.digest is not None
    # a failed build: its verdict is reached here, with no digest, and nothing is left to run
    assert failed.digest is None and failed.done is not None
    assert failed.done.status.value == "compile_error" and "error" in failed.done.compile_log
    assert compiles == [good.hip_source, broken.hip_source]  # each source compiled once


def test_a_prepared_candidate_is_not_prepared_again_when_it_is_evaluated(tmp_path, monkeypatch):
    from hipevolve.core.evaluation import Evaluation, Status
    from hipevolve.problems import get_task
    from hipevolve.verifier import pipeline

    task = get_task("softmax")
    verdict = Evaluation(status=Status.rejected, task=task.name, message="refused")
    ready = pipeline.Prepared(candidate=load_candidate(PREFILL_SEED), done=verdict)
    monkeypatch.setattr(pipeline, "prepare", lambda *a: pytest.fail("prepared a second time"))
    settings = VerifierSettings(cache_dir=tmp_path)
    assert pipeline.evaluate_many([ready], task, settings, "static") == [verdict]


@pytest.mark.rocm_build
def test_on_gfx942_nvidia_only_tunables_build_the_same_code_object_and_an_amd_one_does_not(
    tmp_path,
):
    compiler = hipcc_gfx942()
    digests = {}
    for name, source in VARIANTS.items():  # a cache each: compiled, not served (as for sm90)
        result = build(source, compiler, tmp_path / name, timeout_s=600)
        assert result.ok, f"{name}: {result.log}"
        digests[name] = library_digest(result.library, "rocm")
    assert digests["seed"] is not None
    assert digests["TC_PREP_RUN=4"] == digests["TC_BV=64"] == digests["seed"]
    assert digests["MFMA_KSTEP=32"] != digests["seed"]



def _table(names: list[bytes], strings: bytes) -> bytes:
    """An ELF64 symbol table naming `names` (offsets into `strings`), all else equal."""
    import struct

    return b"".join(struct.pack("<IBBHQQ", strings.index(n + b"\0"), 0x11, 0, 1, 64, 1)
                    for n in names)  # fmt: skip


def test_the_slot_of_clangs_unit_id_in_a_symbol_table_does_not_change_the_digest():
    """A translation unit with device globals carries clang's unit id (__hip_cuid_<random>),
    and the linker places that symbol by its name: the same gfx942 source gave three digests in
    four builds (the GDN CP seed) until the table was read in sorted order."""
    from hipevolve.verifier.build.machine_code import _symbols

    strings = b"\0calls\0kernel\0__hip_cuid_5e7fb277c13b5793\0__hip_cuid_c0b9234c2dc6bdf3\0"
    first = _table([b"calls", b"__hip_cuid_5e7fb277c13b5793", b"kernel"], strings)
    second = _table([b"calls", b"kernel", b"__hip_cuid_c0b9234c2dc6bdf3"], strings)
    assert _symbols(first, strings) == _symbols(second, strings)
    # without a unit id the table is read in its own order, as before
    assert _symbols(_table([b"calls", b"kernel"], strings), strings) != _symbols(
        _table([b"kernel", b"calls"], strings), strings)  # fmt: skip
