"""The Gated DeltaNet references: the math (chunked = recurrent, the paper's convention), the
decode step, the task files (cases, rooflines against GDN.md's table, anchors)."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch
import torch.nn.functional as F

from hipevolve.core.reference import build_inputs, load_module, run_case
from hipevolve.problems import get_task

PREFILL = get_task("gated_delta_net")
DECODE = get_task("gated_delta_net_decode")
GDN = load_module(PREFILL.reference)
GDN_DECODE = load_module(DECODE.reference)


def rel_max(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Max abs difference relative to the max abs of the reference."""
    return ((x - ref).abs().max() / ref.abs().max()).item()


def rel_rms(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref.double()).norm() / ref.double().norm()).item()


def float64_inputs(b, t, h, hv, kd=32, vd=16, state="random", seed=0):
    torch.manual_seed(seed)
    return GDN.get_inputs(B=b, T=t, H=h, HV=hv, K=kd, V=vd, dtype="float64", initial_state=state)


@pytest.mark.parametrize(
    "b,t,h,hv,state",
    [
        (1, 1, 1, 1, "zero"),
        (2, 63, 2, 4, "random"),  # grouped value heads, HV = 2H; one partial chunk
        (1, 64, 2, 2, "random"),  # exactly one chunk
        (2, 65, 1, 4, "random"),  # HV = 4H; one chunk plus one token
        (1, 130, 2, 4, "zero"),  # three chunks, the last one padded
    ],
)
def test_chunked_form_equals_recurrent_form_in_float64(b, t, h, hv, state):
    q, k, v, g, beta, h0 = float64_inputs(b, t, h, hv, state=state)
    o_chunk, s_chunk = GDN.chunk_gated_delta_rule(q, k, v, g, beta, h0)
    o_rec, s_rec = GDN.recurrent_gated_delta_rule(q, k, v, g, beta, h0)
    assert o_chunk.dtype == torch.float64 and o_chunk.shape == (b, t, hv, 16)
    assert s_chunk.shape == (b, hv, 32, 16)
    assert rel_max(o_chunk, o_rec) < 1e-10
    assert rel_max(s_chunk, s_rec) < 1e-10


def test_packed_sequences_each_run_the_recurrence_from_their_own_state_in_float64():
    lengths = [1, 63, 64, 65, 130]
    torch.manual_seed(3)
    q, k, v, g, beta, h0, cu = GDN.get_inputs(B=1, T=sum(lengths), H=2, HV=4, K=32, V=16,
                                              dtype="float64", initial_state="random",
                                              seqlens=",".join(map(str, lengths)))  # fmt: skip
    assert cu.dtype == torch.int64 and cu.tolist() == [0, 1, 64, 128, 193, 323]
    assert h0.shape == (5, 4, 32, 16)
    o, state = GDN.Model()(q, k, v, g, beta, h0, cu)
    assert o.shape == (1, 323, 4, 16) and state.shape == (5, 4, 32, 16)
    for i, (s, e) in enumerate(pairwise(cu.tolist())):
        o_i, s_i = GDN.recurrent_gated_delta_rule(q[:, s:e], k[:, s:e], v[:, s:e], g[:, s:e],
                                                  beta[:, s:e], h0[i : i + 1])  # fmt: skip
        assert rel_max(o[:, s:e], o_i) < 1e-10 and rel_max(state[i : i + 1], s_i) < 1e-10
    # one sequence's tokens never reach another's: the whole packed run is not one recurrence
    o_whole, _ = GDN.recurrent_gated_delta_rule(q, k, v, g, beta, h0[:1])
    assert rel_max(o[:, 64:], o_whole[:, 64:]) > 1e-3


