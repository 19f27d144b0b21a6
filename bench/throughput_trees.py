"""Two checkouts side by side: evaluations per minute of this tree's verifier and another's.

    python bench/verifier_throughput.py --baseline-tree /work/base0dc             # both tasks
    python bench/verifier_throughput.py --baseline-tree base0dc --candidates 4 \\
        --gdn-candidates 2 --trials 10                                            # smoke run
    python bench/verifier_throughput.py --baseline-tree base0dc --tasks softmax --rounds 3

Goals (GOALS): issue 47 asks for twice 63b7d19's GDN evaluations a minute and no fewer softmax
ones (issue 32 had asked for no more than 10% fewer). Each tree evaluates as its own runs do
(throughput_phase.py): this tree with the run's baseline, timed before the clock (the seconds
are printed), an older tree through evaluate_many, the reference timed inside every
evaluation. Each phase (one tree, one task, one cache state) runs in a subprocess of its own
whose PYTHONPATH holds only that tree's `hipevolve` namespace (`shim`: a folder of links laid
out as the tree's pyproject maps its folders), so the judges, zygotes and sandboxes it starts
import that tree's code too. Phases alternate: cold (empty compile cache) then warm (the same cache), each task,
the two trees in turn, the first tree swapped so a drifting machine favours neither.
--rounds N runs all of it N times, each round with empty caches of its own and the trees'
order swapped again, and reports each ratio as the median of the rounds' with the rounds'
ratios beside it: on an H200 one tree's softmax phase of 20 candidates took 19.5 s in one
call and 23.9 s in the next, so one round's ratio moves by more than the goal's margin. Both trees get the same candidate folders: the softmax set of bench/candidates and
gated_delta_net's chunked seed with a few tunable configurations of it (taken from the
baseline tree's seed by default, the older kernel both trees can build).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
CANDIDATES = BENCH / "candidates" / "softmax"  # the softmax set both benches time
# this tree's evaluations per minute over the baseline's, at least (issue 47: twice the GDN
# evaluations a minute of 63b7d19, and no fewer of softmax's)
GOALS = {"gated_delta_net": 2.0}
GOAL = 1.0  # every other task
GDN_SEED = Path("problems/gated_delta_net/seeds/chunked")
# The seed as it is, then one tunable changed at a time (values an NVIDIA build takes too).
GDN_CONFIGS: tuple[dict[str, str], ...] = (
    {},
    {"BV": "16"},
    {"BV": "64"},
    {"TC_PREP_RUN": "4"},
    {"U_BF16": "0"},
    {"TC_STAGES": "2"},
)
KINDS = ("ok", "incorrect", "compile_error")


class TreeError(Exception):
    """A tree given on the command line that cannot be benchmarked; the message says why."""


class TreePhase(BaseModel):
    """One tree's pipeline over one task's candidates and one cache state."""

    tree: str = Field(description="this or baseline")
    task: str
    cache: str = Field(description="cold or warm")
    statuses: dict[str, str] = Field(description="candidate -> status")
    wall_s: float = Field(description="seconds of the evaluations, the subprocess's start aside")
    seconds: dict[str, dict[str, float]] = Field(default_factory=dict)
    imported_from: str = Field(default="", description="where the phase's hipevolve came from")
    mode: str = Field(default="", description="how the tree evaluated (throughput_phase.py)")
    start_s: float = Field(default=0.0, description="the run's baseline, before the clock")
    round: int = Field(default=0, description="which round of --rounds (caches of its own)")

    @property
    def per_minute(self) -> float:
        return 60.0 * len(self.statuses) / self.wall_s if self.wall_s > 0 else 0.0

    def counts(self) -> dict[str, int]:
        counts = {k: 0 for k in (*KINDS, "other")}
        for status in self.statuses.values():
            kind = "ok" if status in ("ok", "suspect") else status
            counts[kind if kind in KINDS else "other"] += 1
        return counts

    def stage_means(self) -> dict[str, float]:
        """Mean seconds per stage over the candidates that reached it."""
        sums: dict[str, list[float]] = {}
        for stages in self.seconds.values():
            for name, s in stages.items():
                sums.setdefault(name, []).append(s)
        return {name: sum(v) / len(v) for name, v in sums.items()}


# ----------------------------------------------------------------------------- trees


def check_tree(path: Path) -> Path:
    """The tree's root, resolved; TreeError when it is no hipevolve checkout."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise TreeError(f"--baseline-tree {path}: no such folder (git worktree add it first)")
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or "hipevolve" not in _package_dirs(pyproject):
        raise TreeError(f"--baseline-tree {path}: not a hipevolve checkout (no pyproject.toml "
                        "mapping the hipevolve namespace)")  # fmt: skip
    return root


