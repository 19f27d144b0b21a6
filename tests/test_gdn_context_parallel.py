"""Context parallelism (CP) in the GDN prefill seed (problems/gated_delta_net/seeds/chunked):
each sequence cut into segments of L chunks run side by side, every segment's initial state made
exact by its state map (S_out = M S_in + c) chained in series in fp32 (kernel.hip, gdn_cp_fwd).

Without a GPU: the seed's CP launcher runs on CPU threads (gdn_cpu_threads.py: the fused fp32
kernel in its two summary modes and its plain mode over the segments, the plan, fixup and
final-state copy kernels) and must match the task's
reference at the fp32 path's accuracy, on batch rows and on ragged packed sequences from random
states, with grouped value heads and segment counts that do not divide the lengths; model.py's
dispatch runs end to end there with CP forced on; the wave model picks CP for the long H200 cases
and not for the packed batches; the new kernels build for gfx942 and sm_90 without spills. The
NVIDIA summary and main pass are the tensor-core scan (gdn_tc_scan in GDN_SUMMARY and GDN_PLAIN
modes): mma.sync does not run on CPU threads, so only its build is checked here.
"""

from __future__ import annotations

import ctypes
import math
import re
import shutil
import subprocess

import pytest
import torch
from gdn_cpu_threads import CPU_SMS, cpu_library, launcher
from gdn_seed_support import GDN, PREFILL, PREFILL_SEED, import_model, rel_rms, source_of
from gdn_seed_support import with_define as _with_define

H200_SMS = 132


def with_defines(**defines: int) -> str:
    source = source_of(PREFILL_SEED)
    for name, value in defines.items():
        source = _with_define(source, name, value)
    return source


def choose(lib: ctypes.CDLL, n: int, t: int, hv: int, packed: bool, sms: int) -> tuple[int, int]:
    """gdn_cp_choose: (segment chunks, 0 for no CP; CP workspace bytes)."""
    fn = lib.gdn_cp_choose
    fn.argtypes = [ctypes.c_int] * 5 + [ctypes.c_void_p]
    fn.restype = ctypes.c_int
    out = torch.zeros(2, dtype=torch.int64)
    assert fn(n, t, hv, int(packed), sms, out.data_ptr()) == 0
    return int(out[0]), int(out[1])


def cp_bytes(n: int, t: int, hv: int, packed: bool, chunks: int) -> int:
    """An upper bound of gdn_cp_fwd's workspace for `chunks`-chunk segments (cp_layout's sizes,
    each rounded up to 256 bytes, plus slack)."""
    span = chunks * 64
    segs = t // span + n if packed else n * math.ceil(t / span)
    maps = segs * hv * 128 * 128 * 4 * 3  # cm (c | M) and the segments' initial states
    return maps + (segs + n + 8) * 16 + 8 * 256


def run_cp(lib: ctypes.CDLL, inputs: list, chunks: int) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, v, g, beta, h0, *cu = inputs
    cu_seqlens = cu[0] if cu else None
    b, t, h, _ = q.shape
    hv, n = v.shape[2], h0.shape[0]
    work = torch.zeros(cp_bytes(n, t, hv, cu_seqlens is not None, chunks), dtype=torch.uint8)
    o = torch.full((b, t, hv, 128), float("nan"), dtype=torch.bfloat16)
    ht = torch.full((n, hv, 128, 128), float("nan"))
    pointers = [x.data_ptr() for x in (q, k, v, g, beta, h0)]
    pointers += [None if cu_seqlens is None else cu_seqlens.data_ptr()]
    pointers += [x.data_ptr() for x in (o, ht, work)]
    run = launcher(lib, "gdn_cp_fwd", 10, 5)
    assert run(*pointers, n, t, h, hv, chunks, None) == 0
    return o, ht


# (name, get_inputs arguments, segment chunks, kernel.hip defines): every case cuts sequences
# into several segments, the last one short.
CP_CASES = [
    ("batch_rows_gva", dict(B=2, T=200, H=1, HV=2), 1, {}),  # 4 segments per row, 8 tokens last
    ("gva_4x", dict(B=1, T=300, H=1, HV=4), 1, {"BV": 64, "CP_FIX_BV": 8}),  # 5 segments
    ("varlen_ragged", dict(B=1, T=492, H=2, HV=4, seqlens="130,1,64,257,40"), 2,
     {"CP_FIX_BV": 32}),  # 130 -> 128 + 2, 257 -> 128 + 128 + 1; 1, 64, 40 stay whole
]  # fmt: skip


@pytest.mark.parametrize("name, shape, chunks, defines", CP_CASES, ids=[c[0] for c in CP_CASES])
def test_cp_path_matches_the_reference_on_cpu_threads(name, shape, chunks, defines, tmp_path):
    lib = cpu_library(with_defines(**defines), tmp_path, warp=32)
    torch.manual_seed(len(name))
    inputs = GDN.get_inputs(**shape, initial_state="random")
    # Gates that keep memory across segments (the task's g = logsigmoid(randn) / 16 forgets a
    # segment's start within a few chunks), so M and the fixup chain carry real weight.
    inputs[3] = inputs[3] / 8
    o, ht = run_cp(lib, inputs, chunks)
    want_o, want_h = GDN.Model()(*inputs)
    assert rel_rms(o, want_o) < 1e-4, name
    for i in range(ht.shape[0]):  # every sequence's own final state
        assert rel_rms(ht[i], want_h[i]) < 1e-5, (name, i)


