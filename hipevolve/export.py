"""`evolve export --task T --out DIR`: a run's best kernel as a drop-in package.

The folder it writes runs without hipevolve installed:

    DIR/README.md                  measured speedups, hardware, toolchain, lineage, how to use it
    DIR/bench.py                   the kernel against the PyTorch reference on this machine
    DIR/kernelbench_model_new.py   KernelBench format: ModelNew
    DIR/pyproject.toml             `pip install DIR`
    DIR/PACKAGE/__init__.py        ModelNew, the loader's kernels, the custom op
    DIR/PACKAGE/kernel.hip         the HIP source, as verified
    DIR/PACKAGE/model.py           the candidate's ModelNew, importing the package's own loader
    DIR/PACKAGE/loader.py          compiles kernel.hip on first use (hipcc, or nvcc + include/)
    DIR/PACKAGE/runtime.py         hipevolve's ctypes launcher binding, copied
    DIR/PACKAGE/compare.py         hipevolve's output comparison, copied (bench.py uses it)
    DIR/PACKAGE/op.py              torch.ops.hipevolve.<task> (torch.library.custom_op + fake)
    DIR/PACKAGE/instances.py       the modules behind the op
    DIR/PACKAGE/reference.py       the task's PyTorch reference (the op's fake implementation)
    DIR/PACKAGE/manifest.json      what was exported and what it measured (ExportManifest)
    DIR/PACKAGE/include/hip/*.h    the HIP-to-CUDA headers nvcc compiles kernel.hip through

Nothing is written unless the run has a correct candidate; the folder is assembled beside DIR
and renamed into place. The output-folder rules and the run lookup are shared with dataset.py
and report.py.
"""

from __future__ import annotations

import ast
import inspect
import json
import keyword
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hipevolve.archive.store import Archive, RunInfo, Scored
from hipevolve.errors import UserError
from hipevolve.taskspec import TaskSpec
from hipevolve.verifier.evaluation import Evaluation

TEMPLATES = Path(__file__).resolve().parent / "export_templates"
MARKER = ".hipevolve-export"  # names a folder evolve export wrote: --force may replace it whole
_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")
_RESERVED = {"torch", "typing", "instances", "ModelNew", "Model", "OUTPUTS", "kernel_op", "_fake"}


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ---------------------------------------------------------------------------- archive and runs


def open_archive(path: Path) -> Archive:
    """An existing archive (never creates one: a typo must not make an empty file)."""
    return Archive.open(path, create=False)


def describe_runs(archive: Archive) -> str:
    """One line listing the archive's runs: id, task, status, scored candidates, best fitness."""
    parts = []
    for info in archive.runs():
        best = archive.best(info.id)
        fitness = f"best {best.fitness:.3g}x" if best else "no correct candidate"
        scored = archive.db.execute(
            "SELECT count(*) FROM candidates WHERE run = ? AND evaluation_id IS NOT NULL",
            [info.id],
        ).fetchone()[0]
        parts.append(f"{info.id} ({info.task}, {info.status}, {scored} evaluated, {fitness})")
    return "; ".join(parts) if parts else "none"


def find_run(archive: Archive, run: int) -> RunInfo:
    """The run, or a UserError that lists every run of the archive."""
    if run not in {r.id for r in archive.runs()}:
        raise UserError(
            f"no run {run} in {archive.path}; runs: {describe_runs(archive)}",
            "pass one of those run ids",
        )
    return archive.run(run)