def _package_dirs(pyproject: Path) -> dict[str, str]:
    data = tomllib.loads(pyproject.read_text())
    return data.get("tool", {}).get("setuptools", {}).get("package-dir", {})


def shim(tree: Path, where: Path) -> Path:
    """A folder to put on PYTHONPATH so that `import hipevolve...` finds `tree`'s code: the
    namespace's folders linked as the tree's pyproject maps them (hipevolve.verifier ->
    verifier/, ...). Returns the folder."""
    mapping = _package_dirs(tree / "pyproject.toml")
    top = where / "hipevolve"
    top.mkdir(parents=True, exist_ok=True)
    for entry in (tree / mapping.get("hipevolve", "hipevolve")).iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        parts = name.split(".")
        if len(parts) == 2 and parts[0] == "hipevolve" and not (top / parts[1]).exists():
            (top / parts[1]).symlink_to(tree / folder)
    return where


def tree_commit(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return done.stdout.strip()[:72] or "(not a git checkout)"


# ----------------------------------------------------------------------------- candidates


def gdn_candidates(seed: Path, out: Path, count: int) -> list[Path]:
    """`count` candidate folders: the seed, then one tunable changed at a time (configurations
    the seed does not declare are skipped). Each folder holds kernel.hip and model.py."""
    from hipevolve.evolution.offline.tunables import parse_tunables, with_values

    source = (seed / "kernel.hip").read_text()
    declared = {t.name: set(t.values) for t in parse_tunables(source)}
    folders = []
    for config in GDN_CONFIGS:
        if len(folders) >= count:
            break
        if any(v not in declared.get(k, ()) for k, v in config.items()):
            continue
        name = "gdn_seed" + "".join(
            f"_{k.lower()}{'_' if k[-1].isdigit() else ''}{v}" for k, v in config.items()
        )  # gdn_seed_bv16, gdn_seed_u_bf16_0
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "kernel.hip").write_text(with_values(source, config) if config else source)
        (folder / "model.py").write_text((seed / "model.py").read_text())
        folders.append(folder)
    return folders


# ----------------------------------------------------------------------------- phases


