"""One path for a refusal (verifier/gpu/refusal.py): every rule the screen, the AMD limits, the
library and extension checks, the recorders and the executor enforce answers `rejected` or
`hacked` through `refused`, by the rule's name, never a crash's runtime_error. One test per path
a refusal takes to a status: the controller's CPU stages (pipeline.prepare), a recorder's or an
executor's exception in the sandbox (sandbox_process), and the judge reading it (channel).
The recorders' "refused" messages read in the judge (record_ahead.py, kb_stage.py) are checked
end to end in tests/test_record_ahead.py and tests/test_kb_plan.py."""

from __future__ import annotations

import pytest
from standin import KERNEL, MODEL

from hipevolve.core.candidate import Candidate
from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import Status
from hipevolve.problems import get_task
from hipevolve.verifier.build.compile import BuildResult, Compiler
from hipevolve.verifier.gpu.judge.channel import sandbox_error
from hipevolve.verifier.gpu.refusal import HACKED, REJECTED, RULES, refused


def test_every_rule_answers_rejected_or_hacked_with_its_message() -> None:
    assert {verdict for verdict, _ in RULES.values()} == {REJECTED, HACKED}
    assert refused("launch_plan", "case a: x") == ("hacked", "launch plan refused: case a: x")
    assert refused("kb_plan", "aten.foo") == ("rejected", "KernelBench plan refused: aten.foo")
    with pytest.raises(KeyError):
        refused("no such rule", "")


def test_a_launcher_rebound_while_model_py_is_imported_is_hacked_not_a_runtime_error() -> None:
    # what the sandbox reports for record.Refused raised outside a case (at import)
    header = {"kind": "error", "rule": "launch_plan", "stage": "record",
              "message": "model.py rebinds kernels.softmax_f32: launchers cannot be replaced"}  # fmt: skip
    error = sandbox_error(header, "record")
    assert error.status == "hacked"
    assert error.message == (
        "launch plan refused: model.py rebinds kernels.softmax_f32: launchers cannot be "
        "replaced (stage record)"
    )


def test_a_sandbox_error_that_names_no_rule_or_a_forged_one_is_a_runtime_error() -> None:
    for rule in (None, "nonsense", ["launch_plan"]):
        error = sandbox_error({"kind": "error", "message": "boom", "rule": rule}, "check")
        assert (error.status, error.message) == ("runtime_error", "boom (stage check)")


def test_the_sandbox_names_the_rule_of_a_recorder_or_executor_refusal() -> None:
    from hipevolve.verifier.gpu import plan_kb
    from hipevolve.verifier.gpu.sandbox import record, record_kb
    from hipevolve.verifier.gpu.sandbox.sandbox_process import _error_fields

    cases = [
        (record.Refused("model.py rebinds kernels.f"), "launch_plan"),
        (record_kb.Refused("aten.foo is not in a plan"), "kb_plan"),
        (record_kb.Refused("an output that is not a tensor", hacked=True), "kb_plan_hack"),
        (plan_kb.Hacked("ext.f computes aten.relu with PyTorch"), "executor"),
    ]
    for error, rule in cases:
        fields = _error_fields(error, None)
        assert fields["rule"] == rule and fields["message"] == str(error)
        assert sandbox_error({"kind": "error", **fields}, "record").status in ("rejected", "hacked")
    assert "rule" not in _error_fields(RuntimeError("a crash"), None)


def _prepared(tmp_path, candidate: Candidate, monkeypatch, built: BuildResult | None = None):
    from hipevolve.verifier import pipeline
    from hipevolve.verifier.build import backends

    compiler = Compiler(name="cuda", argv=("nvcc",), toolchain="none")
    monkeypatch.setattr(backends, "compiler_for", lambda backend: compiler)
    monkeypatch.setattr(pipeline, "cached_build", lambda *a: None)
    monkeypatch.setattr(pipeline, "build", lambda *a, **k: built)
    monkeypatch.setattr(pipeline, "static_analysis", lambda *a, **k: pipeline.StaticResult())
    settings = VerifierSettings(cache_dir=tmp_path)
    return pipeline.prepare(candidate, get_task("softmax"), settings, "cuda").done


def test_a_screen_refusal_is_rejected_before_any_build(tmp_path, monkeypatch) -> None:
    hostile = Candidate(format="native", name="include", python_source=MODEL,
                        hip_source='#include "/etc/passwd"\n' + KERNEL)  # fmt: skip
    done = _prepared(tmp_path, hostile, monkeypatch)
    assert done is not None and done.status is Status.rejected
    assert "/etc/passwd" in done.message


def test_a_library_check_refusal_is_hacked(tmp_path, monkeypatch) -> None:
    honest = Candidate(format="native", name="dlsym", python_source=MODEL, hip_source=KERNEL)
    built = BuildResult(ok=False, hacked="its launcher calls dlsym")
    done = _prepared(tmp_path, honest, monkeypatch, built)
    assert done is not None and done.status is Status.hacked
    assert done.message == "library refused: its launcher calls dlsym"
