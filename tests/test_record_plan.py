"""The recorder (verifier/gpu/sandbox/record.py): a native model.py's forward becomes a launch plan,
and whatever a plan cannot hold is refused. CPU only: the stand-ins carry no data and need no GPU.

The softmax seed records with no library at all. The gated_delta_net seed asks its library for a
workspace size on the host; its own query needs a GPU driver, so here a small C library built with
gcc answers it (the GPU test of the executor records with the seed's real library)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hipevolve.runtime as runtime
from hipevolve.verifier.gpu.plan import Plan, PlanError, validate
from hipevolve.verifier.gpu.sandbox import record

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "problems/softmax/seeds/tunable"
GDN = ROOT / "problems/gated_delta_net/seeds/chunked"


def _load(folder: Path, source: str, model_text: str | None = None, tmp: Path | None = None):
    kernels = record.recording_kernels(source)
    runtime.kernels = kernels
    path = folder / "model.py"
    if model_text is not None:
        path = tmp / "model.py"
        path.write_text(model_text)
    spec = importlib.util.spec_from_file_location("recorded_candidate", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        runtime.kernels = runtime.Kernels()
    return module, kernels


def _spec(dtype: str, *shape: int) -> dict:
    stride, acc = [], 1
    for n in reversed(shape):
        stride.insert(0, acc)
        acc *= n
    return {"dtype": dtype, "shape": list(shape), "stride": stride}


def test_softmax_seed_records_one_allocation_and_one_launch():
    source = (SOFTMAX / "kernel.hip").read_text()
    module, kernels = _load(SOFTMAX, source)
    plan = record.record_case(module.ModelNew, [], [_spec("bfloat16", 64, 128)], kernels, None)
    assert [(b.device, b.nbytes, b.fill, b.dtype) for b in plan.buffers] == [
        ("cuda", 64 * 128 * 2, None, "bfloat16")
    ]
    (step,) = plan.steps
    assert step.launcher == "softmax_bf16"
    assert [a["ref"].buf if "ref" in a else a for a in step.args] == [
        "in0",
        "a0",
        {"int": 64},
        {"int": 128},
        {"stream": True},
    ]
    assert [(r.buf, r.offset, r.shape) for r in plan.outputs] == [("a0", 0, (64, 128))]
    validate(plan, kernels._signatures)
    again = Plan.from_json(Plan(cases={"c": plan}).to_json()).cases["c"]
    assert again == plan


@pytest.fixture(scope="module")
def workspace_library(tmp_path_factory) -> Path:
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler")
    folder = tmp_path_factory.mktemp("gdnlib")
    (folder / "ws.c").write_text(
        "#include <stdint.h>\n"
        "int gdn_chunk_workspace(int B, int T, int HV, int64_t* bytes) {\n"
        "  *bytes = (int64_t)B * HV * ((T + 63) / 64) * 1000; return 0; }\n"
        "int gdn_chunk_workspace_varlen(int N, int T, int HV, int64_t* bytes) {\n"
        "  *bytes = (int64_t)HV * ((T + 63) / 64 + N) * 1000; return 0; }\n"
    )
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-o", str(folder / "ws.so"), str(folder / "ws.c")], check=True
    )
    return folder / "ws.so"


def _gdn_inputs(b: int = 2, t: int = 128, h: int = 2, hv: int = 4) -> list[dict]:
    return [
        _spec("bfloat16", b, t, h, 128),
        _spec("bfloat16", b, t, h, 128),
        _spec("bfloat16", b, t, hv, 128),
        _spec("float32", b, t, hv),
        _spec("float32", b, t, hv),
        _spec("float32", b, hv, 128, 128),
    ]


def test_gdn_seed_records_its_host_workspace_query_and_bakes_the_size(workspace_library):
    source = (GDN / "kernel.hip").read_text()
    module, kernels = _load(GDN, source)
    lib = ctypes.CDLL(str(workspace_library))
    plan = record.record_case(module.ModelNew, [], _gdn_inputs(), kernels, lib)
    sizes = [(b.device, b.nbytes, b.fill) for b in plan.buffers]
    # o, final_state, the host size (zeros), the workspace of the size the query wrote
    assert sizes == [
        ("cuda", 2 * 128 * 4 * 128 * 2, None),
        ("cuda", 2 * 4 * 128 * 128 * 4, None),
        ("cpu", 8, 0),
        ("cuda", 2 * 4 * 2 * 1000, None),
    ]
    assert [s.launcher for s in plan.steps] == ["gdn_chunk_workspace", "gdn_chunk_fwd"]
    fwd = plan.steps[1]
    assert [a["ref"].buf for a in fwd.args if "ref" in a] == [
        "in0",
        "in1",
        "in2",
        "in3",
        "in4",
        "in5",
        "a0",
        "a1",
        "a3",
    ]
    assert [r.buf for r in plan.outputs] == ["a0", "a1"]
    validate(plan, kernels._signatures)


SOURCE = 'extern "C" hipError_t scale(const float* x, float* y, int n, hipStream_t s) { return 0; }'


def _record_text(tmp_path: Path, forward: str, inputs=None):
    text = (
        "import torch\nimport torch.nn as nn\nfrom hipevolve.runtime import kernels\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n"
        + "".join(f"        {line}\n" for line in forward.strip().splitlines())
    )
    module, kernels = _load(tmp_path, SOURCE, text, tmp_path)
    return record.record_case(
        module.ModelNew, [], inputs or [_spec("float32", 8, 16)], kernels, None
    )


def test_torch_compute_in_forward_is_refused_with_the_operator_name(tmp_path):
    with pytest.raises(record.Refused, match="aten._softmax"):
        _record_text(tmp_path, "return torch.softmax(x, -1)")


def test_compute_hidden_behind_a_launcher_call_is_refused(tmp_path):
    forward = """