def best_of_task(archive: Archive, task: str, run: int | None) -> tuple[RunInfo, Scored]:
    """The fittest correct candidate of `run` (which must be of `task`), else of all its runs."""
    if run is not None:
        info = find_run(archive, run)
        if info.task != task:
            raise UserError(f"run {run} searched task {info.task}, not {task}",
                            f"pass --task {info.task}, or a run of {task}")  # fmt: skip
        runs = [info]
    else:
        runs = [r for r in archive.runs() if r.task == task]
        if not runs:
            raise UserError(
                f"no run of task {task} in {archive.path}; runs: {describe_runs(archive)}",
                "pass --task with one of those tasks",
            )
    found = [(r, archive.best(r.id)) for r in runs]
    scored = [(r, b) for r, b in found if b is not None]
    if not scored:
        which = f"run {run} has no" if run is not None else f"no run of task {task} has a"
        raise UserError(
            f"{which} correct candidate (none passed the verifier with status ok); "
            "nothing was written",
            "let the search run longer, or export another run",
        )
    return max(scored, key=lambda rb: (rb[1].fitness, -rb[0].id))


def task_spec(archive: Archive, name: str, tasks_dirs: Iterable[Path] = ()) -> TaskSpec:
    """The task from the library, else the spec the archive stored when the run started."""
    from hipevolve.problems import discover

    try:
        tasks = discover(tasks_dirs)
    except UserError:
        tasks = {}
    if name in tasks:
        return tasks[name]
    row = archive.db.execute("SELECT spec FROM tasks WHERE name = ?", [name]).fetchone()
    if row and row[0]:
        spec = TaskSpec.model_validate_json(row[0])
        if spec.reference.is_file():
            return spec
    raise UserError(f"task {name} is neither in the task library nor stored with its reference",
                    "pass --tasks-dir with the folder that holds it")  # fmt: skip


# ---------------------------------------------------------------------------- output folders


def check_output(out: Path, force: bool) -> None:
    """Refuses a file, or a non-empty folder without --force, before any work is done."""
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file, not a folder", "pass a folder path for --out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError(f"{out} exists and is not empty", "pass --force to replace its contents")


def staging_folder(out: Path) -> Path:
    """A fresh folder beside `out` (same file system, so publishing is a rename)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))


def publish(staged: Path, out: Path, kind: str) -> None:
    """Moves the staged folder to `out`.

    A folder that a previous export wrote (it holds MARKER) is replaced whole; any other
    non-empty folder keeps the files this export does not write, so --force on a folder of the
    user's own never deletes them.
    """
    (staged / MARKER).write_text(json.dumps({"kind": kind, "written": _now()}) + "\n")
    if not out.exists():
        os.rename(staged, out)
    elif not any(out.iterdir()):
        out.rmdir()
        os.rename(staged, out)
    elif (out / MARKER).is_file():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
        os.rename(out, old / "previous")
        os.rename(staged, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        shutil.copytree(staged, out, dirs_exist_ok=True)
        shutil.rmtree(staged, ignore_errors=True)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def render(template: str, values: dict[str, str]) -> str:
    """The template file with each {{NAME}} replaced; an unknown name is a KeyError."""
    text = (TEMPLATES / template).read_text()
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


# ---------------------------------------------------------------------------- the custom op


class OpArg(Frozen):
    name: str = Field(description="the Python parameter name")
    annotation: str = Field(description="its type as custom_op reads it")
    default: str | None = Field(default=None, description="Python literal, for constructor args")
    source: str = Field(default="", description="state: the module's parameter or buffer name")


class OpSignature(Frozen):
    """torch.ops.hipevolve.<op>(forward inputs, the module's tensors, constructor arguments)."""

    op: str
    inputs: tuple[OpArg, ...]
    state: tuple[OpArg, ...]
    init: tuple[OpArg, ...]
    outputs: int = Field(ge=1)


def identifier(name: str) -> str:
    """A task name as a Python and operator identifier: 19_ReLU -> task_19_ReLU."""
    cleaned = re.sub(r"\W", "_", name)
    return cleaned if cleaned[:1].isalpha() or cleaned[:1] == "_" else f"task_{cleaned}"


def _annotation(value: Any) -> str | None:
    import torch

    if isinstance(value, torch.Tensor):
        return "torch.Tensor"
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, torch.Tensor) for v in value)
    ):
        return "list[torch.Tensor]"
    for kind in (bool, int, float, str):  # bool first: it is an int too
        if isinstance(value, kind):
            return kind.__name__
    return None


