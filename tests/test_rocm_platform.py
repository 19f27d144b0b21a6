"""The Python side's platform assumptions under ROCm PyTorch (issue 36; docs/ROCM.md lists them).

No AMD GPU and no ROCm PyTorch run here, so each test puts the smallest fake that ROCm's and
PyTorch's documented behaviour allows in front of the real code:
- ROCm builds of PyTorch keep the torch.cuda API (HIP is exposed as "cuda") and say they are
  ROCm through torch.version.hip, a version string (torch.version.cuda is None there);
- their device properties carry gcnArchName ("gfx942:sramecc+:xnack-");
- the HIP runtime selects GPUs by HIP_VISIBLE_DEVICES, and honours CUDA_VISIBLE_DEVICES when that
  is unset; ROCR_VISIBLE_DEVICES acts below it;
- hipIpcMemHandle_t is HIP_IPC_HANDLE_SIZE (64) bytes, read from the HIP headers themselves;
- hipEventElapsedTime, behind torch.cuda.Event.elapsed_time, returns milliseconds, as CUDA's;
- MI300X has 256 MB of Infinity Cache and 4 MB of L2 per XCD (8 XCDs); MI355X the same.
Each fake is named in its test's docstring.
"""

from __future__ import annotations

import dataclasses
import re
import types
from pathlib import Path

import pytest
import torch

from hipevolve.verifier import isolate, slots
from hipevolve.verifier.build import backends
from hipevolve.verifier.gpu import ipc, timing
from hipevolve.verifier.gpu.job import WorkerJob

ROOT = Path(__file__).resolve().parents[1]
HIP_HEADERS = [Path("/opt/rocm/include/hip"), Path("/opt/hipevolve-amd/include/hip")]


@pytest.fixture
def rocm_torch(monkeypatch):
    """Fake: torch as a ROCm build with one MI300X: version.hip set, version.cuda None,
    is_available True, gcnArchName in the device properties (PyTorch's HIP semantics)."""
    monkeypatch.setattr(torch.version, "hip", "6.2.41133-dd7f95766")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    props = types.SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-", name="AMD Instinct MI300X",
                                  total_memory=192 << 30)  # fmt: skip
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *_: props)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: props.name)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    backends._rocm_arch.cache_clear()
    yield
    backends._rocm_arch.cache_clear()


def test_torch_version_hip_selects_the_rocm_backend(rocm_torch):
    """Fake: rocm_torch. The rocm backend follows from torch.version.hip, as in doctor."""
    from hipevolve.app.doctor import _gpus

    assert backends.gpu_backend() == "rocm"
    assert backends.resolve_backend("auto") == "rocm"
    assert "backend rocm" in _gpus().detail


def test_gfx_target_is_read_from_gcn_arch_name_without_amdgpu_arch(rocm_torch, monkeypatch):
    """Fake: rocm_torch, and no amdgpu-arch on PATH (the ROCm tool the backend asks first)."""
    monkeypatch.setattr(backends.shutil, "which", lambda _: None)
    monkeypatch.setattr(backends, "ROCM_BIN", Path("/nonexistent/bin"))
    assert backends._rocm_arch() == "gfx942"
    assert backends.device_name("rocm") == "an AMD GPU (gfx942)"


def test_rocm_pins_gpus_with_hip_visible_devices(monkeypatch):
    """Fake: the environment only. HIP_VISIBLE_DEVICES pins a slot's judges; without it HIP
    honours CUDA_VISIBLE_DEVICES, so that list is the slots' list too."""
    assert slots.visibility_variable("rocm") == "HIP_VISIBLE_DEVICES"
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1,3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert slots.visible_gpus("rocm") == ("1", "3")
    monkeypatch.delenv("HIP_VISIBLE_DEVICES")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert slots.visible_gpus("rocm") == ("2", "3")


def test_the_sandbox_environment_keeps_the_rocm_variables():
    """No fake: the allowlist itself. The HIP runtime and ROCr read these in the judge."""
    needed = {"HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ROCM_PATH", "HIP_PATH"}
    assert needed <= set(isolate.ENV_ALLOWLIST)