y = torch.empty_like(x)
kernels.scale(x, y, x.numel())
return y * 1.0
"""
    with pytest.raises(record.Refused, match="aten.mul"):
        _record_text(tmp_path, forward)


def test_a_launcher_given_a_tensor_that_is_not_an_input_or_allocation_is_refused(tmp_path):
    forward = """
with torch._C._DisableTorchDispatch():
    y = torch.empty(8, 16)
kernels.scale(x, y, x.numel())
return y
"""
    with pytest.raises(record.Refused, match="not an input, an allocation or a view"):
        _record_text(tmp_path, forward)


def test_rebinding_a_launcher_to_a_torch_function_is_refused(tmp_path):
    forward = """
kernels.scale = lambda x, y, n: y.copy_(torch.softmax(x, -1))
y = torch.empty_like(x)
kernels.scale(x, y, x.numel())
return y
"""
    with pytest.raises(record.Refused, match="rebinds kernels.scale"):
        _record_text(tmp_path, forward)


def test_reading_a_device_value_on_the_host_is_refused(tmp_path):
    with pytest.raises(record.Refused, match="reads a device tensor"):
        _record_text(tmp_path, "n = int(x.select(0, 0).select(0, 0))\nreturn x")


def test_views_of_inputs_and_allocations_are_references_with_byte_offsets(tmp_path):
    # narrow, not x[2:]: indexing a fake CUDA tensor fails in a CPU-only build of torch
    forward = """
y = torch.zeros(8, 32, device=x.device)
kernels.scale(x.narrow(0, 2, 6), y.narrow(1, 16, 16), 16)
return y.narrow(1, 16, 16)
"""
    plan = _record_text(tmp_path, forward)
    assert plan.buffers[0].fill == 0
    args = plan.steps[0].args
    assert (args[0]["ref"].buf, args[0]["ref"].offset, args[0]["ref"].shape) == (
        "in0",
        2 * 16 * 4,
        (6, 16),
    )
    assert (args[1]["ref"].buf, args[1]["ref"].offset, args[1]["ref"].stride) == (
        "a0",
        16 * 4,
        (32, 1),
    )
    assert (plan.outputs[0].buf, plan.outputs[0].offset) == ("a0", 64)


def test_a_forged_plan_with_a_view_outside_its_buffer_is_refused(tmp_path):
    plan = _record_text(tmp_path, "y = torch.empty_like(x)\nkernels.scale(x, y, 128)\nreturn y")
    data = (
        Plan(cases={"c": plan})
        .to_json()
        .replace(
            '"offset": 0, "dtype": "float32", "shape": [8, 16]',
            '"offset": 4096, "dtype": "float32", "shape": [8, 16]',
            1,
        )
    )
    forged = Plan.from_json(data).cases["c"]
    with pytest.raises(PlanError, match="outside its buffer"):
        validate(forged, record.launcher_signatures(SOURCE))


def test_a_forged_plan_passing_a_raw_address_as_a_pointer_is_refused(tmp_path):
    plan = _record_text(tmp_path, "y = torch.empty_like(x)\nkernels.scale(x, y, 128)\nreturn y")
    data = Plan(cases={"c": plan}).to_json()
    forged = data.replace('{"ref": {"buf": "in0"', '{"int": 140000000000, "x": {"buf": "in0"', 1)
    with pytest.raises(PlanError, match="a pointer must be a tensor"):
        validate(Plan.from_json(forged).cases["c"], record.launcher_signatures(SOURCE))


WARM_FORK = """
import os, sys, time
from hipevolve.verifier.gpu.sandbox import zygote
assert zygote._preload() == "", "the zygote would not fork"
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    import hipevolve.runtime as runtime
    from hipevolve.verifier.gpu.sandbox import record
    folder = sys.argv[1]
    kernels = record.recording_kernels(open(folder + "/kernel.hip").read())
    runtime.kernels = kernels
    namespace = {}
    exec(compile(open(folder + "/model.py").read(), "model.py", "exec"), namespace)
    spec = {"dtype": "bfloat16", "shape": [64, 128], "stride": [128, 1]}
    start = time.perf_counter()
    record.record_case(namespace["ModelNew"], [], [spec], kernels, None)
    os.write(write, repr(time.perf_counter() - start).encode())
    os._exit(0)