def _names(fn: Any, count: int, fallback: str) -> list[str]:
    """Parameter names of fn (self dropped) for `count` positional values, else fallbacks."""
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= count and not any(p.kind is p.VAR_POSITIONAL for p in params[:count]):
        return positional[:count]
    return [f"{fallback}{i}" for i in range(count)]


def _unique(names: Sequence[str]) -> list[str]:
    taken: set[str] = set()
    out = []
    for name in names:
        name = re.sub(r"\W", "_", name)
        while name in taken or name in _RESERVED or keyword.iskeyword(name) or not name:
            name += "_"
        taken.add(name)
        out.append(name)
    return out


def op_signature(task: TaskSpec) -> OpSignature:
    """The op's signature, read from the reference: its forward names, its inputs' and outputs'
    types on a small case (on the CPU) or a large one (on the meta device, no memory), its
    parameters and buffers, and its constructor arguments with the first timed case's values as
    defaults. Raises ValueError with the reason when the schema cannot express the task."""
    import torch

    from hipevolve.reference import as_outputs, build_inputs, load_module

    module = load_module(task.reference)
    probe = (task.small_cases or task.cases)[0]
    device = "cpu" if probe.small else "meta"
    defaults_case = (task.timed_cases or task.cases)[0]
    with torch.random.fork_rng(devices=[]), torch.device(device), torch.no_grad():
        model = module.Model(*module.get_init_inputs(**probe.init))
        inputs = build_inputs(module, probe.inputs, device, seed=0)
        result = model(*inputs)
    init_values = list(module.get_init_inputs(**defaults_case.init))
    try:
        outputs = len(as_outputs(result))
    except TypeError as e:
        raise ValueError(
            f"the reference's forward returns something else than tensors: {e}"
        ) from None

    input_names = _names(module.Model.forward, len(inputs), "x")
    state_keys = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    init_names = _names(module.Model.__init__, len(init_values), "init")
    names = _unique(input_names + state_keys + init_names)
    args_in = []
    for i, value in enumerate(inputs):
        annotation = _annotation(value)
        if annotation is None:
            raise ValueError(f"forward input {i} is a {type(value).__name__}: no schema type")
        args_in.append(OpArg(name=names[i], annotation=annotation))
    state = [
        OpArg(name=names[len(inputs) + i], annotation="torch.Tensor", source=key)
        for i, key in enumerate(state_keys)
    ]
    init = []
    for i, value in enumerate(init_values):
        annotation = _annotation(value)
        if annotation not in ("bool", "int", "float", "str") or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise ValueError(f"constructor argument {i} ({value!r}) has no schema default")
        init.append(OpArg(name=names[len(inputs) + len(state) + i], annotation=str(annotation),
                          default=repr(value)))  # fmt: skip
    return OpSignature(op=identifier(task.name), inputs=tuple(args_in), state=tuple(state),
                       init=tuple(init), outputs=outputs)  # fmt: skip


def _tuple(names: Sequence[str]) -> str:
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def render_op(sig: OpSignature, task: str) -> str:
    params = [f"{a.name}: {a.annotation}" for a in (*sig.inputs, *sig.state)]
    params += [f"{a.name}: {a.annotation} = {a.default}" for a in sig.init]
    # The op runs ModelNew on the device of its first tensor argument.
    first = next((a for a in (*sig.inputs, *sig.state) if a.annotation == "torch.Tensor"), None)
    device = (
        f"{first.name}.device" if first else 'torch.device("cuda", torch.cuda.current_device())'
    )
    returns = (
        "torch.Tensor"
        if sig.outputs == 1
        else f"tuple[{', '.join(['torch.Tensor'] * sig.outputs)}]"
    )
    shown = ", ".join(a.name for a in sig.inputs + sig.state)
    state_doc = (", then the module's tensors (" + ", ".join(f"{a.name} = Model.{a.source}"
                 for a in sig.state) + ")") if sig.state else ""  # fmt: skip
    init_doc = (", then the constructor's arguments (defaults: the first timed case)"
                if sig.init else "")  # fmt: skip
    return render("op.py.tmpl", {
        "OP": sig.op, "TASK": task, "PARAMS": "".join(f"\n    {p}," for p in params) + "\n",
        "RETURNS": returns,
        "DEVICE": device, "OUTPUTS": str(sig.outputs),
        "INPUTS": _tuple([a.name for a in sig.inputs]),
        "STATE": "{" + ", ".join(f'"{a.source}": {a.name}' for a in sig.state) + "}",
        "INIT": _tuple([a.name for a in sig.init]),
        "SIGNATURE": f"out = torch.ops.hipevolve.{sig.op}({shown})",
        "STATE_DOC": state_doc, "INIT_DOC": init_doc,
    })  # fmt: skip


