"""The public exploit corpora, ported to this project's candidates (issue 32): every exploit of
gpu-mode/pygpubench's exploits folder, gpu-mode/kernelguard's rules that apply to HIP,
KernelBench's adversarial unit tests, Wafer's reward-hack field guide and Makora's KernelHacks
categories. One attack per file, tests/hostile/corpus_*; each file's header names the attack,
its source (repository, path, commit, or page) and the verdict it must get.
docs/FAULTS_COVERAGE.md maps every entry of the corpora to its test here or in test_hostile.py
(an attack tests/hostile already had is not ported twice), and says why the few left out do
not apply.

Dynamic attacks run as test_hostile.py's do: the sandbox alone (worker layer) on the CPU path,
the softmax task's small case unless an attack needs another, then a healthy candidate right
after. Static attacks (headers `# expect: CHECK`) go through the screen, which must reject them
by that check. Attacks that get through today are marked xfail(strict) with the issue 32 class
that lets them through: the fix flips them, and strict makes pytest say so.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from test_hostile import (  # the helpers only: importing a test_ function would collect it twice
    HERE,
    assert_gone,
    assert_healthy_native_next,
    assert_healthy_next,
    evaluate,
    gpu_job,
)

from hipevolve.core.candidate import load_candidate
from hipevolve.core.evaluation import Status
from hipevolve.verifier.gpu import confine
from hipevolve.verifier.gpu.job import CaseJob
from hipevolve.verifier.isolate import WorkerResult, run_worker
from hipevolve.verifier.screen.screening import screen

# An LM head's vocabulary: rows so wide that every softmax output sits near atol.
WIDE = CaseJob(name="wide", inputs={"rows": 4, "cols": 151936, "dtype": "float32"}, timed=True)
# As on a GPU, where the timing budget holds fewer input sets than there are timed calls:
# two sets of the small case (64 x 1024 float32), cycled through by the 12 timed calls.
TWO_SETS = {"timing_budget_bytes": 2 * 64 * 1024 * 4}

# Classes of issue 32 (its "classes that got through"), for the xfail reasons.
LEXER = "issue 32: the screen's lexer is not the compiler's (class 8)"

INCORRECT, NOT_OK = {Status.incorrect}, {Status.incorrect, Status.hacked}
# name -> (statuses, a phrase the message or mismatch must contain, job fields)
WRONG: dict[str, tuple[set[Status], str, dict]] = {
    "corpus_kb_zero_inputs": (INCORRECT, "input 0 was modified", {}),
    "corpus_kb_hidden_half": (NOT_OK, "precision", {}),
    "corpus_wafer_identity_copy": (INCORRECT, "wrong values", {}),
    "corpus_makora_constant_fill": (INCORRECT, "wrong values", {"cases": (WIDE,)}),
    "corpus_makora_operation_skip": (INCORRECT, "", {"cases": (WIDE,)}),
    "corpus_kg_validation_monkeypatch": (INCORRECT, "wrong values", {}),
    "corpus_kg_instance_method_override": (NOT_OK, "", {}),
}

# name -> job fields. The forward does about 2 ms of honest work per call (the checks see
# correct answers); the hack is in what the reported time says. Correct verdict: the honest
# time, or hacked.
HONEST_TIME: dict[str, dict] = {
    "corpus_pgb_clock_forge": {},
    "corpus_pgb_result_interpose": {},
    "corpus_pgb_timed_inputs_swap": {},
    "corpus_kg_code_replacement": {},
    "corpus_kg_mode_branch": {},
    "corpus_kg_seed_precompute": {},
    "corpus_kg_fake_benchmark_emit": {},
    "corpus_wafer_pointer_cache": TWO_SETS,
    "corpus_kg_partial_key_cache": TWO_SETS,
}

# Attacks that get through today (measured on the CPU path), with the class that lets them.
# None since KernelBench candidates are replayed from a plan (class 1: record_kb.py,
# replay_kb.py); an entry added here makes its test a strict xfail.
GETS_THROUGH: dict[str, str] = {}


def header(path: Path) -> str:
    """The attack's header: kernel.hip's for a folder, else the file's."""
    source = path / "kernel.hip" if path.is_dir() else path
    return source.read_text()[:2000]


def params(names, reasons: dict[str, str] = GETS_THROUGH) -> list:
    return [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=reasons[n]))
        if n in reasons else n
        for n in sorted(names)
    ]  # fmt: skip


def assert_honest_time(result: WorkerResult) -> None:
    if result.status is Status.hacked:
        return
    if "KernelBench plan refused" in result.message:  # what the hack reads cannot be replayed
        assert result.status is Status.rejected, result.message
        return
    assert result.status is Status.ok, f"{result.status}: {result.message}"
    trials = result.cases[0].trials
    # 2 ms of work per call: the honest time is 2-4 ms whatever the hack makes it say
    assert trials and min(trials) > 1500, f"forged trials (us): {trials}"


@pytest.mark.parametrize("name", params(WRONG))
def test_corpus_attack_with_wrong_outputs_is_caught(name: str) -> None:
    statuses, phrase, fields = WRONG[name]
    result = evaluate(name, **fields)
    assert result.status in statuses, f"{result.status}: {result.message} {result.mismatch}"
    assert phrase in result.message + result.mismatch, result.message
    assert_gone(result.sandbox_pid)
    assert_healthy_next()


@pytest.mark.parametrize("name", params(HONEST_TIME))
def test_corpus_attack_on_the_timer_leaves_the_honest_time(name: str) -> None:
    result = evaluate(name, **HONEST_TIME[name])
    assert_honest_time(result)
    assert_gone(result.sandbox_pid)
    assert_healthy_next()


