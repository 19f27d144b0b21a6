"""The compile stage: content-addressed cache, limits, no locks to go stale (FAULTS.md 22-25).

These use g++ as the compiler (a real one that every machine here has): the stage treats the
compiler as a command, so its cache, limits and publication are the same for nvcc and hipcc.
"""

import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hipevolve.verifier.build.compile import Compiler, build, build_many, trim_log

GXX = Compiler(name="test", argv=("g++", "-x", "c++", "-shared", "-fPIC", "-O1", "kernel.hip",
                                  "-o", "lib.so"), toolchain="g++ (test)")


def source(value: int) -> str:
    return f'extern "C" int answer() {{ return {value}; }}\n'


def call_answer(library: Path) -> int:
    import ctypes

    return ctypes.CDLL(str(library)).answer()


def test_second_build_of_the_same_source_is_a_cache_hit(tmp_path):
    first = build(source(1), GXX, tmp_path)
    second = build(source(1), GXX, tmp_path)
    assert first.ok and not first.cached and second.cached and second.library == first.library


def test_cache_key_covers_flags_and_toolchain(tmp_path):
    a = build(source(1), GXX, tmp_path)
    b = build(source(1), GXX.model_copy(update={"toolchain": "g++ (other)"}), tmp_path)
    assert a.key != b.key and not b.cached


def test_build_folder_is_removed_after_success_and_failure(tmp_path):
    build(source(1), GXX, tmp_path)
    build("this is not C++", GXX, tmp_path)
    assert list((tmp_path / "build").iterdir()) == []


def test_compile_errors_carry_the_candidates_own_line_numbers(tmp_path):
    result = build("// line 1\n// line 2\nint broken( {\n", GXX, tmp_path)
    assert not result.ok
    assert "kernel.hip:3" in result.log and str(tmp_path) not in result.log


def test_same_name_different_sources_compiled_concurrently_do_not_mix(tmp_path):
    results = build_many([source(v) for v in range(6)], GXX, tmp_path, jobs=6)
    assert [call_answer(r.library) for r in results] == list(range(6))


def test_identical_sources_compiled_concurrently_publish_one_library(tmp_path):
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: build(source(7), GXX, tmp_path), range(4)))
    assert len({r.library for r in results}) == 1 and call_answer(results[0].library) == 7


def test_preprocessor_bomb_is_killed_at_the_time_limit_and_its_folder_removed(tmp_path):
    bomb = "#define A0 x\n" + "".join(f"#define A{i} A{i-1} A{i-1}\n" for i in range(1, 40))
    start = time.monotonic()
    result = build(bomb + "A39\n", GXX, tmp_path, timeout_s=3)
    assert not result.ok and "killed after 3 s" in result.log
    assert time.monotonic() - start < 3 + 20  # killed near 3 s; unkilled, it runs for hours
    assert list((tmp_path / "build").iterdir()) == []


def test_huge_object_file_is_refused(tmp_path):
    huge = "extern \"C\" { char big[64 << 20] = {1}; }\n"
    result = build(huge, GXX, tmp_path, max_object_bytes=4 << 20)
    assert not result.ok
    assert not list((tmp_path / "lib").rglob("*.so"))


def test_compile_killed_mid_way_leaves_nothing_that_blocks_the_next(tmp_path):
    script = (
        "import sys; from pathlib import Path; sys.path[:0] = sys.argv[2:]\n"
        "from hipevolve.verifier.build.compile import build, Compiler\n"
        "c = Compiler(name='t', argv=('sh', '-c', 'sleep 60'), toolchain='t')\n"
        "build('int x;', c, Path(sys.argv[1]), timeout_s=120)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], start_new_session=True)
    deadline = time.monotonic() + 30
    while not list((tmp_path / "build").glob("*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    start = time.monotonic()
    result = build(source(3), GXX, tmp_path, timeout_s=60)
    assert result.ok and call_answer(result.library) == 3
    assert time.monotonic() - start < 30


@pytest.mark.parametrize("bad", ["", "   "])
def test_empty_source_fails_cleanly(tmp_path, bad):
    result = build(bad, GXX.model_copy(update={"argv": ("sh", "-c", "exit 1")}), tmp_path)
    assert not result.ok and result.log


def test_trim_log_keeps_errors_and_caps_length(tmp_path):
    noise = "\n".join(f"{tmp_path}/kernel.hip:{i}: warning: w{i}" for i in range(500))
    text = trim_log(noise + f"\n{tmp_path}/kernel.hip:9: error: boom\n  9 | x\n    ^", tmp_path)
    assert text.startswith("kernel.hip:9: error: boom") and len(text) < 3000


def test_prepare_compiles_cache_misses_side_by_side_and_looks_up_hits_without_compiling(
    tmp_path, monkeypatch
):
    """prepare screens and looks the caches up one candidate at a time (a turn); a compile the
    cache lacks runs after the turn, so two of them overlap."""
    from hipevolve.core.candidate import load_candidate
    from hipevolve.core.config import load_settings
    from hipevolve.problems import get_task
    from hipevolve.verifier import pipeline
    from hipevolve.verifier.build import backends

    # Each compile logs when it starts and ends: overlap is read from the log, not from a wall
    # clock bound that a loaded machine can miss.
    log = tmp_path / "compiles.log"
    script = f"echo start $(date +%s.%N) >> {log} && sleep 2 && echo end $(date +%s.%N) >> {log}"
    slow = Compiler(name="test", argv=("sh", "-c", script + " && : > lib.so"), toolchain="sleep",
                    lists_dependencies=False)
    monkeypatch.setattr(backends, "compiler_for", lambda backend: slow)
    task = get_task("softmax")
    seed = load_candidate(task.seeds[0])
    variants = [seed.model_copy(update={"hip_source": f"{seed.hip_source}\n// variant {i}\n"})
                for i in range(2)]  # fmt: skip
    settings = load_settings().verifier.model_copy(
        update={"cache_dir": tmp_path, "amd_targets": ()}
    )
    prepare = lambda c: pipeline.prepare(c, task, settings, "cuda")  # noqa: E731
    with ThreadPoolExecutor(2) as pool:
        cold = list(pool.map(prepare, variants))
    assert all(p.done is None and p.library is not None for p in cold)
    events = sorted((float(t), kind) for kind, t in (ln.split() for ln in log.read_text().splitlines()))
    assert [kind for _, kind in events] == ["start", "start", "end", "end"]  # side by side
    warm = prepare(variants[0])
    assert warm.library == cold[0].library and len(log.read_text().splitlines()) == 4  # no compile
