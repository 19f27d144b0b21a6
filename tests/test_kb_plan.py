"""KernelBench plans (issue 32, class 1): a KernelBench candidate's forward is recorded once
(verifier/gpu/sandbox/record_kb.py) and replayed with no candidate Python (replay_kb.py); the plan
is validated (plan_kb.py). In-process here, on the CPU; the whole path through the recorder and
executor processes runs in tests/hostile and tests/test_kb_plan_gpu.py."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

from hipevolve.verifier.gpu.plan import PlanError
from hipevolve.verifier.gpu.plan_kb import Hacked, computes, to_json, validate
from hipevolve.verifier.gpu.sandbox.record_kb import (
    RecordingExtension,
    Refused,
    record_case,
    spec_of,
)
from hipevolve.verifier.gpu.sandbox.replay_kb import KbPlanModel


def record(model, *inputs, holder=None) -> dict:  # noqa: ANN001
    case = {"inputs": [spec_of(x) if isinstance(x, torch.Tensor) else None for x in inputs]}
    return record_case(model, case, list(inputs), "cpu", holder if holder is not None else {})


class Softmax(nn.Module):
    def forward(self, x):  # noqa: ANN001, ANN201
        xf = x.float()
        e = (xf - xf.amax(dim=-1, keepdim=True)).exp()
        return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def test_a_pure_torch_forward_replays_its_outputs_on_new_inputs_without_its_python() -> None:
    plan = record(Softmax(), torch.randn(8, 32))
    validate(plan, set())
    assert plan["steps"] and all(s["op"] == "aten" for s in plan["steps"])
    y = torch.randn(8, 32)
    (out,) = KbPlanModel(plan, {}, "cpu")(y)
    torch.testing.assert_close(out, torch.softmax(y, dim=-1))


def test_a_forward_with_an_int_argument_and_a_tuple_result_replays() -> None:
    class TopRow(nn.Module):
        def forward(self, x, k):  # noqa: ANN001, ANN201
            values, indices = x.max(dim=k)
            return values * 2, indices

    plan = record(TopRow(), torch.randn(4, 6), 1)
    validate(plan, set())
    y = torch.randn(4, 6)
    values, indices = KbPlanModel(plan, {}, "cpu")(y, 1)
    assert torch.equal(values, y.max(dim=1).values * 2) and torch.equal(indices, y.argmax(1))


def test_parameters_are_filled_from_the_reference_weights_of_the_same_names() -> None:
    plan = record(nn.Linear(16, 8).eval(), torch.randn(3, 16))
    assert [p["name"] for p in plan["params"]] == ["weight", "bias"]
    reference = nn.Linear(16, 8)  # other weights: the replay must use these, not the recorder's
    weights = {n: t.detach() for n, t in reference.named_parameters()}
    y = torch.randn(3, 16)
    (out,) = KbPlanModel(plan, {}, "cpu", weights)(y)
    torch.testing.assert_close(out, reference(y).detach())


def test_a_parameter_written_in_place_is_fresh_again_in_the_next_call() -> None:
    class Drift(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("scale", torch.ones(4))

        def forward(self, x):  # noqa: ANN001, ANN201
            self.scale.mul_(2)
            return x * self.scale

    plan = record(Drift(), torch.ones(4))
    model = KbPlanModel(plan, {}, "cpu", {"scale": torch.ones(4)})
    first, second = model(torch.ones(4))[0], model(torch.ones(4))[0]
    assert torch.equal(first, second) and torch.equal(first, torch.full((4,), 2.0))


def test_reading_a_value_on_the_host_is_refused_with_the_fix() -> None:
    class Branch(nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            return x * 2 if x.sum().item() > 0 else x

    with pytest.raises(Refused, match=r"reads a tensor's value on the host.*tensor ops"):
        record(Branch(), torch.randn(4))


def test_a_tensor_kept_as_a_plain_attribute_is_refused_naming_register_buffer() -> None:
    class Hidden(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = torch.randn(4)

        def forward(self, x):  # noqa: ANN001, ANN201
            return x + self.table

    with pytest.raises(Refused, match="register_buffer"):
        record(Hidden(), torch.randn(4))


def test_an_output_that_is_not_a_plain_tensor_is_refused_as_a_hack() -> None:
    class Lazy(torch.Tensor):
        pass

    class Subclass(nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            return (x * 2).as_subclass(Lazy)

    with pytest.raises(Refused, match="not a plain torch.Tensor") as e:
        record(Subclass(), torch.randn(4))
    assert e.value.hacked


def test_an_extension_call_is_one_step_and_its_results_are_checked_when_replayed() -> None:
    holder: dict = {}
    # A module of builtin functions, as a prebuilt pybind extension is (torch's own, here).
    ext = RecordingExtension("relu_ext", SimpleNamespace(relu_forward=torch.relu), holder)

    class WithExtension(nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            return ext.relu_forward(x.contiguous()) + 1

    plan = record(WithExtension(), torch.randn(2, 5), holder=holder)
    validate(plan, {"relu_ext"})
    ops = [s.get("fn") if s["op"] == "aten" else "ext" for s in plan["steps"]]
    assert ops.count("ext") == 1 and "relu.default" not in ops  # its own aten ops: no steps
    y = torch.randn(2, 5)
    (out,) = KbPlanModel(plan, {("relu_ext", "relu_forward"): torch.relu}, "cpu")(y)
    torch.testing.assert_close(out, torch.relu(y) + 1)
    wrong = KbPlanModel(plan, {("relu_ext", "relu_forward"): torch.t}, "cpu")
    with pytest.raises(RuntimeError, match="must return what it returned when recorded"):
        wrong(y)


def test_validation_refuses_ops_that_are_unknown_denied_or_read_later_results() -> None:
    plan = record(Softmax(), torch.randn(8, 32))
    for change, phrase in (
        (lambda s: s.update(fn="no_such_op.default"), "no aten op"),
        (lambda s: s.update(fn="set_.source_Tensor"), "not allowed"),
        (lambda s: s.update(args=[{"t": "v99"}]), "earlier result"),
        (lambda s: s.update(args=[{"pickle": "x"}]), "not allowed"),
    ):
        forged = copy.deepcopy(plan)
        change(forged["steps"][0])
        with pytest.raises(PlanError, match=phrase):
            validate(forged, set())


def test_validation_refuses_an_extension_the_build_stage_did_not_build() -> None:
    plan = record(Softmax(), torch.randn(8, 32))
    plan["steps"].append(
        {"op": "ext", "module": "elsewhere", "fn": "run", "args": [], "kwargs": {},
         "results": [{"dtype": "float32", "shape": [1], "stride": [1], "device": "job"}],
         "single": True}
    )  # fmt: skip
    with pytest.raises(PlanError, match="no prebuilt extension named 'elsewhere'"):
        validate(plan, {"relu_ext"})


def test_a_plan_survives_its_json_form() -> None:
    import json

    plan = record(nn.Linear(4, 2).eval(), torch.randn(3, 4))
    again = json.loads(to_json({"c": plan}))["cases"]["c"]
    validate(again, set())
    assert again == json.loads(json.dumps(plan))


def test_a_small_tensor_of_python_data_in_forward_is_held_as_a_constant() -> None:
    class Scaled(nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            return x * torch.tensor([1.0, float("nan"), 3.0])

    plan = record(Scaled(), torch.randn(2, 3))
    validate(plan, set())
    y = torch.ones(2, 3)
    (out,) = KbPlanModel(plan, {}, "cpu")(y)
    torch.testing.assert_close(out, y * torch.tensor([1.0, float("nan"), 3.0]), equal_nan=True)


def test_only_the_parameters_the_forward_uses_are_asked_of_the_reference() -> None:
    class Spare(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.unused = nn.Linear(3, 3)  # a fallback the forward never calls
            self.scale = nn.Parameter(torch.ones(3))

        def forward(self, x):  # noqa: ANN001, ANN201
            return x * self.scale

    plan = record(Spare(), torch.randn(2, 3))
    validate(plan, set())
    assert [p["name"] for p in plan["params"]] == ["scale"]
    y = torch.randn(2, 3)
    (out,) = KbPlanModel(plan, {}, "cpu", {"scale": torch.full((3,), 2.0)})(y)
    torch.testing.assert_close(out, y * 2)


def test_an_extension_function_that_writes_in_place_and_returns_nothing_replays() -> None:
    def relu_into(t: torch.Tensor) -> None:  # as a void pybind function: None back
        torch.relu_(t)

    holder: dict = {}
    ext = RecordingExtension("fill_ext", SimpleNamespace(relu_into=relu_into), holder)

    class InPlace(nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            out = x.clone()
            ext.relu_into(out)
            return out

    plan = record(InPlace(), torch.randn(6), holder=holder)
    validate(plan, {"fill_ext"})
    assert plan["steps"][-1]["results"] == []
    y = torch.randn(6)
    (out,) = KbPlanModel(plan, {("fill_ext", "relu_into"): relu_into}, "cpu")(y)
    torch.testing.assert_close(out, torch.relu(y))


def test_the_plan_names_its_pytorch_compute_and_not_its_allocations_views_or_copies() -> None:
    assert set(computes(record(Softmax(), torch.randn(4, 8)))) >= {"amax", "exp", "sum", "div"}

    class Moves(nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            y = torch.empty_like(x).copy_(x.t().contiguous().t())
            return y.view(-1).reshape(x.shape).clone()

    assert computes(record(Moves(), torch.randn(4, 8))) == []


def test_under_kernels_only_an_extension_computing_with_aten_inside_is_hacked_in_a_check_call() -> (
    None
):
    holder: dict = {}
    # torch.relu is a builtin whose C++ dispatches aten.relu, as an extension's at:: call does.
    ext = RecordingExtension("relu_ext", SimpleNamespace(relu_forward=torch.relu), holder)

    class WithExtension(nn.Module):
        def forward(self, x):  # noqa: ANN001, ANN201
            return ext.relu_forward(x.contiguous())

    plan = record(WithExtension(), torch.randn(2, 5), holder=holder)
    assert computes(plan) == []  # its forward only calls the extension
    y = torch.randn(2, 5)
    model = KbPlanModel(plan, {("relu_ext", "relu_forward"): torch.relu}, "cpu")
    torch.testing.assert_close(model(y)[0], torch.relu(y))  # a worker-level job: allowed
    model.kernels_only = True
    with pytest.raises(Hacked, match="relu_ext.relu_forward computes aten.relu with PyTorch"):
        model(y)
    # an extension whose C++ only allocates and copies is not PyTorch compute
    copy_model = KbPlanModel(plan, {("relu_ext", "relu_forward"): torch.clone}, "cpu")
    copy_model.kernels_only = True
    torch.testing.assert_close(copy_model(y)[0], y)


def test_a_kernels_only_job_finds_pytorch_compute_the_screen_cannot_see(tmp_path) -> None:
    import sys
    from pathlib import Path

    from hipevolve.core.evaluation import Status
    from hipevolve.verifier.isolate import run_worker

    sys.path.insert(0, str(Path(__file__).parent / "hostile"))
    from test_hostile import cpu_job

    laundered = Path(__file__).parent / "data" / "candidates" / "kb_laundered_aten_softmax.py"
    judged = run_worker(cpu_job(laundered, kernels_only=True, do_timing=False))
    assert judged.status is Status.hacked, judged.message
    assert "computes aten._softmax with PyTorch outside its kernels" in judged.message
    harness = run_worker(cpu_job(laundered, do_timing=False))  # worker-level: the harness's own
    assert harness.status is Status.ok, harness.message
