"""KernelBench-format test candidates that differ from tests/data/kernelbench/candidates/
cpu_relu_inline.py only in their extension's C++: one file serves as the template, so the
load_inline call and ModelNew are written once."""

from __future__ import annotations

import re
from pathlib import Path

CPU_RELU = Path(__file__).parent / "data" / "kernelbench" / "candidates" / "cpu_relu_inline.py"
_SOURCE = re.compile(r'cpp_source = r""".*?"""', re.S)


def relu_extension(folder: Path, name: str, cpp_source: str) -> Path:
    """cpu_relu_inline.py with `cpp_source` as its extension's C++ (it defines
    `torch::Tensor relu_forward(torch::Tensor x)`) and `name` as the extension's name, written
    to folder/name.py."""
    text = CPU_RELU.read_text()
    text = _SOURCE.sub(lambda _: f'cpp_source = r"""{cpp_source}"""', text, count=1)
    text = text.replace('name="hipevolve_test_cpu_relu"', f'name="{name}"', 1)
    assert name in text and cpp_source in text, "cpu_relu_inline.py changed its layout"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(text)
    return path