def test_cp_state_maps_carry_the_initial_state_exactly(tmp_path):
    """With g = 0 and beta = 0 every token is the identity map, so every segment's M is I and c
    is 0 from v's point of view... except v must still be ignored: o = h0^T q, the state h0."""
    lib = cpu_library(source_of(PREFILL_SEED), tmp_path, warp=32)
    torch.manual_seed(3)
    inputs = GDN.get_inputs(B=1, T=260, H=1, HV=2, initial_state="random")
    inputs[3] = torch.zeros_like(inputs[3])
    inputs[4] = torch.zeros_like(inputs[4])
    o, ht = run_cp(lib, inputs, 1)
    want_o, want_h = GDN.Model()(*inputs)
    assert rel_rms(ht, inputs[5]) < 1e-6  # carried through 5 segments by the fixup
    assert rel_rms(o, want_o) < 1e-4


def _cpu_kernels(lib: ctypes.CDLL, source: str):
    """model.py's `kernels`, bound to a CPU build (no stream: the CPU shim)."""

    class CpuKernels:
        def __getattr__(self, name):
            ret = re.search(rf'extern "C" hipError_t {name}\(([^)]*)\)', source)
            params = [p.strip() for p in ret[1].split(",")]
            fn = getattr(lib, name)
            fn.argtypes = [ctypes.c_void_p if "*" in p or "hipStream_t" in p else ctypes.c_int
                           for p in params]  # fmt: skip
            fn.restype = ctypes.c_int

            def call(*args):
                values = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
                if len(values) == len(params) - 1:
                    values.append(None)
                assert fn(*values) == 0, name

            return call

    return CpuKernels()


def test_the_plain_entry_points_take_the_cp_path_at_the_launch_on_cpu_threads(tmp_path):
    """model.py calls only gdn_chunk_workspace(_varlen) and gdn_chunk_fwd(_varlen) (the launch
    plan is recorded where no device is); the launch picks CP with the device's SM count. The
    CP build's results differ in their last bits from the plain build's (another summation
    order), which shows the CP path ran, and both match the reference."""
    source = with_defines(CP_MODE=2, CP_SEG_CHUNKS=8)  # CP whenever a sequence passes 8 chunks
    lib = cpu_library(source, tmp_path / "cp", warp=32)
    assert choose(lib, 1, 600, 2, False, CPU_SMS)[0] == 8
    assert choose(lib, 1, 500, 2, False, CPU_SMS)[0] == 0  # 8 chunks: one segment, no CP
    plain_source = with_defines(CP_MODE=0)
    plain = cpu_library(plain_source, tmp_path / "plain", warp=32)
    model = import_model(PREFILL_SEED, "cp")
    torch.manual_seed(5)
    # packed: the launch sees the mean length (600 tokens, over 8 chunks), the device the rest
    for shape in (dict(B=1, T=600, H=1, HV=2), dict(B=1, T=1200, H=1, HV=2, seqlens="1000,200")):
        inputs = GDN.get_inputs(**shape, initial_state="random")
        inputs[3] = inputs[3] / 8
        args = (*inputs[:6], inputs[6] if len(inputs) > 6 else None)
        model.kernels = _cpu_kernels(lib, source)
        o, ht = model.gdn_forward(*args)
        model.kernels = _cpu_kernels(plain, plain_source)
        o_plain, ht_plain = model.gdn_forward(*args)
        want_o, want_h = GDN.Model()(*inputs)
        assert rel_rms(o, want_o) < 1e-4, shape
        assert rel_rms(ht, want_h) < 1e-5, shape
        assert rel_rms(ht_plain, want_h) < 1e-5, shape
        assert not torch.equal(ht, ht_plain), shape  # the CP path ran


# The H200 cases and what the wave model picks there: CP where one long sequence leaves most SMs
# idle (8 value heads: 32 blocks on 132 SMs); not where the plain scan's blocks already fill the
# SMs (long_32: 128 blocks, qwen35_tp1_32k: 128 64-column blocks), as a summary costs about
# twice the main pass there; not for packed batches.
H200_PICKS = {"qwen35_tp8_32k": True, "long_32": False, "qwen35_tp1_32k": False,
              "qwen_tp1_short": False, "qwen_tp1_batch": False, "mha_16": False,
              "qwen35_tp4_varlen_8x4096": False}  # fmt: skip

# Graph-mode times on an H200 (bench/gdn_vs_fla.py, one process) the model was fitted to:
# (case, segment chunks: 0 plain, us measured). The CP row is the one the summary's step was
# fitted on; the others only set the step times with the prep per chunk-head.
H200_MEASURED = [("qwen_tp1_short", 0, 241.5), ("qwen_tp1_batch", 0, 1425.3), ("mha_16", 0, 378.0),
                 ("long_32", 0, 1780.5), ("qwen35_tp8_32k", 0, 1361.2),
                 ("qwen35_tp8_32k", 64, 681.4)]  # fmt: skip


