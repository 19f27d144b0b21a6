"""Which evaluator a search runs on: this machine's GPUs (one worker slot each) or a Ray
cluster's, refused in one line when neither is there. The main job (run_job.py) takes it as its
default EvaluatorFactory."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hipevolve.core.config import Settings
from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import TaskSpec
from hipevolve.verifier.evaluators import Evaluator, PipelineEvaluator

# The device nodes a GPU needs to be visible: NVIDIA's driver, AMD's ROCm (KFD), WSL's GPU.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def require_gpu(requested: str) -> str:
    """The GPU backend to search on ("cuda" or "rocm"); one-line UserError when there is none."""
    if requested == "static":
        raise UserError(
            "--backend static cannot search: it compiles kernels but runs none, so nothing is "
            "timed",
            "use --backend auto, cuda or rocm; `evolve verify --backend static` checks one "
            "candidate",
        )
    if not any(Path(node).exists() for node in GPU_DEVICE_NODES):
        # No driver's device node: no GPU can be visible, and importing torch to hear it says
        # so takes seconds.
        raise UserError(
            "no usable GPU here (cuda: no /dev/nvidiactl, rocm: no /dev/kfd: no GPU driver is "
            "loaded); `evolve verify --backend static` and `evolve tasks ...` still work; run "
            "`evolve doctor` for what is missing"
        )
    import torch

    from hipevolve.verifier.build.backends import gpu_backend

    found = gpu_backend()
    if found is not None and requested in ("auto", found):
        return found
    build = f"torch {torch.__version__}"
    why = {
        "cuda": f"{build} is not a CUDA build" if torch.version.cuda is None else "",
        "rocm": f"{build} is not a ROCm build" if torch.version.hip is None else "",
    }
    for backend, vendor in (("cuda", "NVIDIA"), ("rocm", "AMD")):
        if not why[backend]:
            why[backend] = (
                f"{torch.cuda.get_device_name(0)} found"
                if found == backend
                else f"no {vendor} GPU visible to {build}"
            )
    where = f"cuda: {why['cuda']}, rocm: {why['rocm']}"
    if found is not None:  # a GPU of the other kind
        raise UserError(
            f"--backend {requested}: no {requested} GPU here ({where})",
            f"use --backend auto (or {found}); run `evolve doctor` for what is missing",
        )
    raise UserError(
        f"no usable GPU here ({where}); `evolve verify --backend static` and `evolve tasks ...` "
        "still work; run `evolve doctor` for what is missing"
    )


def gpu_evaluator(task: TaskSpec, settings: Settings, backend: str) -> Evaluator:
    """The production evaluator: the verifier pipeline on this machine's GPUs (one worker slot
    per visible GPU), or on a Ray cluster's when settings.verifier.ray names one.

    Raises UserError when there is no usable GPU or its compiler is missing.
    """
    if settings.verifier.ray:
        _require_ray_installed()  # the cheaper mistake first: no Ray at all (read, not imported)
        if settings.verifier.ray == "auto" and not _ray_cluster_here():
            require_gpu(backend)  # auto starts a cluster on this machine: its GPUs are the ones
        return ray_evaluator(task, settings, backend)
    evaluator = PipelineEvaluator(task, settings.verifier, require_gpu(backend))
    evaluator.start()  # its judges start while the run sets up, times and builds
    return evaluator


def _require_ray_installed() -> None:
    """Ray's distribution is installed, read from its metadata without importing Ray (seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("ray")
    except PackageNotFoundError:
        _require_ray()  # no metadata: the import says how it is missing


def _require_ray() -> None:
    try:
        import ray  # noqa: F401  (the evaluator imports it when it connects)
    except ImportError:
        raise UserError(
            "--ray needs Ray, which is not installed here",
            "run scripts/setup.sh, or pip install 'hipevolve[ray]'",
        ) from None


def _ray_cluster_here() -> bool:
    """Whether `--ray auto` would join a running cluster (RAY_ADDRESS, or the file a Ray head
    on this machine leaves) rather than start one here; read without importing Ray (seconds)."""
    return (
        bool(os.environ.get("RAY_ADDRESS"))
        or Path(tempfile.gettempdir(), "ray", "ray_current_cluster").exists()
    )


def ray_evaluator(task: TaskSpec, settings: Settings, backend: str) -> Evaluator:
    """Workers on the cluster's GPUs; the GPU backend is the workers', this machine may have none."""
    _require_ray()
    from hipevolve.verifier.ray import RayEvaluator

    if backend == "static":
        require_gpu(backend)  # the one-line refusal: a static backend cannot search
    if backend == "auto":
        backend = _cluster_backend()
    return RayEvaluator(task, settings.verifier, backend, settings.verifier.ray or "auto")


def _cluster_backend() -> str:
    """rocm when this machine runs ROCm's PyTorch, else cuda (a cluster runs one kind of GPU)."""
    import torch

    return "rocm" if torch.version.hip else "cuda"
