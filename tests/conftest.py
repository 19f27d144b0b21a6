"""Markers: `gpu` tests need a CUDA or ROCm GPU and are skipped without one."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """The ROCm build tests' counts (tests/test_rocm_build.py), one line, even under -q."""
    for line in getattr(config, "rocm_build_summary", []):
        terminalreporter.write_line(line)
