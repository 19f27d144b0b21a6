"""README.md of an exported package: measured speedups, hardware, the op, how to build, lineage."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from hipevolve.core.evaluation import Evaluation
from hipevolve.core.taskspec import TaskSpec
from hipevolve.export.folders import render
from hipevolve.export.manifest import ExportManifest
from hipevolve.export.signature import OpSignature, init_example


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def readme(
    manifest: ExportManifest,
    spec: TaskSpec,
    evaluation: Evaluation,
    sig: OpSignature | None,
    native: bool,
    agent: str,
) -> str:
    speedups = _table(
        ("case", "reference (us)", "kernel (us)", "speedup", "CV", "roofline"),
        (
            (
                name,
                _num(m.ref_time_us, ".1f"),
                _num(m.time_us, ".1f"),
                _num(m.speedup, ".2f") + "x",
                _num(m.cv, ".3f"),
                _num(m.roofline_fraction, ".2f"),
            )
            for name, m in manifest.measured.items()
        ),
    )
    if manifest.baselines or manifest.baselines_unavailable:
        speedups += "\n\n" + against_baselines(manifest)
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
            (
                "kernel",
                "target",
                "VGPRs",
                "AGPRs",
                "SGPRs",
                "LDS bytes",
                "occupancy",
                "spills",
                "MFMA",
            ),
            (
                (
                    f.kernel,
                    f.target,
                    f.vgprs,
                    f.agprs,
                    f.sgprs,
                    f.lds_bytes,
                    f.occupancy,
                    f.spills,
                    f.mfma,
                )
                for f in evaluation.static
            ),
        )
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
            op_section += (
                "\nConstructor arguments follow, with defaults "
                + ", ".join(f"`{a.name}={a.default}`" for a in sig.init)
                + "."
            )
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
        (
            (s.candidate, s.agent or "-", s.generation, s.island, _num(s.fitness, ".3f"))
            for s in manifest.lineage
        ),
    )
    text = render(
        "README.md.tmpl",
        {
            "TASK": manifest.task,
            "DESCRIPTION": spec.description,
            "CANDIDATE": str(manifest.candidate),
            "RUN": str(manifest.run),
            "ARCHIVE": manifest.archive,
            "AGENT": agent or "an agent",
            "EXPORTED": manifest.exported,
            "FITNESS": f"{manifest.fitness:.3f}",
            "SPEEDUPS": speedups,
            "TOLERANCE": spec.tolerance.describe(),
            "HARDWARE": "\n".join(hardware),
            "STATIC": static,
            "PACKAGE": manifest.package,
            "INIT_ARGS": init_example(sig),
            "OP_SECTION": op_section,
            "DIST": manifest.package.replace("_", "-"),
            "BUILD": build,
            "LINEAGE": lineage,
            "FILES": _files_table(manifest.package, native, sig),
        },
    )
    return re.sub(r"\n{3,}", "\n\n", text)


def against_baselines(manifest: ExportManifest) -> str:
    """The kernel over the run's baselines, timed once at the run's start on its device."""
    lines = [
        "Over the run's baselines (timed once at the run's start on the same device, the same "
        "way; geometric mean over the timed cases, +- the ~95% interval):",
        "",
    ]
    lines += [f"- {s.describe()}" for s in manifest.baselines]
    lines += [
        f"- {name}: not timed ({why})" for name, why in manifest.baselines_unavailable.items()
    ]
    return "\n".join(lines)


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
    table += [
        ("`bench.py`", "the kernel against the reference on this machine"),
        ("`kernelbench_model_new.py`", "ModelNew in KernelBench format"),
        ("`pyproject.toml`", "`pip install .`"),
    ]
    return _table(("file", "what it is"), table)