def case_names(tree: Path, task: str) -> list[str]:
    """The cases `tree` defines for a built-in task: the ones both trees judge, so a case one
    tree's task gained (gated_delta_net's 32k and packed cases) does not count as verifier time."""
    folder = tree / "problems" / task
    try:
        data = tomllib.loads((folder / "task.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise TreeError(f"{folder}: no readable task.toml ({e})") from None
    return [c["name"] for c in data.get("cases", [])]


def run_phase(
    tree: str, path: Path, shim_dir: Path, task: str, folders: list[Path], cache_dir: Path,
    cache: str, trials: int | None, backend: str, out: Path, cases: list[str] | None = None,
) -> TreePhase:  # fmt: skip
    """One phase in a subprocess whose `hipevolve` is `path`'s (through `shim_dir`), on the
    task's `cases` only where given."""
    spec = {"task": task, "folders": [str(f) for f in folders], "cache_dir": str(cache_dir),
            "trials": trials, "backend": backend, "cases": cases}  # fmt: skip
    job = out.with_suffix(".job.json")
    job.write_text(json.dumps(spec))
    # The shim first: whatever else PYTHONPATH holds (carried packages) stays behind it.
    rest = os.environ.get("PYTHONPATH", "")
    env = dict(os.environ) | {"PYTHONPATH": os.pathsep.join(filter(None, [str(shim_dir), rest]))}
    start = time.monotonic()
    # Not in a tree's root: `python -m` (the judges) puts its folder first on sys.path, where a
    # tree's own hipevolve/ folder would shadow the shim and mix two trees' code.
    done = subprocess.run(
        [sys.executable, str(BENCH / "throughput_phase.py"), str(job), str(out)],
        env=env, cwd=str(out.parent), check=False,
    )  # fmt: skip
    if done.returncode != 0 or not out.is_file():
        raise TreeError(f"{tree} {task} {cache}: the phase failed (exit {done.returncode}, "
                        f"{time.monotonic() - start:.0f} s); its output is above")  # fmt: skip
    data = json.loads(out.read_text())
    phase = TreePhase(tree=tree, task=task, cache=cache, **data)
    if Path(phase.imported_from) != path.resolve():
        raise TreeError(f"{tree} {task} {cache}: ran {phase.imported_from}'s code, not {path}'s")
    return phase


def schedule(tasks: list[str], rounds: int = 1) -> list[tuple[int, str, str, str]]:
    """(round, cache, task, tree) in run order: each round cold before warm; within each, the
    tasks in turn and the two trees in turn, each task's first tree swapped between its cold
    and warm phases (and between neighbouring tasks) and again every round, so no task's
    phases always start with the same tree."""
    order = []
    for r in range(rounds):
        for c, cache in enumerate(("cold", "warm")):
            for i, task in enumerate(tasks):
                trees = ("baseline", "this") if (r + c + i) % 2 else ("this", "baseline")
                order += [(r, cache, task, tree) for tree in trees]
    return order


# ----------------------------------------------------------------------------- the report


def round_ratios(phases: list[TreePhase]) -> dict[str, list[float | None]]:
    """'task cache' -> this tree's evaluations per minute over the baseline's, each round's."""
    found: dict[str, list[float | None]] = {}
    by = {(p.tree, p.task, p.cache, p.round): p for p in phases}
    for (tree, task, cache, r), p in by.items():
        base = by.get(("baseline", task, cache, r))
        if tree != "this" or base is None:
            continue
        ratio = p.per_minute / base.per_minute if base.per_minute else None
        found.setdefault(f"{task} {cache}", []).append(ratio)
    return found


def ratios(phases: list[TreePhase]) -> dict[str, float | None]:
    """'task cache' -> the median over the rounds of this tree's evaluations per minute over
    the baseline's (None where a baseline evaluated nothing)."""
    found: dict[str, float | None] = {}
    for name, each in round_ratios(phases).items():
        known = [r for r in each if r is not None]
        found[name] = statistics.median(known) if known and len(known) == len(each) else None
    return found


def table(phases: list[TreePhase]) -> str:
    rounds = len({p.round for p in phases}) > 1
    header = (f"{'task':<16} {'cache':<5} {'tree':<8} {'evaluated':>9} {'wall s':>8} "
              f"{'evals/min':>10}  {'ok':>3} {'incorrect':>9} {'compile_error':>13} {'other':>5}"
              + ("  round" if rounds else ""))  # fmt: skip
    lines = [header, "-" * len(header)]
    key = {"cold": 0, "warm": 1}
    for p in sorted(phases, key=lambda p: (p.task, key.get(p.cache, 2), p.round, p.tree != "this")):
        c = p.counts()
        lines.append(
            f"{p.task:<16} {p.cache:<5} {p.tree:<8} {len(p.statuses):>9} {p.wall_s:>8.1f} "
            f"{p.per_minute:>10.2f}  {c['ok']:>3} {c['incorrect']:>9} {c['compile_error']:>13} "
            f"{c['other']:>5}" + (f"  {p.round + 1:>5}" if rounds else "")
        )
    return "\n".join(lines)


def ratio_lines(phases: list[TreePhase]) -> list[str]:
    lines = []
    each = round_ratios(phases)
    for name, r in ratios(phases).items():
        if r is None:
            lines.append(f"ratio this/baseline, {name}: n/a (the baseline evaluated nothing)")
            continue
        goal = GOALS.get(name.split()[0], GOAL)
        verdict = "goal met" if r >= goal else f"below the {goal:.2f} goal"
        rounds = (
            f" (median of {len(each[name])} rounds: {', '.join(f'{x:.2f}' for x in each[name])})"
            if len(each[name]) > 1
            else ""
        )
        lines.append(f"ratio this/baseline, {name}: {r:.2f}{rounds}  {verdict}")
    return lines


def stage_lines(phases: list[TreePhase]) -> list[str]:
    """Mean seconds per evaluation stage, each tree beside the other, per task and cache (over
    every round's evaluations)."""
    lines = []
    for task, cache in dict.fromkeys((p.task, p.cache) for p in phases):
        means = {}
        for tree in ("this", "baseline"):
            mine = [p for p in phases if (p.tree, p.task, p.cache) == (tree, task, cache)]
            if mine:
                merged = {f"{p.round}:{n}": s for p in mine for n, s in p.seconds.items()}
                means[tree] = mine[0].model_copy(update={"seconds": merged}).stage_means()
        names = sorted({n for m in means.values() for n in m})
        cells = [f"{n} {'/'.join(f'{means[t].get(n, 0.0):.3f}' for t in means)}" for n in names]
        shown = ", ".join(cells) or "no stage times (nothing reached a judge)"
        lines.append(f"{task} {cache} ({'/'.join(means)}): {shown}")
    return lines


def disagreements(phases: list[TreePhase]) -> list[str]:
    """Candidates whose status differs between the trees in the same task, cache state and
    round."""
    by = {(p.tree, p.task, p.cache, p.round): p for p in phases}
    lines = []
    for (tree, task, cache, r), p in by.items():
        base = by.get(("baseline", task, cache, r))
        if tree != "this" or base is None:
            continue
        where = f"{task} {cache}" + (
            f" round {r + 1}" if len({q.round for q in phases}) > 1 else ""
        )
        for name in sorted(set(p.statuses) | set(base.statuses)):
            a, b = p.statuses.get(name), base.statuses.get(name)
            if a != b:
                lines.append(f"{where} {name}: this {a}, baseline {b}")
    return lines


# ----------------------------------------------------------------------------- the run


def side_by_side(args: Any) -> None:  # noqa: ANN401 (verifier_throughput.py's arguments)
    """This tree and --baseline-tree, phase by phase (throughput_schedule)."""
    base = check_tree(args.baseline_tree)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in tasks if t not in ("softmax", "gated_delta_net")]
    if unknown or not tasks:
        raise TreeError(
            f"--tasks {args.tasks}: the side-by-side bench knows softmax and gated_delta_net"
        )
    if args.candidates < 1 or args.gdn_candidates < 1 or args.rounds < 1:
        raise TreeError("--candidates, --gdn-candidates and --rounds: at least 1 each")
    from hipevolve.verifier.build.backends import resolve_backend

    backend = resolve_backend(args.backend)
    work = Path(tempfile.mkdtemp(prefix="hipevolve-trees-"))
    roots = {"this": ROOT, "baseline": base}
    shims = {name: shim(root, work / f"shim-{name}") for name, root in roots.items()}
    manifest = json.loads((CANDIDATES / "manifest.json").read_text())
    folders = {
        "softmax": [CANDIDATES / c["native"] for c in manifest["candidates"][: args.candidates]],
        "gated_delta_net": gdn_candidates(
            roots[args.gdn_seed] / GDN_SEED, work / "gdn", args.gdn_candidates
        ),
    }
    # Both trees judge the cases both define: verifier time, not a task's new cases.
    both = {t: set(case_names(base, t)) & set(case_names(ROOT, t)) for t in tasks}
    shared = {t: [c for c in case_names(ROOT, t) if c in both[t]] for t in tasks}
    for name, root in roots.items():
        print(f"{name}: {root} ({tree_commit(root)})", flush=True)
    for t in tasks:
        print(f"{t}: the cases both trees define: {', '.join(shared[t])}", flush=True)
    print(f"backend {backend}; work folder {work}", flush=True)
    phases: list[TreePhase] = []
    begin = time.monotonic()
    for r, cache, task, tree in schedule(tasks, args.rounds):
        which = f"round {r + 1}, " if args.rounds > 1 else ""
        print(f"{which}{task} {cache}, {tree} ({len(folders[task])} candidates):", flush=True)
        phase = run_phase(
            tree, roots[tree], shims[tree], task, folders[task],
            work / f"cache-{tree}-{task}-{r}", cache, args.trials, backend,
            work / f"{tree}-{task}-{cache}-{r}.json", shared[task],
        ).model_copy(update={"round": r})  # fmt: skip
        start = (
            f", the run's baseline {phase.start_s:.1f} s before the clock" if phase.start_s else ""
        )
        print(f"  -> {phase.per_minute:.2f} evaluations/min ({phase.imported_from}{start})",
              flush=True)  # fmt: skip
        print(f"     evaluated {phase.mode or 'through evaluate_many'}", flush=True)
        phases.append(phase)
    print()
    print(table(phases))
    print()
    for line in ratio_lines(phases):
        print(line)
    print("mean seconds per stage:")
    for line in stage_lines(phases):
        print(f"  {line}")
    lines = disagreements(phases)
    print("status disagreements between the trees:" if lines else
          "status disagreements between the trees: none")  # fmt: skip
    for line in lines:
        print(f"  {line}")
    print(f"total {time.monotonic() - begin:.0f} s")
    if args.out:
        report = {
            "trees": {n: {"path": str(r), "commit": tree_commit(r)} for n, r in roots.items()},
            "backend": backend,
            "goals": {"default": GOAL, **GOALS},
            "phases": [p.model_dump() | {"per_minute": p.per_minute} for p in phases],
            "ratios": ratios(phases),
            "round_ratios": round_ratios(phases),
            "disagreements": lines,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}")
    if args.keep:
        print(f"kept {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
