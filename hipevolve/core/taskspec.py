"""TaskSpec: what a task is. A reference PyTorch module in KernelBench format plus metadata.

A task folder holds `reference.py` (class Model, get_inputs(**case.inputs),
get_init_inputs(**case.init)) and `task.toml` (everything else, validated here). The metadata is
data, never executed; the reference is only imported where it runs (tests, the GPU worker).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_serializer, model_validator

from hipevolve.core.base import Frozen
from hipevolve.core.hardware import ROOFLINE_GPUS, bounds_us

Scalar = int | float | str | bool


class Roofline(Frozen):
    """Compulsory work of one case: each input read once, each output written once."""

    bytes: float = Field(gt=0, description="fewest bytes the case must move through HBM")
    flops: float = Field(ge=0, description="floating-point operations the case must do")

    def bounds_us(self) -> dict[str, tuple[float, float]]:
        """GPU name -> (memory-bound, compute-bound) lower limits in microseconds."""
        return {g.name: bounds_us(g, self.bytes, self.flops) for g in ROOFLINE_GPUS}


class Case(Frozen):
    """One problem size: how to construct the module and build its inputs."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    init: dict[str, Scalar] = Field(
        default_factory=dict, description="keyword arguments of get_init_inputs (constructor)"
    )
    inputs: dict[str, Scalar] = Field(
        default_factory=dict, description="keyword arguments of get_inputs (input builder)"
    )
    dtypes: tuple[str, ...] = Field(
        default=(), description="dtypes of the main tensors, for display: ('bfloat16',)"
    )
    timed: bool = Field(default=True, description="counts toward fitness (geometric mean)")
    small: bool = Field(
        default=False, description="reference runs on a CPU in under 2 s; used by CPU tests"
    )
    roofline: Roofline | None = None
    globals: dict[str, str] = Field(
        default_factory=dict,
        description="module-level constants of the reference (name -> Python literal) set "
        "before its functions run: a KernelBench file sizes its inputs with globals, so its "
        "reduced CPU case sets them",
    )

    @model_serializer(mode="wrap")
    def _without_empty_globals(self, handler):  # noqa: ANN001, ANN202
        # A case without globals dumps as it did before the field existed (settings keys,
        # archived task specs and manifests stay the same).
        data = handler(self)
        if isinstance(data, dict) and not data.get("globals"):
            data.pop("globals", None)
        return data


class Tolerance(Frozen):
    """How outputs are compared with the reference. NaN is never a wildcard.

    - allclose: |x - ref| <= atol + rtol * |ref| elementwise.
    - rel_rms: ||x - ref|| / ||ref|| <= max_rel_rms for every output tensor.
    - kernelbench: allclose with KernelBench's defaults by output dtype
      (1e-4 for float32, 1e-2 for float16 and bfloat16).
    The allclose kinds also bound each output's relative RMS error (max_rel_rms when given,
    else max(0.05, 4 rtol) up to 0.25), so outputs that all sit near atol cannot pass on atol
    alone; float32 outputs rounded to 16-bit precision fail unless low_precision_ok.
    """

    kind: Literal["allclose", "rel_rms", "kernelbench"]
    atol: float | None = Field(default=None, ge=0)
    rtol: float | None = Field(default=None, ge=0)
    max_rel_rms: float | None = Field(default=None, gt=0)
    low_precision_ok: bool = Field(
        default=False,
        description="float32 outputs may carry only bfloat16/float16 precision (the task "
        "allows 16-bit results); off, such outputs fail as a precision downgrade",
    )

    @model_validator(mode="after")
    def _fields_match_kind(self) -> Tolerance:
        if self.kind == "allclose" and (self.atol is None or self.rtol is None):
            raise ValueError("tolerance kind 'allclose' needs atol and rtol")
        if self.kind == "rel_rms" and self.max_rel_rms is None:
            raise ValueError("tolerance kind 'rel_rms' needs max_rel_rms")
        return self

    def for_dtype(self, dtype: str) -> tuple[float, float]:
        """(atol, rtol) for an output of `dtype` (allclose and kernelbench kinds)."""
        if self.kind == "kernelbench":
            tol = 1e-4 if dtype in ("float32", "float64") else 1e-2
            return tol, tol
        return float(self.atol or 0.0), float(self.rtol or 0.0)

    def describe(self) -> str:
        if self.kind == "rel_rms":
            return f"relative RMS error <= {self.max_rel_rms:g} on every output"
        if self.kind == "kernelbench":
            return "allclose, KernelBench defaults: 1e-4 (float32), 1e-2 (float16, bfloat16)"
        return f"allclose atol={self.atol:g} rtol={self.rtol:g}"


