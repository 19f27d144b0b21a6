"""What a candidate can reach of the host, on the CPU path (tests/hostile/test_hostile.py's
jobs): the controller's secrets, files outside its folder (to write or to read), notes and kernel
objects left for the next candidate, TCP sockets. Each attack is caught and a healthy candidate
evaluated next still scores ok (FAULTS.md 8, 12, 41)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_hostile import HERE, assert_healthy_next, evaluate

from hipevolve.core.evaluation import Status
from hipevolve.verifier.gpu import confine


def test_secrets_in_the_controller_environment_are_invisible_to_the_candidate() -> None:
    """The controller runs in its own process whose real (initial) environment holds the
    secrets, so /proc/<controller>/environ would show them if the candidate could read it."""
    secret = "sk-hipevolve-test-0123456789"
    code = (
        f"import sys; from pathlib import Path; sys.path.insert(0, {str(HERE)!r});"
        "from test_hostile import evaluate;"
        "r = evaluate('dyn_read_secret'); print(r.status.value); print(r.message)"
    )
    env = dict(os.environ, HIPEVOLVE_TEST_SECRET=secret, OPENAI_API_KEY=secret)
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    status, message = proc.stdout.strip().splitlines()[-2:]
    assert secret not in proc.stdout
    assert status == "runtime_error"
    assert "found=[]" in message, message
    assert_healthy_next()


def test_writes_outside_the_sandbox_folder_are_denied() -> None:
    if confine.landlock_abi() < 1:
        pytest.skip(
            "Landlock is not available on this kernel (CONFIG_SECURITY_LANDLOCK or "
            "lsm= lacks it): writes outside the sandbox cannot be denied here"
        )
    from dyn_write_outside import TARGETS  # noqa: PLC0415 (the attack's own list)

    for target in TARGETS:
        target.unlink(missing_ok=True)
    result = evaluate("dyn_write_outside")
    assert result.status is Status.ok, result.message
    escaped = [str(t) for t in TARGETS if t.exists()]
    for target in TARGETS:
        target.unlink(missing_ok=True)
    assert not escaped, f"files written outside the sandbox: {escaped}"
    assert any(f.startswith("landlock:abi") for f in result.flags)
    assert_healthy_next()


def test_notes_left_in_dev_shm_and_tmp_reach_no_later_candidate() -> None:
    from dyn_shm_note import NOTES  # noqa: PLC0415 (the attack's own list)

    for note in NOTES:
        note.unlink(missing_ok=True)
    first, second = evaluate("dyn_shm_note"), evaluate("dyn_shm_note")
    left = [str(n) for n in NOTES if n.exists()]
    for note in NOTES:
        note.unlink(missing_ok=True)
    assert first.status is Status.ok, first.message
    assert second.status is Status.ok, f"the second run found a note: {second.message}"
    assert not left, f"notes left on the host: {left}"
    assert "shm:private" in first.flags, first.flags
    assert_healthy_next()


def test_host_files_are_unreadable_to_the_candidate() -> None:
    if confine.landlock_abi() < 1:
        pytest.skip("Landlock is not available on this kernel: reads cannot be confined here")
    from dyn_read_host_files import PLANTED  # noqa: PLC0415 (the attack's own path)

    PLANTED.write_text("planted-secret-7f3a")
    try:
        result = evaluate("dyn_read_host_files")
    finally:
        PLANTED.unlink(missing_ok=True)
    assert result.status is Status.runtime_error, result.message
    assert "read=[]" in result.message, result.message
    assert "planted-secret" not in result.message and "root:x:" not in result.message
    assert_healthy_next()


def _remove_kernel_objects(key: int, mq_name: bytes) -> list[str]:
    """The SysV objects of `key` (/proc/sysvipc) and the POSIX message queue `mq_name` on the
    host, removed; their kinds."""
    import ctypes  # noqa: PLC0415

    libc = ctypes.CDLL(None, use_errno=True)
    found = ["mq"] if libc.mq_unlink(mq_name) == 0 else []
    for kind, remove in (("shm", libc.shmctl), ("sem", libc.semctl), ("msg", libc.msgctl)):
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:]
        for fields in (line.split() for line in lines):
            if int(fields[0]) == key:
                found.append(kind)
                remove(int(fields[1]), 0, None)  # IPC_RMID
    return found


def test_kernel_objects_a_candidate_makes_reach_no_later_candidate() -> None:
    from dyn_kernel_objects import KEY, MQ_NAME  # noqa: PLC0415 (the attack's own names)

    _remove_kernel_objects(KEY, MQ_NAME)
    first, second = evaluate("dyn_kernel_objects"), evaluate("dyn_kernel_objects")
    left = _remove_kernel_objects(KEY, MQ_NAME)
    assert first.status is Status.ok, first.message
    assert second.status is Status.ok, second.message
    assert not left, f"SysV objects left on the host: {left}"
    assert "seccomp:on" in first.flags, first.flags
    assert_healthy_next()


def test_tcp_socket_to_localhost_is_denied() -> None:
    from dyn_socket import PORT  # noqa: PLC0415

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", PORT))
    except OSError:
        pytest.skip(f"port {PORT} is in use here")
    listener.listen(4)
    listener.settimeout(0.2)
    accepted: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                accepted.append(conn.recv(64))
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        result = evaluate("dyn_socket")
    finally:
        stop.set()
        thread.join(2)
        listener.close()
    assert result.status is Status.runtime_error, result.message
    assert "Operation not permitted" in result.message
    assert not accepted
    assert_healthy_next()
