"""verifier/build/backends.py: the compiler's version, part of every compile cache key."""

from __future__ import annotations

import os
from pathlib import Path

from hipevolve.verifier.build.backends import _version_text, tool_version


def test_tool_version_runs_the_compiler_once_until_its_binary_changes(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    tool = tmp_path / "fakecc"  # a real executable that counts its runs
    tool.write_text(f'#!/bin/sh\necho run >> "{calls}"\necho "fakecc 1.0"\n')
    tool.chmod(0o755)
    assert tool_version(str(tool), _version_text) == "fakecc 1.0\n"
    assert tool_version(str(tool), _version_text) == "fakecc 1.0\n"
    assert calls.read_text().count("run") == 1

    tool.write_text(f'#!/bin/sh\necho run >> "{calls}"\necho "fakecc 2.0 (upgraded)"\n')
    os.utime(tool, ns=(1, 1))  # whatever the clock's resolution, the stamp differs
    assert tool_version(str(tool), _version_text) == "fakecc 2.0 (upgraded)\n"
    assert calls.read_text().count("run") == 2
