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
and renamed into place. The pieces: runs.py (the run lookup) and folders.py (the
output-folder rules, the templates), both shared with dataset.py and report.py;
signature.py (the custom op), manifest.py (manifest.json), readme.py
(README.md).
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterable
from pathlib import Path

from hipevolve.core.errors import UserError
from hipevolve.export.folders import (
    MARKER,
    TEMPLATES,
    check_output,
    now,
    publish,
    render,
    staging_folder,
)
from hipevolve.export.manifest import (
    CaseEntry,
    ExportManifest,
    LineageStep,
    Measured,
    lineage_steps,
    measurements,
)
from hipevolve.export.readme import readme
from hipevolve.export.runs import (
    best_of_task,
    describe_runs,
    find_run,
    open_archive,
    run_baseline,
    run_environment,
    task_spec,
)
from hipevolve.export.signature import (
    Frozen,
    OpArg,
    OpSignature,
    identifier,
    init_example,
    op_signature,
    render_op,
)

# The names other modules and the tests use, importable from here as before the split.
__all__ = [
    "MARKER",
    "TEMPLATES",
    "CaseEntry",
    "ExportManifest",
    "LineageStep",
    "Measured",
    "OpArg",
    "OpSignature",
    "PackageExport",
    "best_of_task",
    "check_output",
    "describe_runs",
    "export_package",
    "find_run",
    "identifier",
    "op_signature",
    "open_archive",
    "publish",
    "render",
    "render_op",
    "rewrite_runtime_import",
    "run_environment",
    "staging_folder",
    "task_spec",
]


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
                raise UserError(
                    f"model.py imports {node.module}: an exported package cannot",
                    "import only hipevolve.runtime's kernels in model.py",
                )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "hipevolve":
                    continue
                if alias.name == "hipevolve.runtime" and alias.asname and len(node.names) == 1:
                    edits.append((node, f"from . import loader as {alias.asname}"))
                else:
                    raise UserError(
                        f"model.py imports {alias.name}: an exported package cannot",
                        "write `from hipevolve.runtime import kernels` instead",
                    )
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


class PackageExport(Frozen):
    out: Path
    package: str
    op: str | None
    run: int
    candidate: int
    fitness: float


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
    from hipevolve.verifier.build.nvidia import include_dir
    from hipevolve.verifier.build.tile_headers import tile_include_dir
    from hipevolve.verifier.gpu.judge import compare as compare_module

    out = Path(out)
    check_output(out, force)
    with open_archive(archive_path) as archive:
        info, best = best_of_task(archive, task, run)
        record = archive.candidate(best.candidate_id)
        spec = task_spec(archive, task, tasks_dirs)
        lineage = lineage_steps(archive, info.id)
        environment = run_environment(archive, info.id)
        baseline = run_baseline(archive, info.id)
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
        task=task,
        package=package,
        op=sig.op if sig else None,
        op_note=op_note,
        archive=str(Path(archive_path).resolve()),
        run=info.id,
        candidate=record.id,
        fitness=best.fitness,
        backend=best.evaluation.backend,
        environment=environment,
        exported=now(),
        tolerance=spec.tolerance.model_dump(mode="json"),
        cases=tuple(
            CaseEntry(
                name=c.name,
                init=c.init,
                inputs=c.inputs,
                timed=c.timed,
                small=c.small,
                dtypes=c.dtypes,
            )
            for c in spec.cases
        ),
        measured=measurements(best.evaluation),
        lineage=tuple(lineage),
        baselines=tuple(baseline.speedups(best.evaluation.cases)) if baseline else (),
        baselines_unavailable=dict(baseline.unavailable) if baseline else {},
    )

    staged = staging_folder(out)
    try:
        pkg = staged / package
        pkg.mkdir()
        (pkg / "model.py").write_text(model_source)
        shutil.copyfile(spec.reference, pkg / "reference.py")
        shutil.copyfile(Path(__file__).resolve().parents[1] / "runtime.py", pkg / "runtime.py")
        shutil.copyfile(compare_module.__file__, pkg / "compare.py")
        shutil.copyfile(TEMPLATES / "instances.py", pkg / "instances.py")
        if native:
            (pkg / "kernel.hip").write_text(candidate.hip_source or "")
            shutil.copyfile(TEMPLATES / "loader.py", pkg / "loader.py")
            shutil.copytree(include_dir(), pkg / "include")
            shutil.copytree(tile_include_dir(), pkg / "tiles")
        if sig is not None:
            (pkg / "op.py").write_text(render_op(sig, task))
        (pkg / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n")
        (pkg / "__init__.py").write_text(_package_init(manifest, sig, native))
        values = {
            "TASK": task,
            "PACKAGE": package,
            "RUN": str(info.id),
            "CANDIDATE": str(record.id),
            "DIST": package.replace("_", "-"),
        }
        (staged / "bench.py").write_text(render("bench.py.tmpl", values))
        (staged / "kernelbench_model_new.py").write_text(
            kernelbench_file(candidate, values) if native else candidate.python_source
        )
        (staged / "pyproject.toml").write_text(render("pyproject.toml.tmpl", values))
        (staged / "README.md").write_text(
            readme(manifest, spec, best.evaluation, sig, native, record.agent)
        )
        publish(staged, out, "package")
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return PackageExport(
        out=out,
        package=package,
        op=sig.op if sig else None,
        run=info.id,
        candidate=record.id,
        fitness=best.fitness,
    )


def kernelbench_file(candidate, values: dict[str, str]) -> str:  # noqa: ANN001 (a Candidate)
    """A native winner in KernelBench format: its kernel source built with load_inline on ROCm
    (KernelBench's HIP convention), so KernelBench's own static checker accepts the file."""
    source = candidate.hip_source or ""
    if "'''" in source:
        raise UserError(
            "the kernel source holds three single quotes in a row and cannot be "
            "embedded in the KernelBench file",
            "use the package's kernel.hip",
        )
    return render("kernelbench_native.py.tmpl", {**values, "KERNEL": source.strip("\n")})


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
    example = init_example(sig)
    build_note = (
        "The kernels compile on first use (hipcc on ROCm, nvcc on NVIDIA); without a GPU the\n"
        "package still imports."
        if native
        else "ModelNew builds its kernels itself (KernelBench format, torch's load_inline)."
    )
    return render(
        "package_init.py.tmpl",
        {
            "TASK": manifest.task,
            "RUN": str(manifest.run),
            "CANDIDATE": str(manifest.candidate),
            "PACKAGE": manifest.package,
            "OP": manifest.op or "(none)",
            "BUILD_NOTE": build_note,
            "OP_NAME": repr(f"hipevolve::{manifest.op}" if manifest.op else None),
            "INIT_EXAMPLE": example,
            "IMPORTS": "\n".join(imports),
        },
    )
