"""What the optimizer and mutator are shown (agents/briefing.py): only the code the target
compiles, the per-case numbers against the target's bounds, and edits that still apply to the
real parent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hipevolve.agents.briefing import (
    Target,
    case_table,
    error_lines,
    numbered,
    platform_view,
    restore,
    restored,
)
from hipevolve.agents.llm.replies import parse_reply
from hipevolve.core.candidate import load_candidate
from hipevolve.core.evaluation import CaseResult, Evaluation, Status
from hipevolve.problems import get_task
from hipevolve.verifier.build.amd_static import analyze, find_toolchain

REPO = Path(__file__).resolve().parents[1]
GDN = load_candidate(REPO / "problems" / "gated_delta_net" / "seeds" / "chunked")
SEEDS = sorted(p.parent for p in (REPO / "problems").glob("*/seeds/*/kernel.hip"))


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
@pytest.mark.parametrize("platform", ["amd", "nvidia"])
def test_the_folded_view_restores_to_the_exact_source(seed, platform):
    source = (seed / "kernel.hip").read_text()
    view = platform_view(source, platform)
    assert restore(view.text, view) == source


def test_the_nvidia_tensor_core_path_is_folded_for_an_amd_target_and_shown_for_nvidia():
    amd = platform_view(GDN.hip_source, "amd")
    assert "asm volatile" not in amd.text and "gdn_tc_prep(" not in amd.text
    assert amd.folded_lines > 600 and "compiled only for NVIDIA" in amd.text
    assert "gdn_chunk_kernel" in amd.text  # the AMD path stays
    nvidia = platform_view(GDN.hip_source, "nvidia")
    assert "gdn_tc_prep(" in nvidia.text and nvidia.folded_lines < 20


def test_only_branches_decided_by_the_platform_are_folded():
    body = "".join(f"  int x{i} = {i};\n" for i in range(20))
    source = (
        f"#if defined(__HIP_PLATFORM_NVIDIA__) && TILE\n{body}#endif\n"  # decided on AMD
        f"#if TILE > 2\n{body}#else\n{body}#endif\n"  # never decided
        f"#ifdef __HIP_PLATFORM_AMD__\nint amd;\n#else\n{body}#endif\n"  # else folded on AMD
        f"#if !defined(__HIP_PLATFORM_AMD__) || FAST\n{body}#endif\n"  # unknown on AMD
    )
    amd = platform_view(source, "amd")
    assert len(amd.folds) == 2 and amd.folded_lines == 40
    nvidia = platform_view(source, "nvidia")
    assert len(nvidia.folds) == 0  # "int amd;" is one line: too short to fold
    assert amd.text.count("int x0 = 0;") == 3


def test_a_nested_if_inside_a_folded_branch_stays_inside_the_fold():
    body = "".join(f"  y{i}();\n" for i in range(15))
    source = (f"#if defined(__HIP_PLATFORM_NVIDIA__)\n{body}#if A\nnested();\n#else\nother();\n"
              f"#endif\n{body}#else\namd_path();\n#endif\n")  # fmt: skip
    view = platform_view(source, "amd")
    assert len(view.folds) == 1 and "nested()" in view.folds[0] and "amd_path();" in view.text
    assert restore(view.text, view) == source


@pytest.mark.skipif(find_toolchain() is None, reason="AMD static toolchain not installed")
def test_the_amd_view_compiles_to_the_same_gfx942_kernels_as_the_seed(tmp_path):
    """Folding removes only text the AMD compiler never sees: the view, markers and all, builds
    the same kernels with the same resources for gfx942."""
    view = platform_view(GDN.hip_source, "amd")
    facts = []
    for name, text in (("seed", GDN.hip_source), ("view", view.text)):
        got = analyze(text, "gfx942", tmp_path / name, timeout_s=240)
        facts.append(sorted((f.kernel, f.vgprs, f.sgprs, f.lds_bytes, f.mfma, f.global_loads)
                            for f in got))  # fmt: skip
    assert facts[0] and facts[0] == facts[1]


def test_an_edit_written_against_the_view_applies_to_the_real_parent():
    view = platform_view(GDN.hip_source, "amd")
    line = next(ln for ln in view.text.splitlines() if "const dim3 grid(DV / FBV, HV, B);" in ln)
    reply = ("kernel.hip\n<<<<<<< SEARCH\n" + line + "\n=======\n"
             + line.replace("grid(", "grid (") + "\n>>>>>>> REPLACE\n")  # fmt: skip
    parsed = parse_reply(reply, GDN)
    assert parsed.candidate is not None, parsed
    changed = parsed.candidate.hip_source
    assert "grid (DV / FBV" in changed and "gdn_tc_prep" in changed  # the folded path is kept
    assert len(changed) == len(GDN.hip_source) + 1


def test_a_whole_file_carrying_the_markers_gets_the_folded_text_back():
    view = platform_view(GDN.hip_source, "amd")
    rewritten = view.text.replace("const dim3 grid(DV / FBV, HV, B);",
                                  "const dim3 grid(DV / FBV, HV, B);  // same")  # fmt: skip
    child = GDN.model_copy(update={"hip_source": rewritten})
    back = restored(child, view).hip_source
    assert "gdn_tc_prep" in back and "// same" in back
    assert back.replace("  // same", "") == GDN.hip_source


def test_the_case_table_gives_speedups_shares_of_the_bounds_and_shared_inputs_once():
    task = get_task("gated_delta_net")
    case = task.case("qwen_tp1_short")
    ev = Evaluation(status=Status.ok, task=task.name, backend="cuda",
                    cases=(CaseResult(case=case.name, correct=True, time_us=250.0,
                                      ref_time_us=10000.0),))  # fmt: skip
    table = case_table(task, ev, Target("cuda", "NVIDIA H200"))
    row = next(r for r in table.splitlines() if r.startswith("| qwen_tp1_short"))
    mem = case.roofline.bytes / 4.8e12 * 1e6 / 250.0 * 100
    comp = case.roofline.flops / 990e12 * 1e6 / 250.0 * 100
    assert "| 250.0 | 40.00x |" in row and "K=128" not in row
    assert table.startswith("Every case: K=128, V=128, dtype=bfloat16.\n")
    assert f"{mem:.1f}%" in row and f"{comp:.1f}%" in row
    assert "H200 memory bound" in table
    assert "| - | - | - | - |" in next(r for r in table.splitlines() if r.startswith("| mha_16"))


def test_compile_errors_are_shown_with_the_compilers_line_numbers():
    log = ('kernel.hip:12:5: error: use of undeclared identifier "x"\n'
           'kernel.hip(30): error: expected a ";"\n')  # fmt: skip
    lines = error_lines(log)
    assert lines == [12, 30]
    text = numbered("\n".join(f"line {i}" for i in range(1, 41)), lines, context=2)
    assert ">   12 | line 12" in text and "    10 | line 10" in text and ">   30 | line 30" in text
    assert "line 20" not in text and "..." in text


def evolve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hipevolve", *args], capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_prompts_show_prints_the_mutators_gdn_prompt_within_25k_tokens():
    out = evolve("prompts", "show", "mutator", "--task", "gated_delta_net", "--backend", "static",
                 "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    shown = json.loads(out.stdout)
    assert shown["tokens"]["total"] <= 25_000, shown["tokens"]
    blocks = shown["messages"][1]["content"]
    user = "".join(b["text"] for b in blocks)
    assert blocks[-1]["text"].startswith("# Role: mutator\n")  # its own part, after the cached
    assert [("cache_control" in b) for b in blocks] == [True, True, True, False]
    for part in ("| qwen_tp1_short |", "relative RMS error <= 0.005", "static backend",
                 "MI300X (gfx942) peaks", "#define AMD_MFMA 1",
                 "@tunable", "do not rewrite the file", "class Model"):  # fmt: skip
        assert part in user, part
    assert "or whole files" not in user  # the file is too long to rewrite: edits only
    assert "a worked example" not in user  # the parent has matrix cores: no MFMA example


def test_prompts_show_refuses_a_role_that_needs_a_run_without_one_in_one_line():
    out = evolve("prompts", "show", "repairer", "--task", "softmax")
    assert out.returncode == 2 and "Traceback" not in out.stderr  # a usage error
    assert out.stderr.strip().count("\n") == 0 and "repairer" in out.stderr


@pytest.mark.skipif(find_toolchain() is None, reason="AMD static toolchain not installed")
def test_the_prompts_mfma_example_compiles_to_an_mfma_instruction_for_gfx942(tmp_path):
    from hipevolve.agents.briefing import MFMA_EXAMPLE

    source = (REPO / "prompts" / MFMA_EXAMPLE).read_text()
    (facts,) = analyze(source, "gfx942", tmp_path, timeout_s=120)
    assert facts.mfma >= 1 and facts.spills_vgpr == 0
