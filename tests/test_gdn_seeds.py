"""The Gated DeltaNet seed kernels: problems/gated_delta_net/seeds/chunked (prefill: two tensor-core
kernels on NVIDIA sm_80+, one fused chunked fp32 kernel elsewhere) and
problems/gated_delta_net_decode/seeds/recurrent (decode step).

Without a GPU:
- the chunk algorithm the fused prefill kernel implements (its stages, its tile map for M, its
  blocked triangular solve, V slices) is emulated in torch and matched with the recurrent
  reference, to float64 round-off in float64 and closely in float32; the decode step's one-pass
  readout likewise (the tensor-core path's own tests: test_gdn_tensor_core.py);
- the real kernel sources run on CPU threads: a small HIP shim (gdn_cpu_threads.py) turns each
  GPU thread into an OS thread and __syncthreads into a barrier, and fills LDS with NaN before
  each block, so indexing, padding of the last chunk and barrier placement are exercised end
  to end;
- both seeds compile with nvcc through the HIP-to-CUDA layer, and for gfx942 with no spills at
  every value of their declared tunable parameter;
- model.py rejects inputs the kernels were not written for with ValueError, before any launch;
- the verifier's static screen passes them.
With a GPU (marked): each seed, built the way the verifier builds it, matches the task's reference
within the task's tolerance on every small case, on the timed cases, and at every tunable value.
"""

from __future__ import annotations

import functools
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from gdn_cpu_threads import cpu_library, launcher
from gdn_seed_support import (
    CHUNK,
    DECODE,
    DECODE_SEED,
    GDN,
    GDN_DECODE,
    PREFILL,
    PREFILL_SEED,
    SEEDS,
    SOLVE_BLOCK,
    import_model,
    rel_rms,
    source_of,
    tunables,
    with_define,
)

# ----------------------------------------------------------------------------- torch emulation


@functools.cache
def m_tile_map() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(r, s, uses_k) of every entry of M as the kernel's threads write it.

    Thread t = 16 a + b owns rows a + 16 i and columns b + 16 j; for i < j it forms k_r . k_s,
    for i > j q_r . k_s, and on i == j it keeps both and takes k's when a < b.
    """
    rows, cols, uses_k = [], [], []
    for t in range(256):
        a, b = t >> 4, t & 15
        for i in range(4):
            for j in range(4):
                rows.append(a + 16 * i)
                cols.append(b + 16 * j)
                uses_k.append(i < j or (i == j and a < b))
    return torch.tensor(rows), torch.tensor(cols), torch.tensor(uses_k)


def chunk_matrix_m(kc, qc, gamma, bc, scale) -> torch.Tensor:
    """M[r][s] = L[s][r] for r < s and P[r][s] for r >= s, built through the kernel's tile map."""
    r, s, uses_k = m_tile_map()
    gr, gs = gamma[..., r], gamma[..., s]
    kk = (kc @ kc.transpose(-1, -2))[..., r, s]  # k_r . k_s
    qk = (qc @ kc.transpose(-1, -2))[..., r, s]  # q_r . k_s
    decay = torch.where(
        uses_k, gs - gr, gr - gs
    ).exp()  # the later token's gamma minus the earlier's
    values = torch.where(uses_k, bc[..., s] * kk * decay, scale * qk * decay)
    m = kc.new_full((*kc.shape[:-2], CHUNK, CHUNK), float("nan"))
    m[..., r, s] = values
    return m


