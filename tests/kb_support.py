"""KernelBench-format test candidates that differ from tests/data/kernelbench/candidates/
cpu_relu_inline.py only in their extension's C++: one file serves as the template, so the
load_inline call and ModelNew are written once; and their evaluation on the test level's
19_ReLU, on the CPU."""

from __future__ import annotations

import re
from pathlib import Path

from hipevolve.core.candidate import Candidate
from hipevolve.core.config import load_settings
from hipevolve.core.evaluation import Evaluation
from hipevolve.problems import get_task
from hipevolve.verifier.pipeline import evaluate

KERNELBENCH = Path(__file__).parent / "data" / "kernelbench"
CPU_RELU = KERNELBENCH / "candidates" / "cpu_relu_inline.py"
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


def evaluate_on_relu(candidate: Candidate, tmp_path: Path) -> Evaluation:
    """`candidate` through the whole pipeline on the test level's 19_ReLU, on the CPU backend,
    untimed; its extensions are built into tmp_path/cache."""
    settings = load_settings({"tasks": {"dirs": [str(KERNELBENCH / "level_test")]},
                              "verifier": {"cache_dir": str(tmp_path / "cache")}})  # fmt: skip
    return evaluate(candidate, get_task("19_ReLU", settings.tasks.dirs), settings.verifier, "cpu",
                    do_timing=False)  # fmt: skip