def test_ipc_handle_size_is_hips_own():
    """No fake: HIP_IPC_HANDLE_SIZE read from the HIP headers (ROCm's, else the prefix's)."""
    header = next((h / "hip_runtime_api.h" for h in HIP_HEADERS
                   if (h / "hip_runtime_api.h").exists()), None)  # fmt: skip
    if header is None:
        pytest.skip("no HIP headers here (scripts/install_amd_toolchain.sh installs them)")
    size = re.search(r"#define\s+HIP_IPC_HANDLE_SIZE\s+(\d+)", header.read_text())
    assert size and int(size[1]) == ipc.HANDLE_BYTES
    # torch's versioned form ([version]['c'][handle]) is the same on ROCm: one source, hipified.
    assert ipc.handle_ok(b"\x01c" + bytes(int(size[1])))


def test_cache_flush_covers_mi300x_infinity_cache_and_l2():
    """No fake: the figures. 256 MB Infinity Cache + 8 x 4 MB L2 on MI300X (and MI355X)."""
    mi300x_bytes = 256 * 10**6 + 8 * 4 * 2**20
    job_default = next(f.default for f in dataclasses.fields(WorkerJob) if f.name == "flush_bytes")
    assert timing.FLUSH_BYTES == job_default >= mi300x_bytes


class _Event:
    log: list[str] = []

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.name = f"e{len([x for x in _Event.log if x.startswith('new')])}"
        _Event.log.append("new")


def test_judge_timing_uses_events_in_milliseconds_as_hip_does(monkeypatch):
    """Fake: torch.cuda's event, stream and synchronise calls recording their order, with
    elapsed_time in milliseconds (hipEventElapsedTime's unit, as cudaEventElapsedTime's)."""
    log = _Event.log
    log.clear()
    base = types.SimpleNamespace(
        record=lambda e, s: log.append(f"record {e.name}"),
        elapsed_time=lambda a, b: {"e1": 0.25, "e2": 0.5}[b.name],
        synchronize=lambda e: log.append(f"wait {e.name}"),
    )
    monkeypatch.setattr(torch._C, "_CudaEventBase", base)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: log.append("device sync"))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: "stream")
    monkeypatch.setattr(torch.cuda, "current_device", lambda *a: 0)  # graph capture's device
    monkeypatch.setattr(torch, "empty", lambda *a, **k: "flush buffer")
    monkeypatch.setattr(torch.Tensor, "zero_", lambda t: log.append(f"zero {t}"))
    clock = timing.Clock("cuda:0", flush_bytes=16)
    assert clock.trial(lambda: log.append("call")) == (250.0, 500.0)  # microseconds
    assert [x for x in log if x != "new"] == [
        "zero flush buffer", "record e0", "call", "record e1", "device sync", "record e2", "wait e2",
    ]  # fmt: skip


# Calls that exist only on NVIDIA, and the one place each may appear: a cuda-only branch.
CUDA_ONLY = re.compile(
    r"torch\.cuda\._sleep|torch\.cuda\.nvtx|jiterator|torch\.backends\.cud|nvidia-smi"
    r"|torch\.version\.cuda|get_device_capability|pynvml"
)
ALLOWED = {
    "verifier/build/backends.py": "_cuda_arch and device_name's cuda branch",
    "hipevolve/app/evaluator_choice.py": "the cuda backend's own check that PyTorch is a CUDA build",
    "hipevolve/export/templates/loader.py": "device_arch's NVIDIA branch",
    "verifier/screen/escape.py": "names the screen refuses in candidates, not calls",
    "hipevolve/app/doctor.py": "the nvcc check's word that a CPU-only torch cannot load its builds",
    "verifier/build/kernelbench.py": "the extension cache key names torch.version.cuda and .hip",
    "verifier/pipeline.py": "gpu_clocks asks nvidia-smi, else rocm-smi, whichever answers",
}


def test_cuda_only_calls_appear_only_in_cuda_only_places():
    """No fake: a scan of verifier/ and hipevolve/ (torch.cuda._sleep is bench-only)."""
    found = {str(p.relative_to(ROOT)) for folder in ("verifier", "hipevolve")
             for p in (ROOT / folder).rglob("*.py") if CUDA_ONLY.search(p.read_text())}  # fmt: skip
    assert found <= set(ALLOWED), found - set(ALLOWED)