os.waitpid(pid, 0)
print(os.read(read, 100).decode())
"""


def test_a_recorder_forked_from_the_zygote_records_warm():
    """FakeTensorMode's first use imports torch._dynamo (seconds); the zygote pays it once, so
    a recorder it forks records the softmax seed in well under half a second, cold as it is."""
    done = subprocess.run(
        [sys.executable, "-c", WARM_FORK, str(SOFTMAX)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=dict(os.environ) | {"OPENBLAS_NUM_THREADS": "1"},  # as Zygote.start sets it
    )
    seconds = float(done.stdout.strip().splitlines()[-1])
    assert seconds < 0.5, f"the forked recorder took {seconds:.2f} s"


def _native_folders() -> list[tuple[str, Path]]:
    tasks = sorted((p.name for p in (ROOT / "problems").iterdir() if (p / "task.toml").exists()),
                   key=len, reverse=True)  # fmt: skip
    found = [(p.parts[-3], p) for p in sorted(ROOT.glob("problems/*/seeds/*")) if p.is_dir()]
    for example in sorted((ROOT / "prompts/examples").iterdir()):
        if (example / "kernel.hip").exists():
            found.append((next(t for t in tasks if example.name.startswith(t)), example))
    return found


@pytest.mark.parametrize(
    ("task_name", "folder"), _native_folders(), ids=lambda v: v if isinstance(v, str) else v.name
)
def test_every_shipped_native_seed_and_example_records_every_case(
    task_name: str, folder: Path, workspace_library: Path
) -> None:
    """Shapes only: inputs are built on the meta device and described as stand-in specs, as the
    judge describes its real inputs; a task whose Model has weights records them as parameter
    buffers the executor fills from the reference."""
    from hipevolve.core import reference
    from hipevolve.problems import get_task
    from hipevolve.verifier.gpu.plan import input_specs

    task = get_task(task_name)
    ref_module = reference.load_module(task.reference)
    source = (folder / "kernel.hip").read_text()
    module, kernels = _load(folder, source)
    library = ctypes.CDLL(str(workspace_library)) if "gdn_chunk_workspace" in source else None
    for case in task.cases:
        inputs = reference.build_inputs(ref_module, case.inputs, "meta", 0, draw_on_device=True)
        init = list(ref_module.get_init_inputs(**case.init))
        plan = record.record_case(module.ModelNew, init, input_specs(inputs), kernels, library)
        validate(plan, kernels._signatures)
        assert plan.steps and plan.outputs, case.name
        model = reference.build_model(ref_module, case.init, "meta")
        names = {n for n, _ in [*model.named_parameters(), *model.named_buffers()]}
        params = {b.param for b in plan.buffers if b.param}
        assert params <= names, (case.name, params, names)
        if task_name == "rmsnorm":
            assert params == {"weight"}


WEIGHTED = """
import torch
import torch.nn as nn
from hipevolve.runtime import kernels

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n))

    def forward(self, x):
        y = torch.empty_like(x)
        kernels.scale(x, self.weight, y, x.numel())
        return y
