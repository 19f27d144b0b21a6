"""`evolve export --out`: the best kernel of a run as a package that runs without hipevolve.

The runs are real: the evolution loop over a real SQLite archive, scored by the stand-in
evaluator (tests/standin.py) on the stand-in task y = 2x, whose seed kernel computes exactly
that. The package is imported, and its kernel compiled with nvcc, in fresh interpreters where
any import of hipevolve fails. The gpu test verifies a kernel for real, exports it and runs the
package against the reference on the GPU.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from export_support import PACKAGE, REPO, standin_run, without_hipevolve
from standin import KERNEL, MODEL, TASK_NAME

from hipevolve.archive.store import Archive
from hipevolve.core.candidate import Candidate
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.export.folders import MARKER
from hipevolve.export.manifest import ExportManifest
from hipevolve.export.package import export_package, rewrite_runtime_import
from hipevolve.export.signature import op_signature
from hipevolve.problems import get_task


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, Path]:
    """(archive, package folder) of one stand-in run, shared by the read-only tests."""
    root = tmp_path_factory.mktemp("export")
    db = standin_run(root)
    out = root / "kernel"
    export_package(db, TASK_NAME, out)
    return db, out


# ---------------------------------------------------------------------------- contents


def test_package_holds_the_best_kernel_its_lineage_and_measurements(exported):
    db, out = exported
    with Archive.open(db) as archive:
        best = archive.best(1)
        assert best is not None
        source = archive.candidate(best.candidate_id).candidate.hip_source
    pkg = out / PACKAGE
    assert (pkg / "kernel.hip").read_text() == source
    for name in ("loader.py", "runtime.py", "compare.py", "op.py", "instances.py",
                 "reference.py", "model.py", "__init__.py", "include/hip/hip_runtime.h",
                 "tiles/hipevolve/tile.h", "tiles/hipevolve/tile_layout.h"):  # fmt: skip
        assert (pkg / name).is_file(), name
    for name in ("README.md", "bench.py", "kernelbench_model_new.py", "pyproject.toml", MARKER):
        assert (out / name).is_file(), name
    model = (pkg / "model.py").read_text()
    assert "from .loader import kernels" in model and "hipevolve" not in model

    manifest = ExportManifest.model_validate_json((pkg / "manifest.json").read_text())
    assert (manifest.run, manifest.candidate) == (1, best.candidate_id)
    assert manifest.fitness == pytest.approx(best.fitness)
    assert manifest.lineage[-1].candidate == best.candidate_id
    assert manifest.lineage[0].agent == "seed"
    speedups = {c.case: c.speedup for c in best.evaluation.cases}
    assert {k: m.speedup for k, m in manifest.measured.items()} == pytest.approx(speedups)

    readme = (out / "README.md").read_text()
    assert f"Candidate {best.candidate_id} of run 1" in readme
    assert f"**{best.fitness:.3f}x**" in readme
    for case, speedup in speedups.items():
        assert f"| {case} | 100.0 |" in readme and f"{speedup:.2f}x" in readme
    assert "backend: `stand-in`" in readme  # the hardware section says what was recorded
    for step in manifest.lineage:
        assert f"| {step.candidate} | {step.agent} |" in readme
    assert f"torch.ops.hipevolve.{TASK_NAME}(x)" in readme
    assert "{{" not in readme


def test_package_imports_in_a_fresh_process_without_hipevolve(exported, tmp_path):
    _, out = exported
    code = f"""
import json
sys.path.insert(0, sys.argv[1])
import torch
import {PACKAGE} as pkg
from torch._subclasses.fake_tensor import FakeTensorMode

schema = str(torch.ops.hipevolve.{TASK_NAME}.default._schema)
with FakeTensorMode():
    y = pkg.op(torch.empty(4096))
# KernelBench exec's a ModelNew file's source in a fresh namespace.
namespace = {{}}
exec(open(sys.argv[1] + "/kernelbench_model_new.py").read(), namespace)
print(json.dumps({{
    "schema": schema, "fake": [list(y.shape), str(y.dtype)],
    "same_class": namespace["ModelNew"] is pkg.ModelNew,
    "model": type(pkg.ModelNew()).__name__,
    "hipevolve_loaded": sorted(m for m in sys.modules if m.split(".")[0] == "hipevolve"),
}}))
"""
    result = without_hipevolve(code, str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["schema"] == f"hipevolve::{TASK_NAME}(Tensor x) -> Tensor"
    assert seen["fake"] == [[4096], "torch.float32"]
    assert seen["same_class"] and seen["model"] == "ModelNew"
    assert seen["hipevolve_loaded"] == []


def test_bench_script_reads_the_manifest_without_hipevolve(exported, tmp_path):
    _, out = exported
    run_bench = """
