"""The static screen on a candidate's Python side (tests/test_static_checks.py has the rest):
attacks through the interpreter, finalizers, extensions built at run time, load_inline sources
and flags, and code too broken or too deep to parse."""

from __future__ import annotations

import pytest
from test_static_checks import KERNEL, forward, kernelbench, native

from hipevolve.core.candidate import Candidate
from hipevolve.verifier.screen.screening import screen

# ----------------------------------------------------------------------------- Python side


@pytest.mark.parametrize(
    ("body", "check"),
    [
        ("try:\n    pass\nexcept Exception:\n    pass\nreturn x", "try-except"),
        ("s = torch.cuda.Stream()\nreturn x", "streams"),
        ("g = torch.cuda.CUDAGraph()\nreturn x", "streams"),
        ("import os\nos.fork()\nreturn x", "threads-processes"),
        ("from concurrent.futures import ThreadPoolExecutor\nreturn x", "threads-processes"),
        ("torch.cuda.synchronize = lambda: None\nreturn x", "harness-patching"),
        ("setattr(torch, 'allclose', lambda *a, **k: True)\nreturn x", "harness-patching"),
        ("import sys\nsys.modules['statistics'] = None\nreturn x", "harness-patching"),
        ("import os\nkey = os.environ['HOME']\nreturn x", "env-read"),
        ("import os\nkey = os.getenv('HOME')\nreturn x", "env-read"),
        ("open('/tmp/x', 'w').write('1')\nreturn x", "file-io"),
        ("from pathlib import Path\nPath('/tmp/x').write_text('1')\nreturn x", "file-io"),
        ("torch.save(x, '/tmp/x.pt')\nreturn x", "file-io"),
        ("import ctypes\nreturn x", "forbidden-import"),
        ("import pickle\nreturn x", "forbidden-import"),
        ("import importlib\nreturn x", "forbidden-import"),
        ("eval('1')\nreturn x", "dynamic-code"),
        ("f = (lambda: 0).__globals__\nreturn x", "dynamic-code"),
        ("name = 'sh'\nreturn getattr(x, name)", "dynamic-code"),
        ("import weakref\nweakref.finalize(x, print)\nreturn x", "exit-hooks"),
    ],
)
def test_python_side_attacks_are_strict(body, check):
    screening = screen(forward(body))
    assert check in {f.check for f in screening.strict}, screening.flags


def test_del_finalizer_is_strict():
    candidate = native(
        """
        class ModelNew(nn.Module):
            def forward(self, x):
                return x

            def __del__(self):
                kernels.scale(None, None, 0.0, 0)
        """
    )
    assert "exit-hooks" in {f.check for f in screen(candidate).strict}


def test_native_candidate_may_not_build_its_own_extension():
    body = "from torch.utils.cpp_extension import load_inline\nm = load_inline('m', '')\nreturn x"
    assert "extension-build" in {f.check for f in screen(forward(body)).strict}


def test_kernelbench_inline_source_must_be_static():
    candidate = kernelbench(
        """
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline

        header = "cstdio"
        ext = load_inline(name="m", cpp_sources=f"#include <{header}>", functions=["run"])


        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.run(x)
        """
    )
    screening = screen(candidate)
    assert "cannot be screened" in screening.message and screening.strict[0].line == 6


@pytest.mark.parametrize(
    ("flags", "ok"),
    [
        ('extra_cuda_cflags=["-O3", "--use_fast_math", "-std=c++17"]', True),
        ('extra_cflags=["-O2"], extra_ldflags=[]', True),
        ('extra_cflags=["-Ifoo"]', False),
        ('extra_cuda_cflags=["-DNDEBUG"]', False),
        ('extra_ldflags=["-lcublas"]', False),
        ('extra_include_paths=["/usr/include"]', False),
        ("extra_cflags=FLAGS", False),
        ('build_directory="/tmp/shared"', False),
    ],
)
def test_load_inline_flags_follow_the_allowlist(flags, ok):
    candidate = kernelbench(
        f"""
        import random
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline

        FLAGS = ["-O3"] if random.random() < 2 else ["-I/"]
        ext = load_inline(name="m", cpp_sources="int f();", functions=["f"], {flags})


        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.f(x)
        """
    )
    assert screen(candidate).passed is ok, screen(candidate).flags


def test_broken_python_is_a_strict_finding_not_an_exception():
    candidate = Candidate(
        format="native", hip_source=KERNEL, python_source="class ModelNew(:\n", name="x"
    )
    screening = screen(candidate)
    assert [f.check for f in screening.strict] == ["python-syntax"]
    assert screening.strict[0].line == 1


@pytest.mark.parametrize("depth", [1500, 20000])
def test_deeply_nested_code_is_rejected_not_crashed(depth):
    # 1500 parses but is too deep to walk; 20000 is too deep for the parser itself.
    screening = screen(forward("return x" + ".y" * depth))
    assert [f.check for f in screening.strict] == ["python-syntax"]
