"""No line of a file outside the header allowlist reaches a verdict (issue 32): an #include that
escapes the allowlist, however it is hidden, is refused with a message naming the file, and the
file's content (a unique secret here) appears in no message, artifact or compile log, for the
static backend (clang's AMD device compile) and the cuda backend (nvcc; it compiles here)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from hipevolve.core.candidate import Candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.problems import get_task
from hipevolve.verifier.build.amd_static import find_toolchain
from hipevolve.verifier.build.compile import Compiler, build, trim_log
from hipevolve.verifier.build.includes import parse_dependencies, scrub_log
from hipevolve.verifier.build.nvidia import find_nvcc, nvcc_command
from hipevolve.verifier.pipeline import prepare
from hipevolve.verifier.static_facts import static_analysis

HEALTHY = Path(__file__).parent / "data" / "candidates" / "healthy_native_softmax"
KERNEL = """\
__global__ void copy_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""


def hidden_includes(secret_file: Path) -> dict[str, str]:
    """Ways to reach the secret file that a naive screen reads past."""
    head = "#include <hip/hip_runtime.h>\n"
    return {
        "raw string": head + f'auto a = R"(" /*)";\n#include "{secret_file}"\nauto b = "*/";\n',
        "macro": head + f'#define F "{secret_file}"\n#include F\n',
        "digraph": head + f'%:include "{secret_file}"\n',
        "splice": head + f'#inc\\\nlude "{secret_file}"\n',
        "dotdot": head + '#include "' + "../" * 12 + str(secret_file).lstrip("/") + '"\n',
    }


@pytest.fixture
def secret(tmp_path: Path) -> tuple[Path, str]:
    word = f"HIPEVOLVE_SECRET_{uuid.uuid4().hex}"
    path = tmp_path / "outside" / "secret.h"
    path.parent.mkdir()
    # Lines a compiler would quote in its errors, whatever else it does with them.
    path.write_text(f"{word} is the secret; int\n'{word}\n\"{word}\n")
    return path, word


needs_static = pytest.mark.skipif(find_toolchain() is None, reason="no AMD static toolchain")
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")


@needs_static
def test_static_backend_verdict_never_shows_a_hidden_include(tmp_path, secret):
    path, word = secret
    task = get_task("softmax")
    settings = VerifierSettings(cache_dir=tmp_path / "cache", amd_targets=("gfx942",))
    model = (HEALTHY / "model.py").read_text()
    for how, source in hidden_includes(path).items():
        candidate = Candidate(
            name="leak", format="native", hip_source=source + KERNEL, python_source=model
        )
        evaluation = prepare(candidate, task, settings, "static").done
        assert evaluation is not None and evaluation.status.value == "rejected", how
        assert word not in evaluation.model_dump_json(), how
        # Past the screen (as if it missed it): the compiler's dependency list refuses it.
        result = static_analysis(source + KERNEL, settings)
        assert result.error and word not in result.error, how
        assert "outside the allowed header folders" in result.error, (how, result.error)


@needs_nvcc
def test_cuda_backend_build_never_shows_a_hidden_include(tmp_path, secret):
    path, word = secret
    nvcc = Compiler(
        name="cuda",
        toolchain="nvcc (test)",
        argv=tuple(nvcc_command(find_nvcc(), Path("kernel.hip"), Path("lib.so"))),
    )
    for how, source in hidden_includes(path).items():
        result = build(source + KERNEL, nvcc, tmp_path / "cache")
        assert not result.ok, how
        assert word not in result.log, how
        assert "outside the allowed header folders" in result.log, (how, result.log)
        assert str(path) in result.log or "secret.h" in result.log, result.log


@needs_nvcc
def test_cuda_backend_still_builds_a_healthy_kernel(tmp_path):
    nvcc = Compiler(
        name="cuda",
        toolchain="nvcc (test)",
        argv=tuple(nvcc_command(find_nvcc(), Path("kernel.hip"), Path("lib.so"))),
    )
    result = build((HEALTHY / "kernel.hip").read_text(), nvcc, tmp_path / "cache")
    assert result.ok, result.log


@needs_static
def test_static_backend_still_analyses_a_healthy_kernel(tmp_path):
    settings = VerifierSettings(cache_dir=tmp_path / "cache", amd_targets=("gfx942",))
    result = static_analysis((HEALTHY / "kernel.hip").read_text(), settings)
    assert not result.error and result.facts, result.error


@pytest.mark.skipif(shutil.which("clang-19") is None, reason="clang-19 is not installed")
def test_compiler_log_of_a_foreign_file_is_scrubbed_but_kernel_errors_stay(tmp_path, secret):
    """The log filter alone (no dependency check): clang quotes the secret; the trimmed log
    names the file, keeps kernel.hip's own error, and shows no line of the secret."""
    path, word = secret
    (tmp_path / "kernel.hip").write_text(f'int broken = ;\n#include "{path}"\n')
    proc = subprocess.run(
        ["clang-19", "-x", "c++", "-fsyntax-only", "kernel.hip"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert word in proc.stderr  # the raw log does leak
    log = trim_log(proc.stderr, tmp_path)
    assert word not in log
    assert "secret.h: error in a file outside the allowed header folders (not shown)" in log
    assert "kernel.hip:1:14: error: expected expression" in log


def test_nvcc_style_locations_are_scrubbed_too(tmp_path):
    raw = (
        '/home/u/.ssh/id_rsa(1): error: identifier "PRIVATE" is undefined\n'
        '  PRIVATE KEY\n  ^\n\nkernel.hip(3): error: expected a ";"\n  int x\n'
    )
    log = scrub_log(raw, tmp_path)
    assert "PRIVATE" not in log and 'kernel.hip(3): error: expected a ";"' in log


def test_dependency_list_parsing_handles_continuations_and_escaped_spaces():
    text = "kernel.o: kernel.hip \\\n  /usr/include/a.h /opt/x\\ y/b.h \\\n  /etc/passwd\n"
    assert parse_dependencies(text) == [
        "kernel.hip",
        "/usr/include/a.h",
        "/opt/x y/b.h",
        "/etc/passwd",
    ]