# ---------------------------------------------------------------------------- model.py


def rewrite_runtime_import(source: str) -> str:
    """model.py importing the package's loader instead of hipevolve.runtime.

    `from hipevolve.runtime import kernels` becomes `from .loader import kernels` (other names
    come from the package's copy, `.runtime`); any other hipevolve import is refused, since the
    package must run without hipevolve.
    """
    tree = ast.parse(source)
    edits: list[tuple[ast.stmt, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "hipevolve.runtime":
                parts = [
                    f"from .{'loader' if a.name == 'kernels' else 'runtime'} import {a.name}"
                    + (f" as {a.asname}" if a.asname else "")
                    for a in node.names
                ]
                edits.append((node, "; ".join(parts)))
            elif node.module.split(".")[0] == "hipevolve":
                raise UserError(f"model.py imports {node.module}: an exported package cannot",
                                "import only hipevolve.runtime's kernels in model.py")  # fmt: skip
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "hipevolve":
                    continue
                if alias.name == "hipevolve.runtime" and alias.asname and len(node.names) == 1:
                    edits.append((node, f"from . import loader as {alias.asname}"))
                else:
                    raise UserError(f"model.py imports {alias.name}: an exported package cannot",
                                    "write `from hipevolve.runtime import kernels` instead")  # fmt: skip
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()))
    data = source.encode()
    for node, text in sorted(edits, key=lambda e: (e[0].lineno, e[0].col_offset), reverse=True):
        start = offsets[node.lineno - 1] + node.col_offset
        end = offsets[(node.end_lineno or node.lineno) - 1] + (node.end_col_offset or 0)
        data = data[:start] + text.encode() + data[end:]
    return data.decode()


# ---------------------------------------------------------------------------- the manifest


class CaseEntry(Frozen):
    name: str
    init: dict[str, Any]
    inputs: dict[str, Any]
    timed: bool
    small: bool
    dtypes: tuple[str, ...]


class Measured(Frozen):
    """One case as hipevolve's verifier measured it (the archive's figures)."""

    time_us: float | None
    ref_time_us: float | None
    speedup: float | None
    cv: float | None
    roofline_fraction: float | None


class LineageStep(Frozen):
    candidate: int
    agent: str
    generation: int
    island: int
    fitness: float | None


class ExportManifest(Frozen):
    """manifest.json: what was exported, from where, and what it measured."""

    task: str
    package: str
    op: str | None = Field(description="torch.ops.hipevolve.<op>; None when not registered")
    op_note: str = Field(default="", description="why no op was registered, when none was")
    archive: str
    run: int
    candidate: int
    fitness: float = Field(description="geometric-mean speedup over the timed cases")
    backend: str = Field(description="where the verifier measured it: cuda, rocm")
    environment: dict[str, Any] = Field(
        default_factory=dict, description="the run's `environment` event (device, toolchain)"
    )
    exported: str
    tolerance: dict[str, Any]
    cases: tuple[CaseEntry, ...]
    measured: dict[str, Measured]
    lineage: tuple[LineageStep, ...] = Field(description="root first, the exported kernel last")


class PackageExport(Frozen):
    out: Path
    package: str
    op: str | None
    run: int
    candidate: int
    fitness: float