"""
WEIGHTED_C = (
    "void scale(const float* x, const float* w, float* y, int n) {\n"
    "  for (int i = 0; i < n; ++i) y[i] = x[i] * w[i]; }\n"
)


def test_a_parameter_is_a_buffer_the_executor_fills_from_trusted_weights(tmp_path):
    from hipevolve.runtime import Launcher
    from hipevolve.verifier.gpu.sandbox.executor import PlanModel

    (tmp_path / "w.c").write_text(WEIGHTED_C)
    gcc = shutil.which("gcc") or shutil.which("cc")
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(tmp_path / "w.so"), str(tmp_path / "w.c")],
                   check=True)  # fmt: skip
    source = 'extern "C" void scale(const float* x, const float* w, float* y, int n) {}'
    module, kernels = _load(tmp_path, source, WEIGHTED, tmp_path)
    plan = record.record_case(module.ModelNew, [16], [_spec("float32", 16)], kernels, None)
    validate(plan, kernels._signatures)
    (weight,) = [b for b in plan.buffers if b.param]
    assert (weight.param, weight.device, weight.nbytes, weight.fill) == ("weight", "cuda", 64, None)
    ret, decls = kernels._signatures["scale"]
    library = ctypes.CDLL(str(tmp_path / "w.so"))
    launchers = {"scale": Launcher(library.scale, "scale", ret, decls)}
    trusted = torch.arange(16, dtype=torch.float32)
    x = torch.full((16,), 2.0)
    (y,) = PlanModel(plan, launchers, "cpu", {"weight": trusted})(x)
    assert torch.equal(y, 2.0 * trusted)  # the trusted weights, not anything model.py drew


def _native_job(folder: Path, library: Path):
    from hipevolve.problems import get_task
    from hipevolve.verifier.gpu.job import CandidateJob, CaseJob, Timeouts, WorkerJob

    task = get_task("softmax")
    candidate = CandidateJob(
        format="native", model=folder / "model.py", library=library, source=folder / "kernel.hip"
    )
    return WorkerJob(task=task.name, reference=task.reference,
                     tolerance=task.tolerance.model_dump(), candidate=candidate, device="cpu",
                     cases=(CaseJob(name="c", inputs={"rows": 64, "cols": 128}),), seeds=(0,),
                     timeouts=Timeouts(startup=60, load=60, check=60, timing=60))  # fmt: skip


def test_a_plan_is_recorded_again_only_when_model_py_launchers_or_cases_change(tmp_path):
    from hipevolve.verifier.gpu.judge import record_ahead

    folder = tmp_path / "cand"
    shutil.copytree(SOFTMAX, folder)
    library = tmp_path / "lib.so"
    library.write_bytes(b"one library")
    job = _native_job(folder, library)
    cases = {"c": {"init": {}, "inputs": [_spec("bfloat16", 64, 128)]}}
    first = record_ahead.plan_key(job, cases)
    source = folder / "kernel.hip"
    source.write_text(source.read_text() + "\n// a tuned kernel body\n")
    assert record_ahead.plan_key(job, cases) == first  # kernels changed, launchers did not
    other = {"c": {"init": {}, "inputs": [_spec("bfloat16", 64, 256)]}}
    assert record_ahead.plan_key(job, other) != first
    (folder / "model.py").write_text((folder / "model.py").read_text() + "\n# changed\n")
    assert record_ahead.plan_key(job, cases) != first


def test_a_plan_whose_recording_ran_a_launcher_on_the_host_is_tied_to_its_library(
    workspace_library,
):
    source = (GDN / "kernel.hip").read_text()
    module, kernels = _load(GDN, source)
    library = ctypes.CDLL(str(workspace_library))
    gdn = record.record_case(module.ModelNew, [], _gdn_inputs(), kernels, library)
    softmax_module, softmax_kernels = _load(SOFTMAX, (SOFTMAX / "kernel.hip").read_text())
    softmax = record.record_case(
        softmax_module.ModelNew, [], [_spec("bfloat16", 64, 128)], softmax_kernels, None
    )
    from hipevolve.verifier.gpu.judge import record_ahead

    assert record_ahead._host_calls(json.loads(Plan(cases={"c": gdn}).to_json()))
    assert not record_ahead._host_calls(json.loads(Plan(cases={"c": softmax}).to_json()))
