"""The library check (verifier/build/library_check.py): host code in a candidate's library that
could reach the process loading it is refused, by comparison with a minimal kernel built by the
same nvcc and flags. Real nvcc builds (nvcc compiles here; nothing is loaded or run)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hipevolve.verifier.build import library_check
from hipevolve.verifier.build.compile import Compiler, build

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

ROOT = Path(__file__).resolve().parents[1]
NATIVE = sorted(
    p.parent for p in [*ROOT.glob("problems/*/seeds/*/kernel.hip"),
                       *ROOT.glob("prompts/examples/*/kernel.hip")]
)  # fmt: skip
KERNEL = library_check.BASELINE_SOURCE


@pytest.fixture(scope="module")
def nvcc() -> Compiler:
    from hipevolve.verifier.build.nvidia import find_nvcc, nvcc_command, nvcc_version

    path = find_nvcc()
    argv = nvcc_command(path, Path("kernel.hip"), Path("lib.so"), arch="sm_90")
    return Compiler(name="cuda", argv=tuple(argv), toolchain=nvcc_version(path))


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build-cache")  # one baseline for the whole module


@pytest.mark.parametrize("folder", NATIVE, ids=lambda p: f"{p.parts[-3]}/{p.name}")
def test_every_shipped_native_seed_and_example_passes(folder: Path, nvcc, cache) -> None:
    built = build((folder / "kernel.hip").read_text(), nvcc, cache)
    assert built.ok and not built.hacked, built.hacked or built.log
    assert built.library.exists()


def _refused(source: str, nvcc: Compiler, cache: Path) -> str:
    built = build(source, nvcc, cache)
    assert not built.ok and built.library is None  # never published into the cache
    assert built.hacked
    return built.hacked


def test_a_static_initialiser_reaching_python_through_dlsym_is_hacked(nvcc, cache) -> None:
    source = KERNEL + """
#include <dlfcn.h>
static int grab() {
    auto run = (int (*)(const char*))dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    return run ? run("import os") : 0;
}
static int grabbed = grab();
"""
    assert "dlsym" in _refused(source, nvcc, cache)


def test_a_static_initialiser_calling_a_declared_python_function_is_hacked(nvcc, cache) -> None:
    source = KERNEL + """
extern "C" int PyRun_SimpleString(const char*);
static int grabbed = PyRun_SimpleString("import os");
"""
    assert "imports PyRun_SimpleString" in _refused(source, nvcc, cache)


def test_a_constructor_function_is_hacked(nvcc, cache) -> None:
    source = KERNEL + """
volatile int loaded;
__attribute__((constructor)) static void on_load() { loaded = 1; }
"""
    assert "initialiser" in _refused(source, nvcc, cache)


def test_a_raw_syscall_in_a_launcher_is_hacked(nvcc, cache) -> None:
    source = KERNEL + """
extern "C" long pid_of_loader() {
    long ret;
    asm volatile("syscall" : "=a"(ret) : "a"(39L) : "rcx", "r11", "memory");
    return ret;
}
"""
    assert "raw syscall" in _refused(source, nvcc, cache)


def test_a_launcher_calling_dlsym_where_only_cudart_did_is_hacked(nvcc, cache) -> None:
    source = KERNEL + """
#include <dlfcn.h>
extern "C" hipError_t find(float* y, int n, hipStream_t s) {
    return dlsym(RTLD_DEFAULT, "PyEval_GetGlobals") ? hipSuccess : hipErrorUnknown;
}
"""
    assert "dlsym" in _refused(source, nvcc, cache)


def test_an_unreadable_library_is_hacked_where_the_baseline_is_readable(tmp_path, nvcc, cache):
    (tmp_path / "lib.so").write_text("not an ELF")
    reason = library_check.refusal(tmp_path / "lib.so", nvcc, cache)
    assert "cannot be read" in reason
