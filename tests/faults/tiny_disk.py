"""A real, tiny filesystem for the disk-full tests (FAULTS.md 26).

A tmpfs of a few hundred KiB is mounted in a private mount namespace (unshare) for one child
process, so writes there fail in the kernel with ENOSPC exactly as on a full disk; nothing
outside that child sees the mount, and it disappears with the child. Root enters a new mount
namespace directly; another user goes through a user namespace, where mounting a tmpfs is
allowed without privileges. Where neither works (no unshare, user namespaces disabled) the
tests that need it are skipped with the reason.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = HERE / "disk_full_child.py"
TESTS = HERE.parent


def _namespace() -> list[str]:
    if os.geteuid() == 0:
        return ["unshare", "--mount", "--propagation", "private"]
    return ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]


def _mounted(mountpoint: Path, size_kib: int, argv: list[str]) -> list[str]:
    # sh mounts, then execs the command: "$0" is the mount point, "$@" the command.
    script = f'mount -t tmpfs -o size={size_kib}k hipevolve-faults "$0" && exec "$@"'
    return [*_namespace(), "sh", "-c", script, str(mountpoint), *argv]


@functools.cache
def unavailable() -> str | None:
    """Why a tiny disk cannot be mounted here, or None when it can."""
    if sys.platform != "linux" or shutil.which("unshare") is None:
        return "needs Linux and unshare(1) to mount a private tmpfs"
    with tempfile.TemporaryDirectory() as folder:
        probe = subprocess.run(
            _mounted(Path(folder), 64, ["true"]), capture_output=True, text=True, timeout=30
        )
    if probe.returncode != 0:
        return f"cannot mount a tmpfs in a private namespace here: {probe.stderr.strip()[:200]}"
    return None


def run_on_tiny_disk(mountpoint: Path, size_kib: int, *args: object, timeout: float = 120) -> dict:
    """Runs disk_full_child.py with a fresh tmpfs of `size_kib` at `mountpoint`; its facts."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(CHILD), str(TESTS), str(mountpoint), *map(str, args)]
    proc = subprocess.run(
        _mounted(mountpoint, size_kib, argv), capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0 or not proc.stdout.strip():
        raise AssertionError(f"child failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