def test_packed_sequences_of_one_length_run_as_one_batch_each_from_its_own_state_in_float64():
    lengths = [70, 5, 70, 600, 5, 70]  # three lengths: batches of 3, 2 and 1 (600: 10 chunks)
    torch.manual_seed(8)
    shape = {"B": 1, "T": sum(lengths), "H": 1, "HV": 2, "K": 16, "V": 8}
    seqlens = ",".join(map(str, lengths))
    inputs = GDN.get_inputs(**shape, dtype="float64", initial_state="random", seqlens=seqlens)
    q, k, v, g, beta, h0, cu = inputs
    o, state = GDN.varlen_gated_delta_rule(*inputs)
    for i, (s, e) in enumerate(pairwise(cu.tolist())):
        one = [x[:, s:e] for x in (q, k, v, g, beta)]
        o_i, s_i = GDN.recurrent_gated_delta_rule(*one, h0[i : i + 1])
        assert rel_max(o[:, s:e], o_i) < 1e-10 and rel_max(state[i : i + 1], s_i) < 1e-10


@pytest.mark.parametrize("bad,why", [
    ("1,2", "sum to T"), ("0,5", "positive"), ("5", "B = 1"),
])  # fmt: skip
def test_packed_lengths_that_do_not_fit_the_case_are_refused(bad, why):
    with pytest.raises(ValueError, match="seqlens"):
        GDN.get_inputs(B=2 if why == "B = 1" else 1, T=5, H=1, HV=1, K=8, V=8, seqlens=bad)


@pytest.mark.parametrize("segments", [2, 3, 5, 11])
def test_segments_chained_from_their_linear_maps_equal_the_recurrence_in_float64(segments):
    # 11 chunks: segments of 6, 4, 3 and 1 chunks, the last one padded with whole chunks.
    q, k, v, g, beta, h0 = float64_inputs(2, 11 * 64 - 20, 2, 4, seed=4)
    o_seg, s_seg = GDN.chunk_gated_delta_rule(q, k, v, g, beta, h0, segments=segments)
    o_rec, s_rec = GDN.recurrent_gated_delta_rule(q, k, v, g, beta, h0)
    assert o_seg.shape == o_rec.shape and s_seg.shape == s_rec.shape
    assert rel_max(o_seg, o_rec) < 1e-10 and rel_max(s_seg, s_rec) < 1e-10


def test_segments_in_fp32_stay_as_close_to_the_exact_result_as_one_loop_over_every_chunk():
    torch.manual_seed(6)
    inputs = GDN.get_inputs(B=1, T=40 * 64, H=1, HV=2, K=32, V=16, initial_state="random")
    exact = GDN.recurrent_gated_delta_rule(*[x.double() for x in inputs])
    loop = GDN.chunk_gated_delta_rule(*inputs, segments=1)
    chained = GDN.chunk_gated_delta_rule(*inputs)  # 40 chunks: 17 segments of 3 by default
    for got, plain, want in zip(chained, loop, exact, strict=True):
        assert rel_rms(got, want) < 1e-5
        assert rel_rms(got, want) < 4 * rel_rms(plain, want) + 1e-7


def test_a_long_sequence_runs_in_a_few_steps_not_one_per_chunk():
    # The loop is launch-bound on a GPU: count the products of a 512-chunk sequence.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        calls = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.calls += func.__name__.startswith(("bmm", "baddbmm"))
            return func(*args, **(kwargs or {}))

    with torch.device("meta"), Count():
        inputs = GDN.get_inputs(B=1, T=512 * 64, H=1, HV=1, K=8, V=8)
        GDN.chunk_gated_delta_rule(*inputs)
    assert Count.calls < 200  # one loop over every chunk makes 1,024


def test_chunked_form_with_no_initial_state_equals_zero_state():
    q, k, v, g, beta, h0 = float64_inputs(1, 70, 1, 2, state="zero")
    o_none, s_none = GDN.chunk_gated_delta_rule(q, k, v, g, beta, None)
    o_zero, s_zero = GDN.chunk_gated_delta_rule(q, k, v, g, beta, h0)
    assert torch.equal(o_none, o_zero) and torch.equal(s_none, s_zero)