class Anchor(Frozen):
    """A published or measured figure to compare against (for example FLA on an H200)."""

    name: str
    source: str = Field(description="where the figure comes from")
    hardware: str = ""
    unit: str = "us"
    figures: dict[str, float] = Field(description="case name -> value in `unit`")


class Baseline(Frozen):
    """A strong baseline the task names (hipevolve/core/baseline.py): trusted code shipped with
    the task, timed once per run in the judge after the reference, never a candidate. `module`:
    a file with a `Model` class taking the reference's init arguments and inputs (for example
    torch.matmul, or FLA's kernels); `torch_compile`: torch.compile of the task's own reference."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.+ -]+$", max_length=60)
    kind: Literal["module", "torch_compile"] = "module"
    module: Path | None = Field(
        default=None, description="the module's file (kind 'module'), relative to the task folder"
    )

    @model_validator(mode="after")
    def _module_matches_kind(self) -> Baseline:
        if self.kind == "module" and self.module is None:
            raise ValueError(f"baseline {self.name!r}: kind 'module' needs module = \"FILE.py\"")
        if self.kind == "torch_compile" and self.module is not None:
            raise ValueError(
                f"baseline {self.name!r}: kind 'torch_compile' compiles the "
                "reference and takes no module"
            )
        return self


class TaskSpec(Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str
    family: str = Field(
        default="other",
        description="elementwise, reduction, matmul, fusion, attention, conv, recurrence, other",
    )
    origin: Literal["builtin", "user", "kernelbench"] = "builtin"
    reference: Path = Field(description="the reference module (KernelBench format)")
    cases: tuple[Case, ...] = Field(min_length=1)
    tolerance: Tolerance
    check_seeds: int = Field(default=3, ge=1, description="seeds checked, one hidden from agents")
    suspect_speedup: float | None = Field(
        default=None,
        gt=1,
        description="speedups above this are suspect for this task (default: the verifier "
        "setting); for references far slower than the best known kernel, with the roofline "
        "gate still applying",
    )
    timing: Literal["eager", "graph"] = Field(
        default="eager",
        description="what a timed trial is: 'eager', one call of the forward (host launch "
        "overhead included), or 'graph', one replay of the forward captured as a CUDA graph "
        "(what serving engines pay: decode steps run under CUDA graphs in vLLM and SGLang); "
        "a forward that cannot be captured is timed eagerly and flagged",
    )
    anchors: tuple[Anchor, ...] = ()
    seeds: tuple[Path, ...] = Field(default=(), description="seed kernel candidates (folders)")
    baselines: tuple[Baseline, ...] = Field(
        default=(), description="strong baselines timed beside the reference once per run"
    )
    notes: str = ""

    @model_serializer(mode="wrap")
    def _without_eager_timing(self, handler):  # noqa: ANN001, ANN202
        # An eager task dumps as it did before the field existed (archived task specs, the
        # behaviour snapshot); a graph-timed one says so.
        data = handler(self)
        if isinstance(data, dict) and data.get("timing") == "eager":
            data.pop("timing")
        if isinstance(data, dict) and not data.get("baselines", True):
            data.pop("baselines")  # likewise a task without strong baselines
        return data

    @model_validator(mode="after")
    def _case_names_unique(self) -> TaskSpec:
        names = [c.name for c in self.cases]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate case names in {names}")
        baselines = [b.name for b in self.baselines]
        if len(set(baselines)) != len(baselines) or "reference" in baselines:
            raise ValueError(f"baseline names must be distinct and not 'reference': {baselines}")
        return self

    def case(self, name: str) -> Case:
        for c in self.cases:
            if c.name == name:
                return c
        raise KeyError(name)

    @property
    def small_cases(self) -> tuple[Case, ...]:
        return tuple(c for c in self.cases if c.small)

    @property
    def timed_cases(self) -> tuple[Case, ...]:
        return tuple(c for c in self.cases if c.timed)


def parse_task_toml(data: dict[str, Any], folder: Path, origin: str) -> TaskSpec:
    """Builds a TaskSpec from a task.toml table; paths are relative to the task folder."""
    data = dict(data)
    data["reference"] = folder / data.get("reference", "reference.py")
    data["seeds"] = tuple(folder / s for s in data.get("seeds", ()))
    data["baselines"] = tuple(
        b | {"module": folder / b["module"]} if isinstance(b, dict) and b.get("module") else b
        for b in data.get("baselines", ())
    )
    data["origin"] = origin
    return TaskSpec.model_validate(data)
