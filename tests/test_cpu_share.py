"""The quiet judge (issue 33): CPU work runs niced and off the judges' cores, judges on their own.

Real processes throughout: a compile through the build stage (g++ behind a shell that first
prints the niceness and cores it was started with), a real judge process, the real CPU-stage
thread pool. Expectations are relative to the test's own niceness: the suite may run under
`nice -n 10`, and a process can only be lowered, never raised.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hipevolve.core import cpu_share
from hipevolve.core.config import VerifierSettings
from hipevolve.core.cpu_share import CpuPolicy, CpuShare
from hipevolve.verifier.build.compile import Compiler, build

NICE = 17  # the configured niceness in these tests: above the runner's own


def _my_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.fixture(autouse=True)
def default_plan():
    yield
    cpu_share.install(CpuPolicy())
    cpu_share.claim(0)


@pytest.fixture
def lower_than_me():
    if _my_nice() >= NICE:
        pytest.skip(f"the test runs at nice {_my_nice()}: nothing left to lower to {NICE}")


def _reporting_compiler() -> Compiler:
    """g++, behind a shell whose child prints its niceness (stat field 19) and cores first."""
    report = ("echo nice=$(cut -d' ' -f19 /proc/self/stat) "
              "cores=$(grep Cpus_allowed_list /proc/self/status | cut -f2)")  # fmt: skip
    gxx = "g++ -x c++ -shared -fPIC -O1 kernel.hip -o lib.so"
    return Compiler(name="test", argv=("sh", "-c", f"{report}; {gxx}"), toolchain="g++ (test)",
                    lists_dependencies=False)  # fmt: skip


def _compiled_with(tmp_path, salt: int) -> tuple[int, set[int]]:
    result = build(f'extern "C" int answer() {{ return {salt}; }}\n', _reporting_compiler(),
                   tmp_path)  # fmt: skip
    assert result.ok, result.log
    m = re.search(r"nice=(\d+) cores=(\S+)", result.log)
    assert m, result.log
    return int(m[1]), set(cpu_share._parse_core_list(m[2]))


def test_a_compile_through_the_build_stage_runs_at_the_configured_niceness(tmp_path, lower_than_me):
    cpu_share.install(CpuPolicy(nice=NICE))
    nice, cores = _compiled_with(tmp_path, 1)
    assert nice == NICE
    assert cores == os.sched_getaffinity(0)  # too few cores here to pin: anywhere


def test_with_the_quiet_judge_off_a_compile_runs_as_before(tmp_path, lower_than_me):
    cpu_share.install(CpuPolicy(enabled=False, nice=NICE))
    nice, cores = _compiled_with(tmp_path, 2)
    assert nice == _my_nice() and cores == os.sched_getaffinity(0)
    assert cpu_share.current() == cpu_share.OFF


def test_a_compile_never_runs_at_a_higher_priority_than_its_parent(tmp_path):
    if _my_nice() == 0:
        pytest.skip("the test runs at nice 0: a lower setting cannot show the clamp")
    cpu_share.install(CpuPolicy(nice=0))
    nice, _ = _compiled_with(tmp_path, 3)
    assert nice == _my_nice()


def _two_cores() -> tuple[int, int]:
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores to see a process pinned to one of them")
    return cores[0], cores[-1]


def test_a_pinned_share_starts_the_child_on_the_work_cores_only():
    work, _ = _two_cores()
    share = CpuShare(nice=NICE, work_cores=(work,), judge_cores=((99,),), host_cores=2)
    probe = "import os; print(sorted(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         preexec_fn=cpu_share.in_child(share), check=True).stdout  # fmt: skip
    assert out.split("]")[0] + "]" == f"[{work}]"
    assert int(out.split()[-1]) == max(NICE, _my_nice())


def test_a_judge_starts_on_its_slots_cores_and_the_spawning_thread_is_restored():
    from hipevolve.verifier.isolate import Standby

    _, judge_core = _two_cores()
    before = os.sched_getaffinity(0)
    judge = Standby.spawn("cpu", cores=(judge_core,))
    try:
        status = Path(f"/proc/{judge.proc.pid}/status").read_text()
        stat = Path(f"/proc/{judge.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    finally:
        judge.discard()
    allowed = re.search(r"Cpus_allowed_list:\s*(\S+)", status)[1]
    assert cpu_share._parse_core_list(allowed) == (judge_core,)
    assert int(stat[16]) == _my_nice()  # field 19: the judge is not niced, nor raised
    assert os.sched_getaffinity(0) == before


def _group_cores(pgid: int) -> set[tuple[int, ...]]:
    """The distinct core sets of every thread of process group `pgid`."""
    from hipevolve.verifier.gpu.confine import group_pids

    found = set()
    for pid in group_pids(pgid):
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                found.add(tuple(sorted(os.sched_getaffinity(int(tid)))))
            except OSError:
                continue  # a thread that ended meanwhile
    return found


def test_a_warm_judge_waits_on_the_work_cores_and_times_on_its_slots():
    from hipevolve.verifier.isolate import StandbyPool

    work, judge_core = _two_cores()
    with StandbyPool(size=1, device="cpu", cores=(judge_core,), standby_cores=(work,)) as pool:
        waiting = pool.take()  # the warm one, moved onto the slot's core
        assert _group_cores(waiting.proc.pid) == {(judge_core,)}
        pool.put_back(waiting)  # back beside the CPU work while it waits
        assert _group_cores(waiting.proc.pid) == {(work,)}


def test_the_cpu_stage_threads_run_niced_and_the_callers_thread_does_not(lower_than_me):
    from hipevolve.verifier.pipeline import cpu_pool

    mine = _my_nice()
    pool = cpu_pool(1, CpuShare(nice=NICE, host_cores=1))
    assert pool.submit(_my_nice).result() == NICE
    assert _my_nice() == mine
    assert cpu_pool(1, cpu_share.OFF).submit(_my_nice).result() == mine


# --- the split --------------------------------------------------------------------------------


@pytest.mark.parametrize(("cores", "slots", "per_slot", "pinned"), [
    (2, 1, 2, False),    # this machine: nice only
    (4, 1, 2, False),    # 4 <= 1*2+2
    (5, 1, 2, True),
    (16, 1, 2, True),    # the H100 machine
    (16, 2, 2, True),
    (16, 8, 2, False),   # 16 <= 8*2+2
    (16, 8, 1, True),
    (128, 8, 2, True),
    (16, 1, 0, False),   # 0 cores per slot: never pin
])  # fmt: skip
def test_the_split_reserves_disjoint_judge_cores_only_when_enough_remain(
    cores, slots, per_slot, pinned
):
    share = cpu_share.plan(CpuPolicy(cores_per_slot=per_slot), slots, cores=range(cores),
                           groups=[(c,) for c in range(cores)])  # fmt: skip
    assert share.pinned is pinned and share.nice == 10 and share.host_cores == cores
    if not pinned:
        assert share.work_cores == () and share.cores_of_slot(0) == ()
        return
    judges = [c for j in share.judge_cores for c in j]
    assert len(share.judge_cores) == slots and all(len(j) == per_slot for j in share.judge_cores)
    assert len(set(judges)) == len(judges)  # no two slots share a core
    assert set(judges).isdisjoint(share.work_cores)
    assert sorted(judges + list(share.work_cores)) == list(range(cores))
    assert 0 in share.work_cores  # the housekeeping core goes to the CPU work


def test_smt_siblings_of_a_judge_core_never_go_to_the_compiles():
    siblings = [(c, c + 8) for c in range(8)]  # 16 logical cores, 8 physical
    share = cpu_share.plan(CpuPolicy(), 2, cores=range(16), groups=siblings)
    assert share.judge_cores == ((7, 15), (6, 14))
    assert share.work_cores == (0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13)


def test_a_split_that_smt_would_starve_is_not_pinned():
    siblings = [(c, c + 3) for c in range(3)]  # 6 logical cores, 3 physical; 2 slots take 2
    share = cpu_share.plan(CpuPolicy(cores_per_slot=1), 3, cores=range(6), groups=siblings)
    assert not share.pinned and "SMT" in share.why_unpinned


def test_the_policy_off_gives_the_empty_plan_on_any_host():
    for cores in (2, 16, 128):
        assert cpu_share.plan(CpuPolicy(enabled=False), 1, cores=range(cores)) == cpu_share.OFF


def test_the_plan_describes_the_split_in_one_line():
    share = cpu_share.plan(CpuPolicy(), 1, cores=range(16), groups=[(c,) for c in range(16)])
    assert share.describe() == "16 cores: judges on slot 0: 14-15; CPU work at nice +10 on 0-13"
    assert cpu_share.core_list((0, 1, 2, 5, 7, 8)) == "0-2,5,7-8"


def test_a_thread_pinned_to_part_of_the_host_still_gets_the_hosts_plan():
    one, _ = _two_cores()
    cpu_share.install(CpuPolicy(nice=NICE))
    seen = []

    def pinned() -> None:
        os.sched_setaffinity(0, {one})
        seen.append(cpu_share.current())

    t = threading.Thread(target=pinned)
    t.start()
    t.join()
    assert seen == [cpu_share.current()] and seen[0].host_cores == len(os.sched_getaffinity(0))


def test_slots_claim_the_host_for_their_count():
    cpu_share.install(CpuPolicy(cores_per_slot=1))
    assert cpu_share.claim(3) == cpu_share.plan(CpuPolicy(cores_per_slot=1), 3)


# --- settings ---------------------------------------------------------------------------------


def test_the_evaluation_key_does_not_change_with_the_cpu_share_settings():
    from hipevolve.problems import get_task
    from hipevolve.verifier.evaluators import settings_key

    task = get_task("softmax")
    key = settings_key(task, VerifierSettings(), "cuda")
    quiet_off = VerifierSettings(quiet_judge=False, cpu_work_nice=3, judge_cores_per_slot=1)
    assert settings_key(task, quiet_off, "cuda") == key
    assert settings_key(task, VerifierSettings(trials=31), "cuda") != key  # the key does see some


def test_the_settings_become_the_policy():
    settings = VerifierSettings(quiet_judge=False, cpu_work_nice=5, judge_cores_per_slot=1)
    assert settings.cpu_policy() == CpuPolicy(enabled=False, nice=5, cores_per_slot=1)
    assert VerifierSettings().cpu_policy() == CpuPolicy()


def test_a_niceness_out_of_range_is_refused_in_one_line(tmp_path):
    from hipevolve.core.config import load_settings
    from hipevolve.core.errors import UserError

    (tmp_path / "hipevolve.toml").write_text("[verifier]\ncpu_work_nice = 25\n")
    with pytest.raises(UserError) as refused:
        load_settings(cwd=tmp_path)
    assert "cpu_work_nice" in refused.value.line() and "\n" not in refused.value.line()


def test_doctor_prints_the_core_split_and_does_not_count_it_as_a_backend():
    from hipevolve.app.doctor import CPU_SHARE, Check, _cpu_share, usable

    check = _cpu_share()
    assert check.name == CPU_SHARE and "cores" in check.detail
    assert usable([check, Check(name="nvcc", ok=True, detail="")]) == ["nvcc"]


@pytest.mark.gpu
def test_the_seed_evaluates_ok_with_its_judge_pinned_and_the_compile_niced(tmp_path):
    """On the GPU machine: the quiet judge changes where things run, not what they give."""
    from hipevolve.core.candidate import load_candidate
    from hipevolve.problems import get_task
    from hipevolve.verifier.build.backends import resolve_backend
    from hipevolve.verifier.pipeline import evaluate_many
    from hipevolve.verifier.slots import Slots, visible_gpus

    backend = resolve_backend("auto")
    task = get_task("softmax")
    settings = VerifierSettings(cache_dir=tmp_path, trials=10)
    cpu_share.install(settings.cpu_policy())
    with Slots(backend, visible_gpus(backend)[:1], standby=1) as slots:
        share = slots.cpu
        judges = slots.slots[0].judges
        judge = judges.take()
        allowed = Path(f"/proc/{judge.proc.pid}/status").read_text()
        judges.put_back(judge)
        evaluation = evaluate_many([load_candidate(task.seeds[0])], task, settings, backend,
                                   slots=slots)[0]  # fmt: skip
    assert evaluation.status.value == "ok", evaluation.message
    cores = re.search(r"Cpus_allowed_list:\s*(\S+)", allowed)[1]
    expected = share.cores_of_slot(0) or tuple(sorted(cpu_share.HOST_CORES))
    assert cpu_share._parse_core_list(cores) == expected, share.describe()
