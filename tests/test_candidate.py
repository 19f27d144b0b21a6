"""Reading and writing candidates: every layout, every user mistake as a one-line UserError."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from hipevolve.core.candidate import (
    MAX_SOURCE_BYTES,
    Candidate,
    load_candidate,
    normalize_hip,
    strip_c_comments,
    write_candidate,
)
from hipevolve.core.errors import UserError

DATA = Path(__file__).parent / "data" / "candidates"
NATIVE = DATA / "healthy_native_softmax"
KERNELBENCH = DATA / "healthy_kb_softmax.py"

MODEL_PY = """\
import torch
import torch.nn as nn
from hipevolve.runtime import kernels


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        kernels.copy(x, out, x.numel())
        return out
"""
KERNEL_HIP = """\
#include <hip/hip_runtime.h>
__global__ void copy_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;  // one element per thread
    if (i < n) y[i] = x[i];
}
extern "C" hipError_t copy(const float* x, float* y, long n, hipStream_t stream) {
    copy_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
    return hipGetLastError();
}
"""


def native_folder(tmp_path: Path, hip: str = KERNEL_HIP, model: str = MODEL_PY) -> Path:
    folder = tmp_path / "cand"
    folder.mkdir()
    (folder / "kernel.hip").write_text(hip)
    (folder / "model.py").write_text(model)
    return folder


def user_error(path: Path) -> UserError:
    with pytest.raises(UserError) as info:
        load_candidate(path)
    error = info.value
    assert error.fix, "every user error names its fix"
    assert "\n" not in error.line(), "user errors are one line"
    return error


# ----------------------------------------------------------------------------- layouts


def test_native_folder_loads_both_sources():
    c = load_candidate(NATIVE)
    assert c.format == "native"
    assert c.name == "healthy_native_softmax"
    assert 'extern "C"' in c.hip_source and "class ModelNew" in c.python_source
    assert c.origin == NATIVE


def test_kernelbench_file_keeps_cxx_inside_python():
    c = load_candidate(KERNELBENCH)
    assert (c.format, c.hip_source, c.name) == ("kernelbench", None, "healthy_kb_softmax")
    assert "load_inline" in c.python_source


def test_hip_file_with_sibling_model_loads_as_native(tmp_path):
    folder = native_folder(tmp_path)
    renamed = folder / "softmax_v2.hip"
    (folder / "kernel.hip").rename(renamed)
    c = load_candidate(renamed)
    assert (c.format, c.name, c.hip_source) == ("native", "softmax_v2", KERNEL_HIP)


def test_native_model_py_given_directly_loads_its_folder(tmp_path):
    folder = native_folder(tmp_path)
    c = load_candidate(folder / "model.py")
    assert (c.format, c.name, c.hip_source) == ("native", "cand", KERNEL_HIP)


def test_write_then_load_round_trips_both_formats(tmp_path):
    for original in (load_candidate(NATIVE), load_candidate(KERNELBENCH)):
        written = write_candidate(original, tmp_path / original.format / original.name)
        again = load_candidate(written)
        assert (again.format, again.hip_source, again.python_source, again.name) == (
            original.format,
            original.hip_source,
            original.python_source,
            original.name,
        )
    assert not list(tmp_path.rglob("*.tmp")), "atomic writes leave no temporary files"


def test_write_candidate_sanitises_names_into_file_names(tmp_path):
    c = Candidate(format="kernelbench", hip_source=None, python_source=MODEL_PY, name="../x y")
    written = write_candidate(c, tmp_path)
    assert written.parent == tmp_path and written.name == "_x_y.py"


def test_candidate_layout_must_match_its_format():
    with pytest.raises(ValidationError):
        Candidate(format="native", hip_source=None, python_source=MODEL_PY, name="x")
    with pytest.raises(ValidationError):
        Candidate(format="kernelbench", hip_source="", python_source=MODEL_PY, name="x")


# ----------------------------------------------------------------------------- user mistakes


def test_missing_path_is_a_user_error(tmp_path):
    assert "no such file" in user_error(tmp_path / "nope").problem


def test_empty_folder_is_a_user_error(tmp_path):
    assert "empty folder" in user_error(tmp_path).problem


def test_folder_without_model_py_is_a_user_error(tmp_path):
    (tmp_path / "kernel.hip").write_text(KERNEL_HIP)
    error = user_error(tmp_path)
    assert "no model.py" in error.problem and "hipevolve.runtime" in error.fix


def test_folder_with_only_model_py_says_to_add_kernel_or_pass_the_file(tmp_path):
    (tmp_path / "model.py").write_text(MODEL_PY)
    error = user_error(tmp_path)
    assert "no kernel.hip" in error.problem and "KernelBench" in error.fix


def test_hip_file_without_sibling_model_is_a_user_error(tmp_path):
    (tmp_path / "k.hip").write_text(KERNEL_HIP)
    assert "no model.py" in user_error(tmp_path / "k.hip").problem


def test_model_without_modelnew_is_a_user_error(tmp_path):
    folder = native_folder(tmp_path, model=MODEL_PY.replace("ModelNew", "Model"))
    error = user_error(folder)
    assert "no class ModelNew" in error.problem


def test_kernelbench_file_without_modelnew_is_a_user_error(tmp_path):
    path = tmp_path / "kb.py"
    path.write_text("import torch\n\nclass Model(torch.nn.Module):\n    pass\n")
    assert "no class ModelNew" in user_error(path).problem


def test_python_syntax_error_names_its_line(tmp_path):
    path = tmp_path / "kb.py"
    path.write_text("import torch\n\nclass ModelNew(torch.nn.Module)\n    pass\n")
    assert "line 3" in user_error(path).problem


def test_non_utf8_source_is_a_user_error(tmp_path):
    folder = native_folder(tmp_path)
    (folder / "kernel.hip").write_bytes(b"// caf\xe9\n" + KERNEL_HIP.encode())
    error = user_error(folder)
    assert "not UTF-8" in error.problem and "byte offset 6" in error.problem


def test_source_over_one_mib_is_a_user_error(tmp_path):
    folder = native_folder(tmp_path, hip=KERNEL_HIP + "//" + "x" * MAX_SOURCE_BYTES)
    assert "1 MiB" in user_error(folder).problem


def test_nul_bytes_are_a_user_error(tmp_path):
    path = tmp_path / "kb.py"
    path.write_text(MODEL_PY + "\0")
    assert "NUL" in user_error(path).problem


def test_empty_kernel_is_a_user_error(tmp_path):
    folder = native_folder(tmp_path, hip="  \n")
    assert "empty file" in user_error(folder).problem


def test_cuda_file_says_to_rename_and_hipify(tmp_path):
    path = tmp_path / "kernel.cu"
    path.write_text(KERNEL_HIP)
    error = user_error(path)
    assert "CUDA source" in error.problem and "kernel.hip" in error.fix and "hipify" in error.fix


def test_folder_holding_a_cu_file_says_to_rename_it(tmp_path):
    (tmp_path / "kernel.cu").write_text(KERNEL_HIP)
    (tmp_path / "model.py").write_text(MODEL_PY)
    assert "rename" in user_error(tmp_path).fix


def test_unknown_suffix_lists_the_accepted_layouts(tmp_path):
    path = tmp_path / "kernel.txt"
    path.write_text(KERNEL_HIP)
    assert "KernelBench" in user_error(path).fix


def test_runtime_model_without_sibling_kernel_is_a_user_error(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(MODEL_PY)
    assert "no sibling kernel.hip" in user_error(path).problem


# ----------------------------------------------------------------------------- source hash


def _native(hip: str, model: str = MODEL_PY) -> Candidate:
    return Candidate(format="native", hip_source=hip, python_source=model, name="c")


def test_source_hash_ignores_comments_docstrings_and_spacing():
    reformatted_hip = "/* a header\n   comment */\n" + KERNEL_HIP.replace("    ", "\t").replace(
        ", ", " ,  "
    )
    commented_model = (
        '"""Docstring added."""\n# a comment\n'
        + MODEL_PY.replace("out = ", "out  =   ").replace(
            "def forward(self, x):", "def forward(self, x):  # note\n        '''doc'''"
        )
        + "\n\n"
    )
    assert _native(KERNEL_HIP).source_hash == _native(reformatted_hip, commented_model).source_hash


def test_source_hash_changes_with_code():
    base = _native(KERNEL_HIP).source_hash
    assert _native(KERNEL_HIP.replace("255) / 256", "127) / 128")).source_hash != base
    assert _native(KERNEL_HIP, MODEL_PY.replace("x.numel()", "x.numel() // 2")).source_hash != base


def test_source_hash_keeps_python_indentation_structure():
    flat = MODEL_PY.replace("        return out", "    def other(self):\n        return out")
    assert _native(KERNEL_HIP, flat).source_hash != _native(KERNEL_HIP).source_hash


def test_source_hash_normalises_load_inline_sources():
    original = load_candidate(KERNELBENCH)
    edited = original.python_source.replace(
        "constexpr int kThreads = 256;", "constexpr   int kThreads = 256;  // block size"
    )
    assert edited != original.python_source
    assert original.model_copy(update={"python_source": edited}).source_hash == (
        original.source_hash
    )


def test_comment_stripping_keeps_strings_and_line_numbers():
    source = "a = \"// not a comment\"; /* one\ntwo */ b = 1; // tail\nc = '/*';"
    stripped = strip_c_comments(source)
    assert '"// not a comment"' in stripped and "'/*'" in stripped
    assert "tail" not in stripped and "two" not in stripped
    assert stripped.count("\n") == source.count("\n")


def test_preprocessor_lines_stay_separate_after_normalisation():
    assert normalize_hip("#define A 1\nint x;") != normalize_hip("#define A 1 int x;")
