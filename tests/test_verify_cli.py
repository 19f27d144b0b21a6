"""`evolve verify` as a user runs it on a machine without a GPU: static AMD facts, clear errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hipevolve.verifier.build.amd_static import find_toolchain

HEALTHY = Path(__file__).parent / "data" / "candidates" / "healthy_native_softmax"
needs_amd = pytest.mark.skipif(find_toolchain() is None,
                               reason="AMD static toolchain missing (scripts/install_amd_toolchain.sh)")


def evolve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hipevolve", *args], capture_output=True,
                          text=True, timeout=300)


@needs_amd
def test_static_backend_prints_gfx942_facts_for_a_native_candidate():
    out = evolve("verify", str(HEALTHY), "--task", "softmax", "--backend", "static")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "compiled" in out.stdout and "gfx942" in out.stdout and "VGPR/AGPR/SGPR" in out.stdout


@needs_amd
def test_json_output_is_an_evaluation(tmp_path):
    out = evolve("verify", str(HEALTHY), "--task", "softmax", "--backend", "static", "--json")
    data = json.loads(out.stdout)
    assert data["status"] == "compiled" and data["static"][0]["target"] == "gfx942"
    assert all(f["spills_vgpr"] == 0 for f in data["static"])


@needs_amd
def test_amd_compile_error_comes_back_with_candidate_line_numbers(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "model.py").write_text((HEALTHY / "model.py").read_text())
    source = (HEALTHY / "kernel.hip").read_text().splitlines()
    source.insert(4, "this_is_not_hip;")
    (folder / "kernel.hip").write_text("\n".join(source) + "\n")
    out = evolve("verify", str(folder), "--task", "softmax", "--backend", "static", "--json")
    data = json.loads(out.stdout)
    assert out.returncode == 1 and data["status"] == "compile_error"
    assert "kernel.hip:5" in data["compile_log"] and str(tmp_path) not in data["compile_log"]


@needs_amd
def test_strict_static_check_rejects_before_compiling(tmp_path):
    folder = tmp_path / "fallback"
    folder.mkdir()
    (folder / "kernel.hip").write_text((HEALTHY / "kernel.hip").read_text())
    model = (HEALTHY / "model.py").read_text().replace(
        "import torch\n", "import torch\nimport time\n", 1)
    (folder / "model.py").write_text(model)
    out = evolve("verify", str(folder), "--task", "softmax", "--backend", "static", "--json")
    data = json.loads(out.stdout)
    assert data["status"] == "rejected" and not data["static"]


@pytest.mark.parametrize("args, expected", [
    (("verify", "/nonexistent", "--task", "softmax"), "no such file or folder"),
    (("verify", str(HEALTHY), "--task", "softmx"), "unknown task 'softmx'"),
    (("verify", str(HEALTHY), "--task", "softmax", "--backend", "metal"), "unknown backend"),
])
def test_bad_input_is_one_line_without_traceback(args, expected):
    out = evolve(*args)
    assert out.returncode == 2 and expected in out.stderr
    assert "Traceback" not in out.stderr and out.stderr.strip().count("\n") == 0


@needs_amd
def test_a_cuda_folder_is_hipified_and_scored_like_a_native_candidate(tmp_path):
    from standin import MODEL  # ModelNew calling kernels.scale(x, y, n)
    from test_agents_translation import CUDA

    folder = tmp_path / "cuda_scale"
    folder.mkdir()
    (folder / "kernel.cu").write_text(CUDA)
    (folder / "model.py").write_text(MODEL)
    out = evolve("verify", str(folder), "--task", "softmax", "--backend", "static", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "translated to HIP with PyTorch's hipify" in out.stderr
    data = json.loads(out.stdout)
    assert data["status"] == "compiled" and data["static"][0]["target"] == "gfx942"


def test_json_output_carries_each_cases_speedup_and_the_fitness():
    from hipevolve.app.views import evaluation_json
    from hipevolve.core.evaluation import CaseResult, Evaluation, Status

    cases = (CaseResult(case="a", correct=True, time_us=50.0, ref_time_us=100.0),
             CaseResult(case="b", correct=True, time_us=200.0, ref_time_us=100.0),
             CaseResult(case="small", correct=True))  # fmt: skip
    data = json.loads(evaluation_json(Evaluation(status=Status.ok, task="softmax", cases=cases)))
    assert [c["speedup"] for c in data["cases"]] == [2.0, 0.5, None]
    assert data["fitness"] == pytest.approx(1.0)  # sqrt(2 * 0.5)
    hacked = Evaluation(status=Status.hacked, task="softmax", cases=cases)
    assert json.loads(evaluation_json(hacked))["fitness"] == 0.0