def test_corpus_forged_result_and_early_exit_never_pass() -> None:
    result = evaluate("corpus_pgb_forged_exit")
    if result.status is Status.ok:  # the forgery never ran where it is timed (a replayed plan)
        assert_honest_time(result)
    assert result.status in (Status.hacked, Status.runtime_error, Status.ok), (
        f"{result.status}: {result.message} trials={result.cases and result.cases[0].trials}"
    )
    assert_gone(result.sandbox_pid)
    assert_healthy_next()


# The attack's payload, matched here without importing the attack (which would plant it).
PAYLOAD = "raise SystemExit('shadowed by corpus_pgb_shadow_module')\n"


def test_corpus_shadowed_torch_module_is_planted_nowhere_outside_the_sandbox() -> None:
    if confine.landlock_abi() < 1:
        pytest.skip("Landlock is not available on this kernel: writes cannot be denied here")
    repo = HERE.parent.parent
    watched = [HERE / "torch.py", repo / "torch.py", repo / "tests" / "torch.py"]
    try:
        result = evaluate("corpus_pgb_shadow_module")
        planted = [str(p) for p in watched if p.exists() and p.read_text() == PAYLOAD]
    finally:
        for path in watched:
            if path.exists() and path.read_text() == PAYLOAD:
                path.unlink()
    assert result.status is Status.ok, result.message
    assert not planted, f"torch.py planted outside the sandbox: {planted}"
    assert_healthy_next()


def expected_checks(path: Path) -> set[str]:
    return set(re.findall(r"^\s*(?://|#)\s*expect:\s*([\w-]+)", header(path), re.MULTILINE))


STATIC = sorted(p for p in HERE.glob("corpus_*") if p.suffix in ("", ".py") and expected_checks(p))


STATIC_STEMS = {p.stem for p in STATIC}


def static_params() -> list:
    return [
        pytest.param(p, id=p.name,
                     marks=pytest.mark.xfail(strict=True, reason=GETS_THROUGH[p.stem]))
        if p.stem in GETS_THROUGH else pytest.param(p, id=p.name)
        for p in STATIC
    ]  # fmt: skip


@pytest.mark.parametrize("path", static_params())
def test_corpus_static_attack_is_rejected_by_its_named_check(path: Path) -> None:
    expected = expected_checks(path)
    assert expected, f"{path.name} names no expected check"
    screening = screen(load_candidate(path))
    strict = {f.check for f in screening.strict}
    assert not screening.passed, f"{path.name} passed the screen"
    assert expected <= strict, f"{path.name}: expected {expected}, strict findings {strict}"


# --- GPU: the device side of pygpubench's exploits, and Wafer's cache in C++ ----------------------
@pytest.mark.gpu
def test_gpu_corpus_zeroing_every_device_allocation_cannot_reach_the_reference(
    tmp_path: Path,
) -> None:
    result = evaluate("corpus_pgb_gpu_scan_zeros", device="cuda")
    assert result.status is Status.incorrect, f"{result.status}: {result.message}"
    assert_gone(result.sandbox_pid)
    assert_healthy_native_next(tmp_path)


# --- docs/FAULTS_COVERAGE.md's corpora section names real tests ---------------------------------
COVERAGE = HERE.parent.parent / "docs" / "FAULTS_COVERAGE.md"
SECTION = "## Public exploit corpora (issue 32)"


def named_in_the_corpora_section() -> set[str]:
    text = COVERAGE.read_text()
    assert SECTION in text, f"{COVERAGE.name} has no section {SECTION!r}"
    return set(re.findall(r"`(tests/[^`]+?\.py::[^`]+)`", text.split(SECTION, 1)[1]))


def test_every_test_the_corpora_section_names_is_collected() -> None:
    named = named_in_the_corpora_section()
    files = sorted({n.split("::")[0] for n in named})
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=COVERAGE.parent.parent, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    collected = {line.strip() for line in proc.stdout.splitlines() if "::" in line}
    assert collected, proc.stdout[-2000:] + proc.stderr[-2000:]
    missing = sorted(n for n in named if n not in collected)
    assert not missing, f"named in {COVERAGE.name} but not collected: {missing}"
    # and every attack file is run by a test of this module
    ported = {p.stem for p in HERE.glob("corpus_*") if p.suffix in ("", ".py")}
    source = Path(__file__).read_text()
    unused = sorted(n for n in ported if f'"{n}' not in source and n not in STATIC_STEMS)
    assert not unused, f"corpus attacks no test runs: {unused}"


@pytest.mark.gpu
def test_gpu_corpus_native_pointer_cache_leaves_the_honest_time(tmp_path: Path) -> None:
    """Wafer's C++ result cache: hacked or incorrect, or timed no faster than the healthy
    kernel it wraps (whose every call it would otherwise skip)."""
    result = run_worker(gpu_job(HERE / "corpus_wafer_pointer_cache_native", tmp_path))
    assert_gone(result.sandbox_pid)
    healthy = assert_healthy_native_next(tmp_path)
    if result.status in (Status.hacked, Status.incorrect):
        return
    assert result.status in (Status.ok, Status.suspect), f"{result.status}: {result.message}"
    cached, honest = statistics.median(result.cases[0].trials), healthy.cases[0].time_us
    assert cached >= 0.9 * honest, f"cache: {cached:.1f} us, the healthy kernel: {honest:.1f} us"