def test_chunked_form_stays_finite_and_exact_under_strong_decay():
    # Real models use g = -exp(A_log) * softplus(a + dt_bias), which can be far below the
    # check inputs' logsigmoid(randn)/16: exp of in-chunk gamma differences must not overflow.
    q, k, v, _, beta, h0 = float64_inputs(1, 100, 1, 2)
    g = -torch.exp(torch.randn(1, 100, 2, dtype=torch.float64) * 2) * 8
    o_chunk, s_chunk = GDN.chunk_gated_delta_rule(q, k, v, g, beta, h0)
    o_rec, s_rec = GDN.recurrent_gated_delta_rule(q, k, v, g, beta, h0)
    assert torch.isfinite(o_chunk).all() and torch.isfinite(s_chunk).all()
    assert rel_max(o_chunk, o_rec) < 1e-10
    assert (s_chunk - s_rec).abs().max() < 1e-10 * max(s_rec.abs().max().item(), 1.0)


def test_one_step_is_the_papers_delta_rule_not_alpha_identity_minus_beta_kk():
    torch.manual_seed(1)
    kd, vd = 8, 6
    q = GDN.l2_normalise(torch.randn(kd, dtype=torch.float64))
    k = GDN.l2_normalise(torch.randn(kd, dtype=torch.float64))
    v = torch.randn(vd, dtype=torch.float64)
    g = torch.tensor(-0.7, dtype=torch.float64)
    beta = torch.tensor(0.6, dtype=torch.float64)
    h = torch.randn(kd, vd, dtype=torch.float64)
    o, h_new = GDN.gated_delta_rule_step(q, k, v, g, beta, h, scale=kd**-0.5)

    alpha, eye, s_prev = g.exp(), torch.eye(kd, dtype=torch.float64), h.T
    paper = s_prev @ (alpha * (eye - beta * torch.outer(k, k))) + beta * torch.outer(v, k)
    other = s_prev @ (alpha * eye - beta * torch.outer(k, k)) + beta * torch.outer(v, k)
    assert torch.allclose(h_new.T, paper, rtol=0, atol=1e-13)
    assert not torch.allclose(h_new.T, other, rtol=0, atol=1e-3)
    assert torch.allclose(o, paper @ q * kd**-0.5, rtol=0, atol=1e-13)


def test_decode_step_equals_one_recurrent_step_and_chunked_form():
    torch.manual_seed(2)
    q, k, v, g, beta, state = GDN_DECODE.get_inputs(B=3, H=2, HV=4, K=32, V=16, dtype="float64")
    o, new_state = GDN_DECODE.Model()(q, k, v, g, beta, state)
    o_rec, s_rec = GDN.recurrent_gated_delta_rule(q, k, v, g, beta, state)
    o_chunk, s_chunk = GDN.chunk_gated_delta_rule(q, k, v, g, beta, state)
    assert o.shape == (3, 1, 4, 16) and new_state.shape == (3, 4, 32, 16)
    assert rel_max(o, o_rec) < 1e-12 and rel_max(new_state, s_rec) < 1e-12
    assert rel_max(o, o_chunk) < 1e-10 and rel_max(new_state, s_chunk) < 1e-10


def test_decode_returns_a_new_state_and_leaves_the_input_state_unmodified():
    torch.manual_seed(3)
    inputs = GDN_DECODE.get_inputs(B=2, H=2, HV=4)
    state_before = inputs[5].clone()
    _, new_state = GDN_DECODE.Model()(*inputs)
    assert torch.equal(inputs[5], state_before)
    assert new_state.data_ptr() != inputs[5].data_ptr()
    assert not torch.equal(new_state, state_before)