def blocked_forward_substitution(m: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """Solves (I + L) x = rhs with L[i][j] = m[j][i] (i > j), in the kernel's blocked order."""
    x = rhs.clone()
    for base in range(0, CHUNK, SOLVE_BLOCK):
        end = base + SOLVE_BLOCK
        for j in range(base, end - 1):  # diagonal block, right-looking: x[j] is final here
            x[..., j + 1 : end, :] -= m[..., j, j + 1 : end, None] * x[..., j, None, :]
        below = base + SOLVE_BLOCK
        if below < CHUNK:
            lower = m[..., base:below, below:].transpose(-1, -2)
            x[..., below:, :] -= lower @ x[..., base:below, :]
    return x


def emulate_chunked_seed(q, k, v, g, beta, h0, bv: int = 32):
    """The prefill seed's algorithm, stage by stage, in torch: one V slice of bv columns at a
    time (as one block), chunks padded with zeros, Vn solved directly (no W, U)."""
    b, t, h, kd = q.shape
    hv, vd = v.shape[2], v.shape[3]
    dt = torch.promote_types(q.dtype, torch.float32)
    scale = kd**-0.5
    qh = q.to(dt).repeat_interleave(hv // h, 2).transpose(1, 2)  # [B, HV, T, K]
    kh = k.to(dt).repeat_interleave(hv // h, 2).transpose(1, 2)
    vh, gh, bh = v.to(dt).transpose(1, 2), g.to(dt).transpose(1, 2), beta.to(dt).transpose(1, 2)
    pad = (-t) % CHUNK
    qh, kh, vh = (F.pad(x, (0, 0, 0, pad)) for x in (qh, kh, vh))
    gh, bh = F.pad(gh, (0, pad)), F.pad(bh, (0, pad))
    o = qh.new_empty(b, hv, t + pad, vd)
    state = h0.to(dt).clone()
    for v0 in range(0, vd, bv):
        hs = state[..., v0 : v0 + bv].clone()
        for t0 in range(0, t + pad, CHUNK):
            span = slice(t0, t0 + CHUNK)
            kc, qc, vc = kh[..., span, :], qh[..., span, :], vh[..., span, v0 : v0 + bv]
            gamma = gh[..., span].cumsum(-1)
            bc = bh[..., span]
            s_k, s_q = kc @ hs, qc @ hs
            m = chunk_matrix_m(kc, qc, gamma, bc, scale)
            rhs = bc[..., None] * (vc - gamma.exp()[..., None] * s_k)
            vn = blocked_forward_substitution(m, rhs)
            p = m.tril()  # P lives on and below the diagonal
            o[..., span, v0 : v0 + bv] = scale * gamma.exp()[..., None] * s_q + p @ vn
            to_end = (gamma[..., -1:] - gamma).exp()[..., None]
            hs = gamma[..., -1].exp()[..., None, None] * hs + (kc * to_end).transpose(-1, -2) @ vn
        state[..., v0 : v0 + bv] = hs
    return o[:, :, :t].transpose(1, 2), state


def emulate_decode_seed(q, k, v, g, beta, state):
    """The decode seed's step: both sums over K from the decayed state in one pass, then
    o = scale (h_d^T q + u (k . q))."""
    hv, kd = v.shape[2], q.shape[-1]
    dt = torch.promote_types(q.dtype, torch.float32)
    qh = q[:, 0].to(dt).repeat_interleave(hv // q.shape[2], 1)
    kh = k[:, 0].to(dt).repeat_interleave(hv // q.shape[2], 1)
    h_d = state.to(dt) * g[:, 0].to(dt).exp()[..., None, None]
    hk = torch.einsum("bhkv,bhk->bhv", h_d, kh)
    hq = torch.einsum("bhkv,bhk->bhv", h_d, qh)
    kq = (kh * qh).sum(-1, keepdim=True)
    u = beta[:, 0].to(dt)[..., None] * (v[:, 0].to(dt) - hk)
    new_state = h_d + kh[..., :, None] * u[..., None, :]
    return (kd**-0.5 * (hq + u * kq))[:, None], new_state


def test_m_tile_map_writes_every_entry_once_with_the_right_operand():
    r, s, uses_k = m_tile_map()
    assert len(set(zip(r.tolist(), s.tolist(), strict=True))) == CHUNK * CHUNK
    assert torch.equal(uses_k, r < s)


@pytest.mark.parametrize(
    "b,t,h,hv,state,bv",
    [
        (1, 100, 2, 4, "random", 16),  # grouped value heads, a padded second chunk
        (2, 130, 1, 2, "random", 64),  # three chunks, the last one two tokens long
        (1, 64, 2, 2, "zero", 32),  # exactly one chunk
        (1, 1, 1, 4, "random", 16),  # one token, HV = 4H
    ],
)
def test_chunk_algorithm_equals_recurrence_in_float64(b, t, h, hv, state, bv):
    torch.manual_seed(b * 1000 + t)
    inputs = GDN.get_inputs(B=b, T=t, H=h, HV=hv, dtype="float64", initial_state=state)
    want_o, want_h = GDN.recurrent_gated_delta_rule(*inputs)
    got_o, got_h = emulate_chunked_seed(*inputs, bv=bv)
    assert rel_rms(got_o, want_o) < 1e-12
    assert rel_rms(got_h, want_h) < 1e-12


def sequences(inputs: list) -> list[list]:
    """The batch's inputs, or each packed sequence's (its tokens and its initial state)."""
    if len(inputs) == 6:
        return [inputs]
    *tensors, h0, cu = inputs
    bounds = cu.tolist()
    return [[x[:, s:e] for x in tensors] + [h0[i : i + 1]]
            for i, (s, e) in enumerate(pairwise(bounds))]  # fmt: skip


def test_chunk_algorithm_in_float32_matches_the_task_reference_closely():
    for case in PREFILL.small_cases:
        torch.manual_seed(0)
        for inputs in sequences(GDN.get_inputs(**case.inputs)):
            want_o, want_h = GDN.chunk_gated_delta_rule(*inputs)
            got_o, got_h = emulate_chunked_seed(*inputs, bv=32)
            assert rel_rms(got_o, want_o) < 1e-5, case.name
            assert rel_rms(got_h, want_h) < 1e-5, case.name


def test_decode_one_pass_readout_equals_the_reference_step_in_float64():
    for case in DECODE.small_cases:
        torch.manual_seed(0)
        inputs = GDN_DECODE.get_inputs(**{**case.inputs, "dtype": "float64"})
        want_o, want_state = GDN_DECODE.Model()(*inputs)
        got_o, got_state = emulate_decode_seed(*inputs)
        assert rel_rms(got_o, want_o) < 1e-13
        assert rel_rms(got_state, want_state) < 1e-13


# ----------------------------------------------------------------------------- CPU threads

@pytest.mark.parametrize("bv", [16, 64])
def test_prefill_kernel_source_matches_reference_on_cpu_threads(bv, tmp_path):
    lib = cpu_library(with_define(source_of(PREFILL_SEED), "BV", bv), tmp_path, warp=32)
    run = launcher(lib, "gdn_chunk_fwd", 9, 4)  # the CPU build is the fused path: no workspace
    for b, t, h, hv in [(1, 100, 1, 2), (2, 65, 1, 1)]:  # GVA with a padded chunk; B = 2
        torch.manual_seed(t)
        inputs = GDN.get_inputs(B=b, T=t, H=h, HV=hv, initial_state="random")
        o = torch.full((b, t, hv, 128), float("nan"), dtype=torch.bfloat16)
        ht = torch.full((b, hv, 128, 128), float("nan"))
        assert run(*(x.data_ptr() for x in (*inputs, o, ht)), None, b, t, h, hv, None) == 0
        want_o, want_h = GDN.Model()(*inputs)
        assert rel_rms(o, want_o) < 1e-4
        assert rel_rms(ht, want_h) < 1e-5


def test_prefill_kernel_runs_packed_sequences_each_from_its_own_state_on_cpu_threads(tmp_path):
    lib = cpu_library(source_of(PREFILL_SEED), tmp_path, warp=32)
    run = launcher(lib, "gdn_chunk_fwd_varlen", 10, 4)
    lengths = [1, 63, 64, 65, 30]  # a token, under, at and over a chunk, the last one short
    t, h, hv, n = sum(lengths), 1, 2, len(lengths)
    torch.manual_seed(7)
    inputs = GDN.get_inputs(B=1, T=t, H=h, HV=hv, initial_state="random",
                            seqlens=",".join(map(str, lengths)))  # fmt: skip
    q, k, v, g, beta, h0, cu = inputs
    o = torch.full((1, t, hv, 128), float("nan"), dtype=torch.bfloat16)
    ht = torch.full((n, hv, 128, 128), float("nan"))
    pointers = (x.data_ptr() for x in (q, k, v, g, beta, h0, cu, o, ht))
    assert run(*pointers, None, n, t, h, hv, None) == 0
    want_o, want_h = GDN.Model()(*inputs)
    assert rel_rms(o, want_o) < 1e-4
    assert rel_rms(ht, want_h) < 1e-5
    for i in range(n):  # every sequence's own state, not only the sum of errors
        assert rel_rms(ht[i], want_h[i]) < 1e-5, i


def test_decode_kernel_source_matches_reference_on_cpu_threads_for_both_warp_widths(tmp_path):
    torch.manual_seed(0)
    inputs = GDN_DECODE.get_inputs(B=2, H=2, HV=4)
    want_o, want_state = GDN_DECODE.Model()(*inputs)
    before = inputs[-1].clone()
    # 32 blocks of 32 columns, beyond one wave of CPU_SMS: 256 threads; 8 blocks of 128: NT_FEW
    for warp, bv in [(32, 32), (64, 128)]:
        source = with_define(source_of(DECODE_SEED), "BV", bv)
        run = launcher(cpu_library(source, tmp_path / f"w{warp}", warp), "gdn_decode", 8, 3)
        o = torch.full((2, 1, 4, 128), float("nan"), dtype=torch.bfloat16)
        new_state = torch.full((2, 4, 128, 128), float("nan"))
        assert run(*(x.data_ptr() for x in (*inputs, o, new_state)), 2, 2, 4, None) == 0
        assert rel_rms(o, want_o) < 1e-4
        assert rel_rms(new_state, want_state) < 1e-6
        assert torch.equal(inputs[-1], before)  # out of place: the input state is untouched


# ----------------------------------------------------------------------------- compiles


def test_each_seed_declares_a_tunable_whose_current_value_is_listed():
    for _task, seed in SEEDS.values():
        source = source_of(seed)
        declared = tunables(source)
        assert declared, f"{seed} declares no // @tunable line"
        for name, values in declared.items():
            current = re.search(rf"^#define {name} (\d+)$", source, re.M)
            assert current and int(current[1]) in values, name


def test_seeds_compile_with_nvcc_through_the_hip_layer(tmp_path):
    nvidia_layer = pytest.importorskip("hipevolve.verifier.build.nvidia")
    from hipevolve.verifier.build.compile import Compiler, build_many

    nvcc = nvidia_layer.find_nvcc()
    if nvcc is None or not (nvidia_layer.include_dir() / "hip" / "hip_runtime.h").exists():
        pytest.skip("nvcc or the HIP-to-CUDA layer is missing")
    argv = nvidia_layer.nvcc_command(nvcc, Path("kernel.hip"), Path("lib.so"), arch="sm_90")
    compiler = Compiler(name="cuda", argv=tuple(argv), toolchain=nvidia_layer.nvcc_version(nvcc))
    sources = [source_of(seed) for _task, seed in SEEDS.values()]
    for result in build_many(sources, compiler, tmp_path):
        assert result.ok, result.log


def _gfx942_facts(source: str, workdir: Path):
    from hipevolve.verifier.build import amd_static

    return amd_static.analyze(source, "gfx942", workdir, timeout_s=300)


def test_seeds_compile_for_gfx942_without_spills_at_every_tunable_value(tmp_path):
    amd_static = pytest.importorskip("hipevolve.verifier.build.amd_static")
    toolchain = amd_static.find_toolchain()
    if toolchain is None or "gfx942" not in toolchain.targets:
        pytest.skip("no AMD static toolchain for gfx942 (scripts/install_amd_toolchain.sh)")
    variants = []
    for _task, seed in SEEDS.values():
        source = source_of(seed)
        for name, values in tunables(source).items():
            variants += [(f"{seed.name}-{name}{x}", with_define(source, name, x)) for x in values]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda nv: (nv[0], _gfx942_facts(nv[1], tmp_path / nv[0])), variants)
        for label, facts in results:
            assert facts, label
            for f in facts:
                assert f.spills == 0 and f.scratch_bytes == 0, f"{label}: {f}"
                assert f.lds_bytes <= 65536, f"{label}: {f.lds_bytes} bytes of LDS"


# ----------------------------------------------------------------------------- model.py


def _prefill_inputs():
    torch.manual_seed(0)
    return GDN.get_inputs(B=1, T=5, H=1, HV=2, initial_state="random")


def _decode_inputs():
    torch.manual_seed(0)
    return GDN_DECODE.get_inputs(B=2, H=1, HV=2)


def _replace(inputs, index, value):
    out = list(inputs)
    out[index] = value
    return out


BAD_PREFILL = {
    "K = 64": lambda x: [
        x[0][..., :64].contiguous(),
        x[1][..., :64].contiguous(),
        *x[2:5],
        x[5][:, :, :64].contiguous(),
    ],
    "HV not a multiple of H": lambda x: [
        torch.cat([x[0]] * 3, 2),
        torch.cat([x[1]] * 3, 2),
        *x[2:],
    ],
    "float32 q": lambda x: _replace(x, 0, x[0].float()),
    "bfloat16 g": lambda x: _replace(x, 3, x[3].bfloat16()),
    "bfloat16 state": lambda x: _replace(x, 5, x[5].bfloat16()),
    "non-contiguous v": lambda x: _replace(x, 2, x[2].transpose(2, 3).contiguous().transpose(2, 3)),
    "beta of the wrong shape": lambda x: _replace(x, 4, x[4][:, :, :1]),
    "state of the wrong shape": lambda x: _replace(x, 5, x[5][:1, :1]),
    "a list for q": lambda x: _replace(x, 0, x[0].tolist()),
    "CPU tensors": lambda x: x,
}
BAD_DECODE = {
    "two tokens": lambda x: [torch.cat([t, t], 1) for t in x[:5]] + [x[5]],
    "V = 64": lambda x: [*x[:2], x[2][..., :64].contiguous(), *x[3:5], x[5][..., :64].contiguous()],
    "float32 v": lambda x: _replace(x, 2, x[2].float()),
    "non-contiguous state": lambda x: _replace(x, 5, x[5].transpose(2, 3)),
    "CPU tensors": lambda x: x,
}


@pytest.mark.parametrize(
    "kind,bad", [("prefill", b) for b in BAD_PREFILL] + [("decode", b) for b in BAD_DECODE]
)
def test_model_rejects_inputs_the_kernel_was_not_written_for(kind, bad):
    _task, seed = SEEDS[kind]
    model = import_model(seed, "reject").ModelNew()
    inputs = _prefill_inputs() if kind == "prefill" else _decode_inputs()
    broken = (BAD_PREFILL if kind == "prefill" else BAD_DECODE)[bad](inputs)
    with pytest.raises(ValueError):
        model(*broken)


def test_cpu_inputs_are_refused_for_being_off_the_gpu():
    model = import_model(PREFILL_SEED, "device").ModelNew()
    with pytest.raises(ValueError, match="GPU"):
        model(*_prefill_inputs())


def test_seeds_pass_the_verifier_static_screen():
    from hipevolve.core.candidate import load_candidate
    from hipevolve.verifier.screen.screening import screen

    for _task, seed in SEEDS.values():
        screening = screen(load_candidate(seed))
        assert screening.passed, screening.flags
        # The prefill seed's tensor-core path is PTX (mma.sync, ldmatrix, cp.async) on NVIDIA only.
        for finding in screening.warnings:
            assert finding.message == "inline asm (under an NVIDIA guard)", screening.flags

if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