import runpy
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""
    bench = str(out / "bench.py")
    unknown = without_hipevolve(run_bench, bench, "--case", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown case 'nope'; cases: a, b" in unknown.stderr
    if not torch.cuda.is_available():
        no_gpu = without_hipevolve(run_bench, bench, cwd=tmp_path)
        assert no_gpu.returncode == 2 and "no GPU visible to PyTorch" in no_gpu.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
def test_exported_kernel_compiles_with_nvcc_through_the_carried_headers(exported, tmp_path):
    _, out = exported
    code = f"""
import ctypes
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from {PACKAGE} import loader

library = loader.build_library("cuda", "sm_90", cache_dir=Path(sys.argv[2]))
again = loader.build_library("cuda", "sm_90", cache_dir=Path(sys.argv[2]))
assert again == library, (again, library)
ctypes.CDLL(str(library)).scale  # the launcher kernel.hip declares
print(library)
"""
    result = without_hipevolve(code, str(out), str(tmp_path / "cache"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    library = Path(result.stdout.split()[-1])
    assert library.is_file() and library.parent == tmp_path / "cache"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [library.name]  # no build leftovers


def test_loader_compiles_with_the_flags_the_verifier_measured_with(exported, tmp_path):
    from hipevolve.verifier.build.nvidia import include_dir, nvcc_command
    from hipevolve.verifier.build.tile_headers import tile_include_dir

    _, out = exported
    code = f"""
import json
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from {PACKAGE} import loader

print(json.dumps(loader.command("cuda", "sm_90", "nvcc", Path("k.hip"), Path("lib.so"))))
"""
    result = without_hipevolve(code, str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    ours = json.loads(result.stdout.splitlines()[-1])
    theirs = nvcc_command("nvcc", Path("k.hip"), Path("lib.so"), arch="sm_90")
    carried = {f"-I{include_dir()}": f"-I{out / PACKAGE / 'include'}",
               f"-I{tile_include_dir()}": f"-I{out / PACKAGE / 'tiles'}"}  # fmt: skip
    assert ours == [carried.get(a, a) for a in theirs]


# ---------------------------------------------------------------------------- the custom op


def test_a_module_with_weights_gets_an_op_taking_them_and_its_constructor_arguments(tmp_path):
    task = get_task("rmsnorm")
    sig = op_signature(task)
    assert [a.name for a in sig.inputs] == ["x"]
    assert [(a.name, a.source) for a in sig.state] == [("weight", "weight")]
    first_timed = task.timed_cases[0].init
    assert [(a.name, a.default) for a in sig.init] == [
        ("hidden", repr(first_timed["hidden"])), ("eps", repr(first_timed["eps"])),
        ("dtype", repr(first_timed["dtype"])),
    ]  # fmt: skip

    # Exported for real (a stand-in kernel: only the op's schema and fake are looked at here).
    db = tmp_path / "rms.db"
    with Archive.open(db) as archive:
        run = archive.start_run(task, {}, seed=0, budget=1)
        cid = archive.add_candidate(run, Candidate(format="native", hip_source=KERNEL,
                                                   python_source=MODEL, name="k"))  # fmt: skip
        ok = Evaluation(status=Status.ok, task="rmsnorm", backend="cuda", cases=(
            CaseResult(case="c", correct=True, time_us=10.0, ref_time_us=20.0),))  # fmt: skip
        archive.record_evaluation(cid, ok, "k", "t")
        archive.finish_run(run)
    out = tmp_path / "rms"
    export_package(db, "rmsnorm", out)
    code = """
sys.path.insert(0, sys.argv[1])
import torch
import hipevolve_kernel_rmsnorm as pkg
from torch._subclasses.fake_tensor import FakeTensorMode

print(torch.ops.hipevolve.rmsnorm.default._schema)
with FakeTensorMode():
    y = pkg.op(torch.empty(8, 64, dtype=torch.bfloat16), torch.empty(64, dtype=torch.bfloat16),
               64, 1e-6, "bfloat16")
print(tuple(y.shape), y.dtype)

# What the op runs, on the CPU: the module with the weight it is given, not its own.
from hipevolve_kernel_rmsnorm import instances, reference

init = (64, 1e-6, "float32")
x, weight = torch.randn(8, 64), torch.randn(64)
module = instances.instance("reference", reference.Model, init, torch.device("cpu"))
got = instances.call(module, (x,), {"weight": weight}, 1)
want = reference.Model(*init)
want.weight.data.copy_(weight)
assert torch.equal(got, want(x))
try:  # the stand-in ModelNew holds no weight: said so, never run with weights of its own
    instances.call(pkg.ModelNew(), (x,), {"weight": weight}, 1)
except RuntimeError as e:
    assert "holds no weight" in str(e), e
else:
    raise AssertionError("a ModelNew without the reference's weight ran")
"""
    result = without_hipevolve(code, str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    schema, fake = result.stdout.strip().splitlines()[-2:]
    assert schema.startswith("hipevolve::rmsnorm(Tensor x, Tensor weight, SymInt hidden=")
    assert schema.endswith('str dtype="bfloat16") -> Tensor')
    assert fake == "(8, 64) torch.bfloat16"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("from hipevolve.runtime import kernels", "from .loader import kernels"),
        ("from hipevolve.runtime import kernels as K, Kernels",
         "from .loader import kernels as K; from .runtime import Kernels"),
        ("import hipevolve.runtime as rt", "from . import loader as rt"),
        ("if True:\n    from hipevolve.runtime import kernels",
         "if True:\n    from .loader import kernels"),
    ],
)  # fmt: skip
def test_model_imports_the_packages_loader_instead_of_hipevolve(line, expected):
    source = f'"""doc"""\nimport torch\n{line}\n\nx = 1\n'
    assert rewrite_runtime_import(source) == f'"""doc"""\nimport torch\n{expected}\n\nx = 1\n'


@pytest.mark.parametrize(
    "line", ["import hipevolve.verifier", "from hipevolve.core.reference import x"]
)
def test_model_needing_more_of_hipevolve_is_refused(line):
    with pytest.raises(UserError, match="an exported package cannot"):
        rewrite_runtime_import(f"{line}\n")


def test_a_kernelbench_format_winner_is_exported_as_its_own_file_without_the_loader(tmp_path):
    from hipevolve.core.candidate import load_candidate

    source = (
        REPO / "bench" / "candidates" / "softmax" / "kernelbench" / "s01_ok_b256_scalar_smem.py"
    )
    candidate = load_candidate(source)
    assert candidate.format == "kernelbench"
    db = tmp_path / "kb.db"
    with Archive.open(db) as archive:
        run = archive.start_run(get_task("softmax"), {}, seed=0, budget=1)
        cid = archive.add_candidate(run, candidate)
        ok = Evaluation(status=Status.ok, task="softmax", backend="cuda", cases=(
            CaseResult(case="c", correct=True, time_us=10.0, ref_time_us=20.0),))  # fmt: skip
        archive.record_evaluation(cid, ok, "k", "t")
        archive.finish_run(run)
    out = tmp_path / "kb"
    export_package(db, "softmax", out)
    pkg = out / "hipevolve_kernel_softmax"
    assert (pkg / "model.py").read_text() == source.read_text()
    assert not (pkg / "kernel.hip").exists() and not (pkg / "loader.py").exists()
    assert "loader" not in (pkg / "__init__.py").read_text()
    readme = (out / "README.md").read_text()
    assert "load_inline" in readme and "loader.py" not in readme


def test_a_task_the_op_schema_cannot_express_is_exported_without_the_op(tmp_path):
    from hipevolve.problems import discover

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "row_norms.py").write_text(
        "import torch\n\n\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        return [float(v) for v in x.norm(dim=1)]\n\n\n"
        "def get_inputs():\n    return [torch.randn(4, 8)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )  # a forward returning Python floats: no custom-op schema has such an output
    task = discover([tasks])["row_norms"]
    db = tmp_path / "norms.db"
    with Archive.open(db) as archive:
        run = archive.start_run(task, {}, seed=0, budget=1)
        cid = archive.add_candidate(run, Candidate(format="native", hip_source=KERNEL,
                                                   python_source=MODEL, name="k"))  # fmt: skip
        ok = Evaluation(status=Status.ok, task="row_norms", backend="cuda", cases=(
            CaseResult(case="c", correct=True, time_us=10.0, ref_time_us=20.0),))  # fmt: skip
        archive.record_evaluation(cid, ok, "k", "t")
        archive.finish_run(run)
    out = tmp_path / "norms"
    done = export_package(db, "row_norms", out, tasks_dirs=[tasks])
    assert done.op is None and not (out / "hipevolve_kernel_row_norms" / "op.py").exists()
    assert (
        "No custom op was registered: its signature could not be read"
        in (out / "README.md").read_text()
    )
    code = """
sys.path.insert(0, sys.argv[1])
import hipevolve_kernel_row_norms as pkg
print(pkg.OP_NAME, hasattr(pkg, "op"), pkg.ModelNew.__name__)
"""
    result = without_hipevolve(code, str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["None", "False", "ModelNew"]


# ---------------------------------------------------------------------------- on the GPU

GPU_CHECK = """
import json
sys.path.insert(0, sys.argv[1])
import torch
import hipevolve_kernel_softmax as pkg
from hipevolve_kernel_softmax import reference
from hipevolve_kernel_softmax.compare import compare_values

manifest = json.loads(open(pkg.__path__[0] + "/manifest.json").read())
for case in manifest["cases"]:
    torch.manual_seed(1)
    with torch.device("cuda"):
        inputs = reference.get_inputs(**case["inputs"])
    want = reference.Model()(*inputs)
    for how, got in (("ModelNew", pkg.ModelNew().cuda()(*inputs)),
                     ("op", torch.ops.hipevolve.softmax(*inputs))):
        ok, _, _, why = compare_values(0, got, want, manifest["tolerance"])
        assert ok, (case["name"], how, why)
    print("matches", case["name"])
torch.library.opcheck(torch.ops.hipevolve.softmax.default, (inputs[0],),
                      test_utils=("test_schema", "test_faketensor"))
assert not [m for m in sys.modules if m.split(".")[0] == "hipevolve"]
print("ok")
"""

BENCH = """
import runpy
sys.argv = [sys.argv[1], "--trials", "5", "--json"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.gpu
def test_exported_package_runs_on_the_gpu_in_a_fresh_process_and_matches_the_reference(tmp_path):
    from hipevolve.core.candidate import load_candidate
    from hipevolve.core.config import VerifierSettings
    from hipevolve.verifier.build.backends import resolve_backend
    from hipevolve.verifier.pipeline import evaluate

    task = get_task("softmax")
    candidate = load_candidate(REPO / "prompts" / "examples" / "softmax_native")
    settings = VerifierSettings(cache_dir=tmp_path / "cache", trials=10)
    evaluation = evaluate(candidate, task, settings, resolve_backend("auto"))
    assert evaluation.status is Status.ok, evaluation.message
    db = tmp_path / "gpu.db"
    with Archive.open(db) as archive:
        run = archive.start_run(task, {"test": "export"}, seed=0, budget=1)
        cid = archive.add_candidate(run, candidate, agent="seed")
        archive.record_evaluation(cid, evaluation, "export-gpu-test", "this machine")
        archive.finish_run(run)
    out = tmp_path / "softmax_kernel"
    done = export_package(db, "softmax", out)
    assert done.op == "softmax"
    env = {"HIPEVOLVE_KERNEL_CACHE": str(tmp_path / "kernels")}
    result = without_hipevolve(GPU_CHECK, str(out), cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split()[-1] == "ok"
    bench = without_hipevolve(BENCH, str(out / "bench.py"), cwd=tmp_path, env=env, timeout=300)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    rows = [json.loads(line) for line in bench.stdout.splitlines() if line.startswith("{")]
    assert {r["case"] for r in rows} == {c.name for c in task.timed_cases}
    assert all(r["correct"] and r["speedup"] > 0 for r in rows), rows
    print(bench.stdout)


def _kernelbench_checker():
    """KernelBench's own static checker (vendored unchanged in tests/data/kernelbench/)."""
    import importlib.util

    path = Path(__file__).parent / "data" / "kernelbench" / "kernel_static_checker.py"
    spec = importlib.util.spec_from_file_location("kernelbench_static_checker", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_exported_kernelbench_file_passes_kernelbench_own_checker(exported):
    _, out = exported
    text = (out / "kernelbench_model_new.py").read_text()
    valid, errors, _ = _kernelbench_checker().validate_kernel_static(
        text, backend="hip", precision="fp32"
    )
    assert valid, errors
    # and it carries the kernel it claims: the package's kernel.hip, built with load_inline
    assert (out / PACKAGE / "kernel.hip").read_text().strip() in text
    assert "load_inline(" in text and 'os.environ["CXX"] = "hipcc"' in text


def test_kernelbench_checker_still_refuses_a_file_without_a_kernel():
    # the check above can fail: the checker refuses what the old export wrote
    old = "from pkg.model import ModelNew  # noqa: E402, F401\n"
    valid, errors, _ = _kernelbench_checker().validate_kernel_static(old, backend="hip")
    assert not valid and "Missing __global__ kernel definition" in errors