def test_inputs_follow_the_gdn_check_distributions():
    torch.manual_seed(4)
    q, k, v, g, beta, h0 = GDN.get_inputs(B=2, T=50, H=2, HV=4, initial_state="random")
    assert (q.dtype, k.dtype, v.dtype) == (torch.bfloat16,) * 3
    assert (g.dtype, beta.dtype, h0.dtype) == (torch.float32,) * 3
    assert q.shape == k.shape == (2, 50, 2, 128) and v.shape == (2, 50, 4, 128)
    assert g.shape == beta.shape == (2, 50, 4) and h0.shape == (2, 4, 128, 128)
    for x in (q, k):  # L2-normalised over K, up to bf16 rounding
        assert torch.allclose(x.float().norm(dim=-1), torch.ones(2, 50, 2), atol=1e-2)
    assert (g < 0).all() and (g > F.logsigmoid(torch.tensor(-8.0)) / 16).all()
    assert ((beta > 0) & (beta < 1)).all()
    assert h0.abs().sum() > 0
    assert GDN.get_inputs(B=1, T=3, H=1, HV=1, initial_state="zero")[5].abs().sum() == 0


@pytest.mark.parametrize("task", [PREFILL, DECODE], ids=lambda t: t.name)
def test_small_cases_run_on_cpu_with_the_interface_dtypes_shapes_and_strides(task):
    assert len(task.small_cases) >= 2
    for case in task.small_cases:
        inp = case.inputs
        o, state = run_case(task.reference, case.init, inp, seed=0)
        t = inp.get("T", 1)
        sequences = len(inp["seqlens"].split(",")) if inp.get("seqlens") else inp["B"]
        assert o.dtype == torch.bfloat16 and o.shape == (inp["B"], t, inp["HV"], inp["V"])
        assert state.dtype == torch.float32
        assert state.shape == (sequences, inp["HV"], inp["K"], inp["V"])
        assert torch.isfinite(o.float()).all() and torch.isfinite(state).all()
        # Candidates are checked against the reference's strides: they must be the plain ones.
        assert o.is_contiguous() and state.is_contiguous()


def test_fp32_chunked_reference_is_far_within_the_tolerance_of_the_exact_result():
    # The reference must be much closer to the exact answer than the 5e-3 kernels are held to.
    case = PREFILL.case("small_batch_ragged")
    inputs = build_inputs(GDN, case.inputs, "cpu", seed=5)
    o32, s32 = GDN.chunk_gated_delta_rule(*inputs)
    o64, s64 = GDN.recurrent_gated_delta_rule(*[x.double() for x in inputs])
    assert o32.dtype == torch.float32
    assert rel_rms(o32, o64) < 1e-5 and rel_rms(s32, s64) < 1e-5
    o_model, _ = GDN.Model()(*inputs)
    assert rel_rms(o_model, o64) < 5e-3  # bf16 rounding of o alone stays inside the tolerance


def prefill_roofline(b, t, h, hv, kd=128, vd=128, sequences=None):
    bytes_moved = 2 * b * t * h * kd * 2 + 2 * b * t * hv * vd * 2 + 2 * b * t * hv * 4
    bytes_moved += (
        2 * (sequences or b) * hv * kd * vd * 4
    )  # each sequence's state, read and written
    return bytes_moved, b * t * hv * (2 * 64 * (3 * kd + 2 * vd) + 6 * kd * vd)


# GDN.md's roofline table: case -> (bytes, FLOPs, relative precision of the printed bytes).
GDN_MD_TABLE = {
    "qwen_tp1_short": (105.9e6, 23.6e9, 0.01),
    "qwen_tp1_batch": (847e6, 189e9, 0.01),
    "mha_16": (279e6, 47.2e9, 0.01),
    "long_32": (1.1e9, 189e9, 0.05),  # printed as "about 1.1 GB": two significant figures
    # FlashQLA's Qwen3.5 cases (GDN.md, "The bar moved"): one 32,768-token sequence, TP8 and TP1
    "qwen35_tp8_32k": (170.9e6, 47.2e9, 0.01),
    "qwen35_tp1_32k": (1.367e9, 378e9, 0.01),
    # packed prompts at TP4 (4/16 heads), 8 sequences in 32,768 tokens: equal and ragged
    "qwen35_tp4_varlen_8x4096": (356.5e6, 94.5e9, 0.01),
    "qwen35_tp4_varlen_ragged": (356.5e6, 94.5e9, 0.01),
}


