"""Code replies that say two things refuse aloud: an elided body, alternative kernels, the original
quoted after the answer, an edit whose file only prose names (issue 50)."""

from __future__ import annotations

import pytest

from hipevolve.agents.llm.replies import parse_reply
from hipevolve.agents.llm.reply_edits import label_file
from hipevolve.agents.llm.reply_elision import elided
from hipevolve.core.candidate import Candidate
from tests.test_replies import PY  # the same model.py; the kernel here carries comments

HIP = """#include <hip/hip_runtime.h>

// Each thread scales one element; the rest of the row is handled by the tail loop.
__global__ void scale(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // same as above for bf16
    if (i < n) y[i] = 2.0f * x[i];
}

extern "C" hipError_t launch_scale(const float* x, float* y, int n, hipStream_t stream) {
    scale<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
    return hipGetLastError();
}
"""
PARENT = Candidate(format="native", hip_source=HIP, python_source=PY, name="parent")
NEW = HIP.replace("2.0f", "3.0f")


def hip(body: str) -> str:
    return f"```hip\n{body}```\n"


@pytest.mark.parametrize(
    "marker",
    ["// ... unchanged ...", "// rest of the code", "/* same as before */", "...",
     "// ... existing helpers ...", "// (code omitted for brevity)", "…",
     "// rest of the kernel remains unchanged", "// unchanged"],
)  # fmt: skip
def test_a_whole_kernel_with_a_body_elided_is_refused_naming_the_line(marker):
    elided_kernel = NEW.replace("    if (i < n) y[i] = 3.0f * x[i];\n", f"    {marker}\n")
    parsed = parse_reply(hip(elided_kernel), PARENT)
    assert not parsed.ok and parsed.error_class == "elided_code"
    assert "kernel.hip line 6" in parsed.message and "whole file" in parsed.message


def test_comments_about_the_rest_of_the_data_are_not_elisions():
    assert elided(NEW, None, "hip") is None
    assert parse_reply(hip(NEW), PARENT).ok


def test_a_marker_the_parent_already_has_is_kept_not_refused():
    parent = PARENT.model_copy(
        update={"hip_source": HIP.replace("{\n    int i", "{\n    // ...\n    int i", 1)}
    )
    parsed = parse_reply(hip(parent.hip_source.replace("2.0f", "3.0f")), parent)
    assert parsed.ok, parsed.message


def test_python_ellipsis_body_in_model_py_is_refused():
    body = PY.replace(
        "        y = torch.empty_like(x)\n        kernels", "        ...\n        kernels"
    )
    parsed = parse_reply(f"```python\n{body}```\n", PARENT)
    assert not parsed.ok and parsed.error_class == "elided_code" and "model.py" in parsed.message


@pytest.mark.parametrize(
    "between", ["Alternatively, a variant:", "Option 2:", "Another approach:", "Here it is again:"]
)
def test_two_different_whole_kernels_are_refused_unless_the_second_corrects_the_first(between):
    other = HIP.replace("256", "128")
    parsed = parse_reply(f"{hip(NEW)}\n{between}\n\n{hip(other)}", PARENT)
    assert not parsed.ok and parsed.error_class == "several_ambiguous_blocks"
    assert "lines 1, " in parsed.message


def test_a_later_kernel_that_says_it_fixes_the_first_is_taken():
    other = HIP.replace("256", "128")
    parsed = parse_reply(f"{hip(other)}\nWait, that breaks n < 128. Fixed:\n\n{hip(NEW)}", PARENT)
    assert parsed.ok and parsed.candidate.hip_source == NEW


@pytest.mark.parametrize("label", ["For comparison, the original:", "Original kernel.hip:", ""])
def test_the_original_quoted_after_the_new_kernel_is_not_taken(label):
    parsed = parse_reply(f"The new kernel:\n\n{hip(NEW)}\n{label}\n\n{hip(HIP)}", PARENT)
    assert parsed.ok and parsed.candidate.hip_source == NEW


@pytest.mark.parametrize(
    ("line", "path"),
    [("kernel.hip", "kernel.hip"), ("**model.py**", "model.py"), ("### File: `kernel.hip`", "kernel.hip"),
     ("// kernel.hip", "kernel.hip"), ("1. In `model.py`:", "model.py"), ("Edit to kernel.hip:", "kernel.hip"),
     ("**kernel.hip** (the launcher):", "kernel.hip"),
     ("model.py stays as it is; the kernel change:", None),
     ("The launch in model.py passes n, so only the kernel changes:", None)],
)  # fmt: skip
def test_a_label_line_names_its_file_and_a_sentence_names_none(line, path):
    assert label_file(line) == path


def test_an_edit_after_prose_naming_another_file_goes_where_its_text_is():
    reply = ("model.py needs no change. In the kernel:\n\n```cpp\n<<<<<<< SEARCH\n"
             "    if (i < n) y[i] = 2.0f * x[i];\n=======\n    if (i < n) y[i] = 3.0f * x[i];\n"
             ">>>>>>> REPLACE\n```\n")  # fmt: skip
    parsed = parse_reply(reply, PARENT)
    assert parsed.ok and parsed.candidate.hip_source == NEW and parsed.candidate.python_source == PY


def test_an_unnamed_edit_whose_text_is_in_both_files_is_refused():
    parent = PARENT.model_copy(update={"hip_source": HIP + "/*\n        return y\n*/\n"})
    reply = "<<<<<<< SEARCH\n        return y\n=======\n        return y.contiguous()\n>>>>>>> REPLACE\n"
    parsed = parse_reply(reply, parent)
    assert not parsed.ok and parsed.error_class == "ambiguous_edit"
    assert "both kernel.hip and model.py" in parsed.message
