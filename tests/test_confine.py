"""The sandbox's file system view (verifier/gpu/confine.py): a private, empty /dev/shm per
sandbox, writes only under its own folder and the GPU device nodes, and reads only there and
in Python's and the system's folders, so the judge hands it copies of its job's files
(channel.hand_over)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

import hipevolve
from hipevolve.verifier.gpu import confine
from hipevolve.verifier.gpu.job import CandidateJob
from hipevolve.verifier.gpu.judge.channel import hand_over

PROBE = """
import json, sys
from pathlib import Path
import hipevolve
from hipevolve.verifier.gpu import confine
from hipevolve.verifier.gpu.judge.channel import hand_over
from hipevolve.verifier.gpu.job import CandidateJob
workdir, name = sys.argv[1], sys.argv[2]
flags = confine.confine_process([workdir, "/dev", "/proc/self"])
result = {"flags": flags, "seen": Path("/dev/shm", name).exists()}
for where in ("/dev/shm", "/tmp", "/dev", workdir):
    try:
        Path(where, name).write_text("note")
        result[where] = "written"
    except OSError as e:
        result[where] = type(e).__name__
print(json.dumps(result))
"""


def probe(workdir, name: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, str(workdir), name],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(confine.landlock_abi() < 1, reason="Landlock is not available here")
def test_a_note_in_dev_shm_is_private_and_writes_outside_the_folder_fail(tmp_path):
    name = f"hipevolve-confine-{uuid.uuid4().hex}"
    (tmp_path / "a").mkdir()
    first = probe(tmp_path / "a", name)
    assert "shm:private" in first["flags"], first["flags"]
    assert first["/dev/shm"] == "written"  # the sandbox's own tmpfs
    assert first["/tmp"] == "PermissionError"
    assert first["/dev"] == "PermissionError"  # device nodes only, no new files under /dev
    assert first[str(tmp_path / "a")] == "written"
    (tmp_path / "b").mkdir()
    second = probe(tmp_path / "b", name)
    assert second["seen"] is False
    for where in ("/dev/shm", "/tmp", "/dev"):
        assert not (Path(where) / name).exists(), f"{where}/{name} reached the host"


READ_PROBE = """
import json, sys
from pathlib import Path
from hipevolve.verifier.gpu import confine
workdir, planted = sys.argv[1], sys.argv[2]
Path(workdir, "own.txt").write_text("own")
flags = confine.confine_process([workdir, "/dev", "/proc/self"])
import torch  # after the confinement, from site-packages
from hipevolve.verifier.gpu import plan  # a verifier module not imported before
result = {"flags": flags, "torch": float(torch.ones(4).sum())}
for path in (planted, "/etc/passwd", str(Path(workdir, "own.txt")), "/etc/ld.so.cache"):
    try:
        Path(path).read_bytes()
        result[path] = "read"
    except OSError as e:
        result[path] = type(e).__name__
print(json.dumps(result))
"""


@pytest.mark.skipif(confine.landlock_abi() < 1, reason="Landlock is not available here")
def test_a_confined_process_reads_its_folder_python_and_the_system_and_no_other_file(tmp_path):
    planted = tmp_path / "planted.txt"
    planted.write_text("secret")
    (tmp_path / "box").mkdir()
    proc = subprocess.run([sys.executable, "-c", READ_PROBE, str(tmp_path / "box"), str(planted)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["torch"] == 4.0
    assert result[str(planted)] == "PermissionError"
    assert result["/etc/passwd"] == "PermissionError"
    assert result[str(tmp_path / "box" / "own.txt")] == "read"
    assert result["/etc/ld.so.cache"] == "read"


def test_the_verifiers_packages_are_read_and_the_checkout_around_them_is_not():
    read, _ = confine.python_roots()
    package = Path(hipevolve.__file__).resolve()
    checkout_file = package.parents[1] / "README.md"
    assert any(package.is_relative_to(root) for root in read)
    assert not any(checkout_file.is_relative_to(root) for root in read), read


def test_a_sandbox_is_handed_copies_of_its_files_in_its_own_folder(tmp_path):
    extensions = tmp_path / "cache" / "kernelbench" / "key"
    extensions.mkdir(parents=True)
    (extensions / "ext.so").write_bytes(b"\x7fELF")
    (extensions / "build.ninja").write_text("rule cc")
    reference = tmp_path / "task" / "reference.py"
    model = tmp_path / "candidate" / "model.py"
    for path in (reference, model):
        path.parent.mkdir()
        path.write_text(f"# {path.name}")
    box = tmp_path / "box"
    given_reference, given = hand_over(
        str(box), reference, CandidateJob(format="kernelbench", model=model, library=extensions)
    )
    assert given_reference.read_text() == "# reference.py"
    assert given.model.read_text() == "# model.py"
    assert sorted(p.name for p in given.library.iterdir()) == ["ext.so"]  # what is loaded only
    for path in (given_reference, given.model, given.library):
        assert path.is_relative_to(box), path
    (given.library / "ext.so").write_bytes(b"changed")  # a copy: the cache's file stays as it was
    assert (extensions / "ext.so").read_bytes() == b"\x7fELF"


def test_dev_stands_for_the_device_nodes_and_a_private_shm_only():
    paths = confine.expand_writable(["/work/x", "/dev", "/proc/self"], shm=True)
    assert "/dev" not in paths and "/dev/null" in paths and "/dev/shm" in paths
    assert "/work/x" in paths and "/proc/self" in paths
    assert "/dev/shm" not in confine.expand_writable(["/dev"], shm=False)
    assert all(p.startswith(("/dev/nvidia", "/dev/kfd", "/dev/dri", "/dev/null", "/dev/zero",
                             "/dev/full", "/dev/shm")) for p in confine.expand_writable(
                                 ["/dev"], shm=True))  # fmt: skip


@pytest.mark.gpu
def test_gpu_tensors_shared_by_ipc_from_a_private_shm_sandbox_reach_the_judge():
    """CUDA IPC still works when the sandbox's /dev/shm is its own: torch's sender-side counter
    file lives there, and the judge opens the memory with a counter file of its own."""
    probe = Path(__file__).with_name("confine_ipc_probe.py")
    proc = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "shm:private" in result["flags"], result
    assert result["opened_equal"] is True, result
    assert result["note"] == "written" and result["note_on_host"] is False, result