def test_prefill_cases_and_rooflines_match_the_gdn_table():
    assert {c.name for c in PREFILL.timed_cases} == set(GDN_MD_TABLE)
    for name, (table_bytes, table_flops, bytes_tol) in GDN_MD_TABLE.items():
        case = PREFILL.case(name)
        assert case.inputs["K"] == case.inputs["V"] == 128
        assert case.roofline.bytes == pytest.approx(table_bytes, rel=bytes_tol)
        assert case.roofline.flops == pytest.approx(table_flops, rel=0.01)


def test_every_roofline_equals_its_formula():
    for case in PREFILL.cases:
        i = case.inputs
        sequences = len(i["seqlens"].split(",")) if i.get("seqlens") else None
        expected = prefill_roofline(i["B"], i["T"], i["H"], i["HV"], i["K"], i["V"], sequences)
        assert (case.roofline.bytes, case.roofline.flops) == expected, case.name
    for case in DECODE.cases:
        b, h, hv, kd, vd = (case.inputs[n] for n in ("B", "H", "HV", "K", "V"))
        state_bytes = 2 * b * hv * kd * vd * 4
        io_bytes = 2 * b * h * kd * 2 + 2 * b * hv * vd * 2 + 2 * b * hv * 4
        flops = b * hv * (7 * kd * vd + 2 * vd + kd)
        assert (case.roofline.bytes, case.roofline.flops) == (state_bytes + io_bytes, flops)


def test_decode_cases_are_the_gdn_batches_at_qwen_tp1_heads():
    timed = {c.name: c.inputs for c in DECODE.timed_cases}
    assert sorted(i["B"] for i in timed.values()) == [1, 32, 256]
    assert all((i["H"], i["HV"], i["K"], i["V"]) == (16, 32, 128, 128) for i in timed.values())


@pytest.mark.parametrize("task", [PREFILL, DECODE], ids=lambda t: t.name)
def test_tolerance_and_anchors_name_only_timed_cases(task):
    assert task.tolerance.kind == "rel_rms" and task.tolerance.max_rel_rms == 5e-3
    assert task.check_seeds == 3
    timed = {c.name for c in task.timed_cases}
    assert task.anchors
    for anchor in task.anchors:
        assert anchor.source and anchor.figures and set(anchor.figures) <= timed, anchor.name


def test_published_graph_replay_anchors_are_flagged_in_the_notes():
    assert "CUDA-graph" in PREFILL.notes
    assert "mha_16" in PREFILL.notes  # the 16/16 published figure is 1x4096, not mha_16's 4x4096


@pytest.mark.gpu
def test_fp32_reference_on_gpu_matches_float64_recurrence_at_qwen_scale():
    case = PREFILL.case("qwen_tp1_short")
    inputs = build_inputs(GDN, case.inputs, "cuda", seed=0)
    o32, s32 = GDN.chunk_gated_delta_rule(*inputs)
    o64, s64 = GDN.recurrent_gated_delta_rule(*[x.double() for x in inputs])
    assert rel_rms(o32, o64) < 1e-4 and rel_rms(s32, s64) < 1e-4


@pytest.mark.gpu
@pytest.mark.parametrize("task", [PREFILL, DECODE], ids=lambda t: t.name)
def test_every_timed_case_reference_runs_on_gpu(task):
    for case in task.timed_cases:
        o, state = run_case(task.reference, case.init, case.inputs, device="cuda", seed=0)
        i = case.inputs
        states = len(i["seqlens"].split(",")) if "seqlens" in i else i["B"]  # one per sequence
        assert o.shape == (i["B"], i.get("T", 1), i["HV"], i["V"]) and o.dtype == torch.bfloat16
        assert state.shape == (states, i["HV"], i["K"], i["V"]) and state.dtype == torch.float32
        assert torch.isfinite(o.float()).all() and torch.isfinite(state).all()
        del o, state
        torch.cuda.empty_cache()
