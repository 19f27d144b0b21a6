"""The static screen on a candidate's HIP side (tests/test_static_checks.py has the rest): its
includes and pragmas against the allowlist, host-code attacks, inline assembly, managed memory
and null-stream launches, and the launchers model.py may call."""

from __future__ import annotations

import pytest
from test_static_checks import KERNEL, forward, kernelbench, native

from hipevolve.core.candidate import Candidate
from hipevolve.verifier.screen.screening import screen

# ----------------------------------------------------------------------------- HIP side


def hip_with(extra: str, launcher_body: str = "") -> Candidate:
    hip = KERNEL.replace("#include <cstdint>", "#include <cstdint>\n" + extra)
    hip = hip.replace(
        "    return hipGetLastError();", launcher_body + "\n    return hipGetLastError();"
    )
    model = """
        class ModelNew(nn.Module):
            def forward(self, x):
                out = torch.empty_like(x)
                kernels.scale(x, out, 2.0, x.numel())
                return out
        """
    return native(model, hip)


@pytest.mark.parametrize(
    ("extra", "ok"),
    [
        ("#include <hip/hip_bf16.h>\n#include <cmath>\n#include <type_traits>", True),
        ("#include <hip/amd_detail/amd_warp_functions.h>", True),
        ("#include <cstdio>", False),
        ("#include <fstream>", False),
        ('#include "helpers.h"', False),
        ("#include </usr/include/stdio.h>", False),
        ("#include <hip/../../secret.h>", False),
        ("#define H <cstdio>\n#include H", False),
        ("#include_next <cmath>", False),
        ("#include <torch/extension.h>", False),
        ("#  include   <thread>", False),
    ],
)
def test_includes_follow_the_allowlist(extra, ok):
    screening = screen(hip_with(extra))
    assert screening.passed is ok, screening.flags
    if not ok:
        assert {f.check for f in screening.strict} == {"hip-include"}


def test_kernelbench_sources_may_include_torch_headers_only_inline():
    candidate = kernelbench(
        """
        import torch.nn as nn
        from torch.utils.cpp_extension import load_inline

        cuda = '''
        #include <torch/extension.h>
        #include <ATen/cuda/CUDAContext.h>
        #include <cuda_runtime.h>
        #include <unistd.h>
        '''
        ext = load_inline(name="m", cpp_sources="", cuda_sources=cuda, functions=["f"])


        class ModelNew(nn.Module):
            def forward(self, x):
                return ext.f(x)
        """
    )
    strict = screen(candidate).strict
    assert [(f.check, f.line) for f in strict] == [("hip-include", 9)]
    assert "unistd.h" in strict[0].message


@pytest.mark.parametrize(
    ("extra", "ok"),
    [
        ("#pragma once", True),
        (
            "__device__ void f(float* p) {\n#pragma unroll 4\n  for (int i = 0; i < 8; ++i) p[i] = 0;\n}",
            True,
        ),
        (
            "__device__ void f(float* p) {\n#pragma clang loop unroll(full)\n  for (int i = 0; i < 8; ++i) p[i] = 0;\n}",
            True,
        ),
        ('#pragma GCC optimize("O0")', False),
        ('_Pragma("clang attribute push")', False),
    ],
)
def test_pragmas_follow_the_allowlist(extra, ok):
    screening = screen(hip_with(extra))
    assert screening.passed is ok, screening.flags


@pytest.mark.parametrize(
    ("body", "check"),
    [
        ('    system("ls");', "host-escape"),
        ('    void* h = dlopen("libx.so", 2);', "host-escape"),
        ("    int s = socket(2, 1, 0);", "host-escape"),
        ('    const char* k = getenv("OPENAI_API_KEY");', "env-read"),
        ('    FILE* f = fopen("/tmp/x", "w");', "file-io"),
        ("    hipStream_t s2; hipStreamCreate(&s2);", "streams"),
        ("    std::thread t([] {});", "threads-processes"),
        ("    hipDeviceReset();", "device-state"),
        ("    atexit(+[] {});", "exit-hooks"),
    ],
)
def test_host_code_attacks_are_strict(body, check):
    screening = screen(hip_with("", body))
    assert check in {f.check for f in screening.strict}, screening.flags


def test_words_in_comments_and_strings_do_not_fire():
    body = '    // system("ls"); hipStreamCreate(&s); getenv("X")\n    /* fopen("/x") */\n'
    body += '    printf("popen( system( getenv(\\n");'
    assert screen(hip_with("", body)).passed


def test_inline_asm_is_a_warning_that_notes_its_platform_guard():
    guarded = """
#if defined(__HIP_PLATFORM_AMD__)
__device__ inline void nop() { asm volatile("s_nop 0"); }
#else
__device__ inline void nop() { asm volatile("nanosleep.u32 0;"); }
#endif
#if defined(__HIP_PLATFORM_NVIDIA__) && USE_MMA
__device__ inline void bar() { asm volatile("bar.sync 0;"); }
#endif
#if USE_ASM
__device__ inline void nap() { asm volatile("nanosleep.u32 1;"); }
#elif defined(__HIP_PLATFORM_AMD__)
__device__ inline void nap() { asm volatile("s_nop 1"); }
#else
__device__ inline void nap() { asm volatile("s_nop 2"); }
#endif
"""
    screening = screen(hip_with(guarded))
    assert screening.passed
    messages = [f.message for f in screening.warnings if f.check == "inline-asm"]
    assert messages == [
        "inline asm (under an AMD guard)",
        "inline asm (under an NVIDIA guard)",  # the #else of an AMD guard
        "inline asm (under an NVIDIA guard)",
        "inline asm (not under a platform guard)",
        "inline asm (under an AMD guard)",
        "inline asm (not under a platform guard)",  # the #else of an #if ... #elif chain
    ]


def test_managed_memory_and_null_stream_launches_are_warnings():
    hip = KERNEL.replace("0, stream>>>", ">>>").replace(
        "    return hipGetLastError();",
        "    float* m; hipMallocManaged(&m, 4);\n    return hipGetLastError();",
    )
    model = (
        "class ModelNew(nn.Module):\n    def forward(self, x):\n"
        "        out = torch.empty_like(x)\n        kernels.scale(x, out, 2.0, x.numel())\n"
        "        return out\n"
    )
    screening = screen(native(model, hip))
    assert screening.passed
    assert {f.check for f in screening.warnings} == {"managed-memory", "launch-null-stream"}


def test_model_calling_an_undeclared_launcher_is_strict():
    screening = screen(forward("out = torch.empty_like(x)\nkernels.nope(x, out)\nreturn out"))
    assert [f.check for f in screening.strict] == ["launcher-mismatch"]
    assert "nope" in screening.message


def test_kernel_without_launchers_is_strict():
    screening = screen(native("class ModelNew(nn.Module):\n    pass\n", "__global__ void k() {}\n"))
    assert "launcher-mismatch" in {f.check for f in screening.strict}