def run_environment(archive: Archive, run: int) -> dict[str, Any]:
    """The device and toolchain the run recorded (its last `environment` event), if any."""
    events = archive.events(run, "environment")
    return dict(events[-1].data) if events else {}


def _measured(evaluation: Evaluation) -> dict[str, Measured]:
    return {
        c.case: Measured(
            time_us=c.time_us,
            ref_time_us=c.ref_time_us,
            speedup=c.speedup,
            cv=c.cv,
            roofline_fraction=c.roofline_fraction,
        )  # fmt: skip
        for c in evaluation.cases
        if c.time_us is not None
    }


def _lineage(archive: Archive, run: int) -> list[LineageStep]:
    from hipevolve.archive.lineage import ancestors_of_best

    steps = []
    for cid in ancestors_of_best(archive, run):
        record = archive.candidate(cid)
        steps.append(LineageStep(candidate=cid, agent=record.agent, generation=record.generation,
                                 island=record.island, fitness=record.fitness))  # fmt: skip
    return steps


# ---------------------------------------------------------------------------- export


def export_package(
    archive_path: Path,
    task: str,
    out: Path,
    *,
    run: int | None = None,
    force: bool = False,
    tasks_dirs: Iterable[Path] = (),
) -> PackageExport:
    """Writes the best correct kernel of `task` (of `run`, else of every run) to `out`."""
    from hipevolve.verifier import compare as compare_module
    from hipevolve.verifier.nvidia_layer import include_dir

    out = Path(out)
    check_output(out, force)
    with open_archive(archive_path) as archive:
        info, best = best_of_task(archive, task, run)
        record = archive.candidate(best.candidate_id)
        spec = task_spec(archive, task, tasks_dirs)
        lineage = _lineage(archive, info.id)
        environment = run_environment(archive, info.id)
    candidate = record.candidate
    package = f"hipevolve_kernel_{identifier(task).lower()}"
    try:
        sig: OpSignature | None = op_signature(spec)
        op_note = ""
    except Exception as e:  # noqa: BLE001 (the reference is the task's code: any failure)
        # The kernel and ModelNew are still worth exporting; the README says why no op.
        sig, op_note = None, f"its signature could not be read from the reference ({e})"
    native = candidate.format == "native"
    model_source = (
        rewrite_runtime_import(candidate.python_source) if native else candidate.python_source
    )
    manifest = ExportManifest(
        task=task, package=package, op=sig.op if sig else None, op_note=op_note,
        archive=str(Path(archive_path).resolve()), run=info.id, candidate=record.id,
        fitness=best.fitness, backend=best.evaluation.backend, environment=environment,
        exported=_now(), tolerance=spec.tolerance.model_dump(mode="json"),
        cases=tuple(CaseEntry(name=c.name, init=c.init, inputs=c.inputs, timed=c.timed,
                              small=c.small, dtypes=c.dtypes) for c in spec.cases),
        measured=_measured(best.evaluation), lineage=tuple(lineage),
    )  # fmt: skip

    staged = staging_folder(out)
    try:
        pkg = staged / package
        pkg.mkdir()
        (pkg / "model.py").write_text(model_source)
        shutil.copyfile(spec.reference, pkg / "reference.py")
        shutil.copyfile(Path(__file__).with_name("runtime.py"), pkg / "runtime.py")
        shutil.copyfile(compare_module.__file__, pkg / "compare.py")
        shutil.copyfile(TEMPLATES / "instances.py", pkg / "instances.py")
        if native:
            (pkg / "kernel.hip").write_text(candidate.hip_source or "")
            shutil.copyfile(TEMPLATES / "loader.py", pkg / "loader.py")
            shutil.copytree(include_dir(), pkg / "include")
        if sig is not None:
            (pkg / "op.py").write_text(render_op(sig, task))
        (pkg / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n")
        (pkg / "__init__.py").write_text(_package_init(manifest, sig, native))
        values = {"TASK": task, "PACKAGE": package, "RUN": str(info.id),
                  "CANDIDATE": str(record.id), "DIST": package.replace("_", "-")}  # fmt: skip
        (staged / "bench.py").write_text(render("bench.py.tmpl", values))
        (staged / "kernelbench_model_new.py").write_text(render("kernelbench.py.tmpl", values))
        (staged / "pyproject.toml").write_text(render("pyproject.toml.tmpl", values))
        (staged / "README.md").write_text(
            _readme(manifest, spec, best.evaluation, sig, native, record.agent)
        )
        publish(staged, out, "package")
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return PackageExport(out=out, package=package, op=sig.op if sig else None, run=info.id,
                         candidate=record.id, fitness=best.fitness)  # fmt: skip


def _init_example(sig: OpSignature | None) -> str:
    """The constructor arguments of the first timed case, as the example call shows them."""
    if sig is None:
        return "*reference.get_init_inputs()"
    return ", ".join(a.default or "" for a in sig.init)


def _package_init(manifest: ExportManifest, sig: OpSignature | None, native: bool) -> str:
    imports = ["from .model import ModelNew"]
    exported = ["ModelNew", "TASK", "OP_NAME"]
    if native:
        imports.insert(0, "from .loader import build_library, kernels")
        exported += ["build_library", "kernels"]
    if sig is not None:
        imports.append("from .op import kernel_op as op  # registers torch.ops.hipevolve." + sig.op)
        exported.append("op")
    imports.append("")
    imports.append(f"__all__ = {sorted(exported)!r}")
    init_example = _init_example(sig)
    build_note = (
        "The kernels compile on first use (hipcc on ROCm, nvcc on NVIDIA); without a GPU the\n"
        "package still imports."
        if native
        else "ModelNew builds its kernels itself (KernelBench format, torch's load_inline)."
    )
    return render("package_init.py.tmpl", {
        "TASK": manifest.task, "RUN": str(manifest.run), "CANDIDATE": str(manifest.candidate),
        "PACKAGE": manifest.package, "OP": manifest.op or "(none)", "BUILD_NOTE": build_note,
        "OP_NAME": repr(f"hipevolve::{manifest.op}" if manifest.op else None),
        "INIT_EXAMPLE": init_example,
        "IMPORTS": "\n".join(imports),
    })  # fmt: skip


# ---------------------------------------------------------------------------- README


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _readme(manifest: ExportManifest, spec: TaskSpec, evaluation: Evaluation,
            sig: OpSignature | None, native: bool, agent: str) -> str:  # fmt: skip
    speedups = _table(
        ("case", "reference (us)", "kernel (us)", "speedup", "CV", "roofline"),
        ((name, _num(m.ref_time_us, ".1f"), _num(m.time_us, ".1f"), _num(m.speedup, ".2f") + "x",
          _num(m.cv, ".3f"), _num(m.roofline_fraction, ".2f"))
         for name, m in manifest.measured.items()),
    )  # fmt: skip
    env = manifest.environment
    hardware = [f"- backend: `{manifest.backend or 'unknown'}`"]
    hardware += [f"- {key}: `{value}`" for key, value in sorted(env.items())]
    if not env:
        hardware.append(
            "- the run recorded no device or compiler (no `environment` event in the archive); "
            "`python bench.py` measures this machine"
        )
    static = ""
    if evaluation.static:
        static = "Static AMD analysis of the kernels (resource usage from the gfx compile):\n\n"
        static += _table(
            ("kernel", "target", "VGPRs", "AGPRs", "SGPRs", "LDS bytes", "occupancy", "spills",
             "MFMA"),
            ((f.kernel, f.target, f.vgprs, f.agprs, f.sgprs, f.lds_bytes, f.occupancy, f.spills,
              f.mfma) for f in evaluation.static),
        )  # fmt: skip
    if sig is not None:
        shown = ", ".join(a.name for a in (*sig.inputs, *sig.state))
        op_section = (
            "The same kernel as a PyTorch custom op (registered when the package is imported; "
            "its fake implementation runs the reference on fake tensors, so torch.compile sees "
            "the right shapes):\n\n```python\n"
            f"out = torch.ops.hipevolve.{sig.op}({shown})\n```"
        )
        if sig.state:
            op_section += (
                "\n\nThe module's tensors are arguments: "
                + ", ".join(f"`{a.name}` is the reference Model's `{a.source}`" for a in sig.state)
                + "."
            )
        if sig.init:
            op_section += "\nConstructor arguments follow, with defaults " + ", ".join(
                f"`{a.name}={a.default}`" for a in sig.init) + "."  # fmt: skip
    else:
        op_section = f"No custom op was registered: {manifest.op_note}."
    if native:
        build = (
            "Not prebuilt: `loader.py` compiles `kernel.hip` on the first kernel call, with "
            "`hipcc --offload-arch=<this GPU>` on ROCm or with `nvcc` through the HIP-to-CUDA "
            "headers in `include/` on NVIDIA (the flags hipevolve verified with), and caches the "
            "library under `~/.cache/hipevolve-kernels` ($HIPEVOLVE_KERNEL_CACHE overrides it). "
            f"To build ahead of time: `python -m {manifest.package}.loader` (on the GPU machine), "
            "or `--backend cuda --arch sm_90` / `--backend rocm --arch gfx942` elsewhere."
        )
    else:
        build = "ModelNew is in KernelBench format: it compiles its own sources with load_inline."
    lineage = _table(
        ("candidate", "agent", "generation", "island", "fitness"),
        ((s.candidate, s.agent or "-", s.generation, s.island, _num(s.fitness, ".3f"))
         for s in manifest.lineage),
    )  # fmt: skip
    text = render("README.md.tmpl", {
        "TASK": manifest.task, "DESCRIPTION": spec.description, "CANDIDATE": str(manifest.candidate),
        "RUN": str(manifest.run), "ARCHIVE": manifest.archive, "AGENT": agent or "an agent",
        "EXPORTED": manifest.exported, "FITNESS": f"{manifest.fitness:.3f}",
        "SPEEDUPS": speedups, "TOLERANCE": spec.tolerance.describe(),
        "HARDWARE": "\n".join(hardware), "STATIC": static, "PACKAGE": manifest.package,
        "INIT_ARGS": _init_example(sig),
        "OP_SECTION": op_section, "DIST": manifest.package.replace("_", "-"), "BUILD": build,
        "LINEAGE": lineage, "FILES": _files_table(manifest.package, native, sig),
    })  # fmt: skip
    return re.sub(r"\n{3,}", "\n\n", text)


def _files_table(package: str, native: bool, sig: OpSignature | None) -> str:
    rows = []
    if native:
        rows += [
            ("kernel.hip", "the HIP source, as verified"),
            ("model.py", "ModelNew: allocates outputs, calls the kernels"),
            ("loader.py", "compiles kernel.hip on first use, binds its launchers"),
            ("runtime.py", "the ctypes launcher binding (from hipevolve)"),
            ("include/hip/", "HIP-to-CUDA headers: nvcc builds the HIP source through them"),
        ]
    else:
        rows.append(("model.py", "ModelNew in KernelBench format (builds with load_inline)"))
    if sig is not None:
        rows.append(("op.py", f"`torch.ops.hipevolve.{sig.op}`: the kernel as a custom op"))
    rows += [
        ("instances.py", "the modules behind the custom op"),
        ("reference.py", "the task's PyTorch reference (KernelBench format)"),
        ("compare.py", "output comparison with the task's tolerance (from hipevolve)"),
        ("manifest.json", "cases, tolerance, measurements and lineage, as data"),
    ]
    table = [(f"`{package}/{name}`", what) for name, what in rows]
    table += [("`bench.py`", "the kernel against the reference on this machine"),
              ("`kernelbench_model_new.py`", "ModelNew in KernelBench format"),
              ("`pyproject.toml`", "`pip install .`")]  # fmt: skip
    return _table(("file", "what it is"), table)