def tc_model_library(tmp_path):
    """A CPU build whose wave model costs the tensor-core path (CP_MODEL_TC 1), as on the H200."""
    return cpu_library("#define CP_MODEL_TC 1\n" + source_of(PREFILL_SEED), tmp_path, warp=32)


def predict(lib: ctypes.CDLL, n: int, t: int, hv: int, packed: bool, sms: int, chunks: int):
    fn = lib.gdn_cp_predict
    fn.argtypes = [ctypes.c_int] * 6 + [ctypes.c_void_p]
    fn.restype = ctypes.c_int
    out = torch.zeros(1, dtype=torch.float64)
    assert fn(n, t, hv, int(packed), sms, chunks, out.data_ptr()) == 0
    return float(out[0])


def h200_shape(name: str) -> tuple[int, int, int, bool]:
    x = {c.name: c.inputs for c in PREFILL.cases}[name]
    seqlens = x.get("seqlens", "")
    n = len(seqlens.split(",")) if seqlens else x["B"]
    return n, x["T"], x["HV"], bool(seqlens)


def test_the_wave_model_picks_cp_for_long_sequences_on_an_h200(tmp_path):
    lib = tc_model_library(tmp_path)
    for name, wants_cp in H200_PICKS.items():
        n, t, hv, packed = h200_shape(name)
        chunks, size = choose(lib, n, t, hv, packed, H200_SMS)
        assert (chunks > 0) == wants_cp, (name, chunks)
        if chunks:
            assert 0 < size <= cp_bytes(n, t, hv, packed, chunks) + (1 << 30)
    assert choose(lib, *h200_shape("qwen35_tp8_32k"), H200_SMS)[0] == 64
    off = with_defines(CP_MODE=0)
    lib_off = cpu_library(off, tmp_path / "off", warp=32)
    assert choose(lib_off, 1, 32768, 8, False, H200_SMS) == (0, 0)


def test_the_wave_model_reproduces_the_h200_times_it_was_fitted_to(tmp_path):
    lib = tc_model_library(tmp_path)
    for name, chunks, measured in H200_MEASURED:
        got = predict(lib, *h200_shape(name), H200_SMS, chunks)
        assert abs(got / measured - 1) < 0.08, (name, chunks, got, measured)


# ----------------------------------------------------------------------------- builds

_NEW_KERNELS = ("gdn_cp_fixup", "gdn_cp_plan", "gdn_cp_final", "gdn_chunk_kernel<1>",
                "gdn_chunk_kernel<2>")  # fmt: skip


@pytest.mark.parametrize("fix_bv", [8, 16, 32])
def test_cp_kernels_build_for_gfx942_without_spills(fix_bv, tmp_path):
    amd_static = pytest.importorskip("hipevolve.verifier.build.amd_static")
    toolchain = amd_static.find_toolchain()
    if toolchain is None or "gfx942" not in toolchain.targets:
        pytest.skip("no AMD static toolchain for gfx942 (scripts/install_amd_toolchain.sh)")
    facts = amd_static.analyze(with_defines(CP_FIX_BV=fix_bv), "gfx942", tmp_path, timeout_s=600)
    names = {f.kernel.split("(")[0].replace("void ", "").replace("<(", "<") for f in facts}
    for kernel in _NEW_KERNELS:
        assert any(n.startswith(kernel.split("<")[0]) for n in names), (kernel, names)
    for f in facts:
        assert f.spills == 0 and f.scratch_bytes == 0 and f.lds_bytes <= 65536, f


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cp_kernels_build_for_sm90_without_spills(tmp_path):
    from hipevolve.verifier.build.nvidia import include_dir
    from hipevolve.verifier.build.tile_headers import tile_include_dir

    (tmp_path / "kernel.hip").write_text(source_of(PREFILL_SEED))
    argv = ["nvcc", "-x", "cu", "-cubin", "-O3", "-std=c++17", "--expt-relaxed-constexpr",
            "-gencode=arch=compute_90,code=sm_90", f"-I{include_dir()}",
            f"-I{tile_include_dir()}", "-D__HIP_PLATFORM_NVIDIA__", "-Xptxas", "-v", "-o",
            "k.cubin", "kernel.hip"]  # fmt: skip
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    entries = re.findall(r"Compiling entry function '(\w+)'.*?Used (\d+) registers", done.stderr,
                         re.S)  # fmt: skip
    names = " ".join(name for name, _ in entries)
    for kernel in ("gdn_cp_fixup", "gdn_cp_plan", "gdn_cp_final", "gdn_tc_scanILi64ELi2ELi0E",
                   "gdn_tc_scanILi64ELi2ELi3E", "gdn_tc_scanILi32ELi3ELi3E"):  # fmt: skip
        assert kernel in names, kernel
    assert "bytes spill" in done.stderr
    assert not re.search(r"[1-9]\d* bytes spill", done.stderr), done.stderr[-3000:]
