"""Gated DeltaNet on one GPU: FLA, our PyTorch reference, our seeds and an evolved kernel, side by side.

    python bench/gdn_vs_fla.py                                    # every timed case (under 7 min on an H200
                                                                  # before the 32k cases and anchor rows)
    python bench/gdn_vs_fla.py --cases qwen_tp1_short,decode_b1   # smoke run
    python bench/gdn_vs_fla.py --candidate runs/x/best --candidate decode=runs/y/best
    python bench/gdn_vs_fla.py --out gdn.json                     # also write every row as JSON
    python bench/gdn_vs_fla.py --anchors none --graph-only        # seeds only, graph mode only
    python bench/gdn_vs_fla.py --anchors flashqla --cases long_32 # one anchor row beside the seed
    python bench/gdn_vs_fla.py --variant TC_WCOLS=16 --variant TC_BV=64,TC_STAGES=2
                                                                  # the seed with other tunables,
                                                                  # each a row beside the seed

Needs a CUDA GPU, FLA (`pip install fla-core`, pure Python over Triton) and nvcc. One process runs
every row, so all share the device, the clocks and the inputs. Rows per task:
- gated_delta_net (prefill): FLA chunk_gated_delta_rule (the baseline), FLA
  fused_recurrent_gated_delta_rule, FlashQLA's chunk_gated_delta_rule (the bar: xQLA is its
  graph time over the row's) and FlashInfer's gdn_prefill where they import, the task's PyTorch
  reference (Model, chunked, fp32), the seed problems/gated_delta_net/seeds/chunked, and a
  candidate (--candidate) when given, and the seed with other values of its `// @tunable`s
  (--variant, a row each). FlashInfer takes packed tokens with cu_seqlens and keeps
  its states as [N, HV, V, K]: its row flattens [B, T] (views), passes B equal lengths, and
  transposes the initial state inside the call (4 MB at 64 heads: some microseconds on its time).
  Under the prefill table, one line per row of ours: its xQLA on every case, and on how many it
  is at least 1.0 within the tolerance.
  Packaging (GDN.md): FlashQLA needs tilelang, whose TVM library loads libz3.so.4.15 (z3-solver
  4.15.x); with no network there, carry the wheels in two calls to one warm machine. TileLang
  compiles each shape at its first call (30-45 s), which the untimed first call absorbs.
- gated_delta_net_decode: FLA fused_recurrent_gated_delta_rule (the baseline), the reference, the
  seed problems/gated_delta_net_decode/seeds/recurrent, and a candidate when given.
FLA's backend dispatch is switched off (FLA_DISABLE_BACKEND_DISPATCH=1 unless set) so the FLA rows
are FLA's own Triton kernels even where FlashQLA is installed. q, k are already L2-normalised, so
FLA runs with use_qk_l2norm_in_kernel=False and scale K^-0.5, from the initial state, returning
the final state.

Protocol:
- Before every trial a 512 MiB buffer is zeroed (more than the 50 MB L2) and the device is
  synchronised, so a trial starts on an idle GPU with cold caches.
- eager: start event, the call, torch.cuda.synchronize(), end event (the synchronise before the
  end event is the anchor protocol of GDN.md: host launch overhead is part of the time).
- graph: the call is captured in a torch.cuda.CUDAGraph after three warm-up calls on a side
  stream (PyTorch's recipe); a trial is a hold kernel (torch.cuda._sleep, 200 us), start event,
  replay, end event. The hold keeps the GPU busy while the host enqueues the rest, so the start
  event fires with the replay already queued and the time is the replay's time on the GPU,
  without the host's cost of launching it (nvbench's blocking kernel; that cost is what CUDA
  graphs remove from a model's step, and it is most of a batch-1 decode call). A trial whose enqueueing outlasted the hold is counted, and the notes under the table
  say so. A row whose capture fails prints "graph: n/a (reason)". The PyTorch reference is not
  captured (slow, and not a kernel).
- Median of --trials (default 30) trials per mode. A row whose call takes so long that the trials
  would pass --row-budget-s (the reference on the large prefill cases) gets fewer, at least 3; the
  notes under the table say which.
- Decode rotates input sets (each with its own state, drawn from its own seed): enough sets that
  their states span 256 MiB, at least 4 and at most 64 (decode_b1: 64 sets, 128 MiB; b32: 4 sets,
  256 MiB; b256: 4 sets, 2 GiB), more than the 50 MB L2; trial i uses set i mod n, so no trial
  finds its state in L2 even apart from the flush. Graph mode captures the calls on every set
  back to back in one graph (each call's inputs are its own static buffers; nothing is copied
  inside or outside the timed region) and reports the replay's time divided by the number of
  sets: the time a decode step takes among others in a model's graph, as Triton's
  do_bench_cudagraph measures it, without the cost of starting a replay (some 5 us on an H200
  even for a graph of one tiny kernel, more than a batch-1 step itself).
- Correctness: every row's o and final state, from its first eager call and from a replay of its
  graph, against the task's Model run in fp32 on the same inputs (q, k, v upcast, so o is not
  rounded to bf16), as relative RMS error; the task's tolerance (rel_rms 5e-3) decides "ok".
  Decode checks input set 0.
- ratio: FLA baseline time / row time in the same mode (> 1: faster than FLA).
- The copy line: one device-to-device copy of 1 GiB, timed as the eager rows are (bytes read and
  written / time). No memory-bound kernel moves faster: the practical ceiling of %roof.
- % roofline: the case's roofline bytes (task.toml) / time / the HBM bandwidth of the card it ran
  on (hipevolve/core/hardware.py: H100 3.35 TB/s, H200 4.8 TB/s; H200's for a card it does not
  know).
Tables go to stdout, progress to stderr. Exit status: 0 when every row that ran is within the
tolerance, 1 when one is not, 2 without a GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from gdn_rows import DECODE, PREFILL, Row, anchor_calls, fla_calls, native_models, rows_for
from gdn_table import (  # noqa: F401 (bench.X for the tests and fitness_fidelity.py)
    ANCHOR,
    BASELINE,
    COLUMNS,
    HBM_BYTES_PER_S,
    Result,
    add_ratios,
    anchor_summary,
    as_json,
    format_table,
    num,
    roofline_pct,
    speedup,
)  # fmt: skip
from graph_timer import (  # noqa: F401 (bench.X for the other benches)
    HOLD_US,
    Call,
    Timer,
    capture,
    copy_bytes_per_s,
    hold_cycles,
)  # fmt: skip

from hipevolve.core.hardware import H200, by_device_name
from hipevolve.core.reference import as_outputs, build_inputs, load_module
from hipevolve.core.taskspec import TaskSpec
from hipevolve.problems import get_task

TASK_ALIASES = {"prefill": PREFILL, "decode": DECODE, PREFILL: PREFILL, DECODE: DECODE}
ROTATE_BYTES = 256 << 20  # decode input sets span at least this much state
MIN_SETS, MAX_SETS = 4, 64
MIN_TRIALS = 3



# ----------------------------------------------------------------------------- pure helpers


# --anchors: the rows that are not ours, by the name the option takes.
ANCHOR_ROWS = {"fla_chunk": "FLA chunk", "fla_recurrent": "FLA fused_recurrent",
               "flashqla": "FlashQLA", "flashinfer": "FlashInfer",
               "reference": "PyTorch reference"}  # fmt: skip


def parse_anchors(requested: Sequence[str]) -> frozenset[str]:
    """The anchor rows (ANCHOR_ROWS' values) to run, from --anchors values: comma-separated
    ANCHOR_ROWS keys, "all" (the default, also when nothing is requested) or "none"."""
    names = [n.strip() for text in requested for n in text.split(",") if n.strip()]
    if not names or "all" in names:
        if len(names) > 1:
            raise ValueError("--anchors all takes no other names")
        return frozenset(ANCHOR_ROWS.values())
    if "none" in names:
        if len(names) > 1:
            raise ValueError("--anchors none takes no other names")
        return frozenset()
    unknown = [n for n in names if n not in ANCHOR_ROWS]
    if unknown:
        raise ValueError(f"unknown anchor(s) {', '.join(unknown)}: use all, none or "
                         f"{', '.join(ANCHOR_ROWS)}")  # fmt: skip
    return frozenset(ANCHOR_ROWS[n] for n in names)


def keep_rows(rows: list[Row], anchors: frozenset[str]) -> list[Row]:
    """`rows` without the anchor rows --anchors left out (ours always stay)."""
    return [r for r in rows if r.name not in ANCHOR_ROWS.values() or r.name in anchors]


def parse_candidate(text: str) -> tuple[str, Path]:
    """`[TASK=]PATH` -> (task name, folder); TASK is prefill, decode or a task name (default
    prefill)."""
    task, sep, path = text.partition("=")
    if not sep:
        return PREFILL, Path(text)
    if task not in TASK_ALIASES:
        raise ValueError(f"unknown task {task!r} in --candidate (use prefill or decode)")
    if not path:
        raise ValueError(f"--candidate {text!r} names no folder")
    return TASK_ALIASES[task], Path(path)


def parse_variant(text: str, tasks: dict[str, TaskSpec]) -> tuple[str, str, str]:
    """`[decode:]NAME=VALUE[,...]` -> (task, row name, kernel source): the task's first seed with
    those tunable values (evolution.offline.tunables.with_values checks names and values)."""
    from hipevolve.evolution.offline.tunables import with_values

    task, sep, rest = text.partition(":")
    task, rest = (TASK_ALIASES.get(task), rest) if sep else (PREFILL, text)
    if task is None:
        raise ValueError(f"unknown task in --variant {text!r} (use decode: or no prefix)")
    pairs = [p.strip() for p in rest.split(",") if p.strip()]
    values = dict(p.partition("=")[::2] for p in pairs)
    if not pairs or any("=" not in p or not p.partition("=")[2] for p in pairs):
        raise ValueError(f"--variant {text!r}: give NAME=VALUE pairs, comma-separated")
    seed = tasks[task].seeds[0]
    try:
        source = with_values((seed / "kernel.hip").read_text(), values)
    except (KeyError, ValueError) as e:
        raise ValueError(f"--variant {text!r}: {e.args[0]}") from None
    return task, f"seed {seed.name} {','.join(pairs)}", source


def variant_folders(variants: Sequence[tuple[str, str, str]], tasks: dict[str, TaskSpec],
                    root: Path) -> dict[str, Path]:  # fmt: skip
    """`task:row` -> a folder under `root` holding a variant's kernel.hip and its seed's model.py."""
    folders = {}
    for i, (task, row, source) in enumerate(variants):
        folder = root / f"variant{i}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "kernel.hip").write_text(source)
        (folder / "model.py").write_text((tasks[task].seeds[0] / "model.py").read_text())
        folders[f"{task}:{row}"] = folder
    return folders


def select_cases(requested: Sequence[str], tasks: dict[str, TaskSpec]) -> dict[str, list[str]]:
    """task -> its timed case names to run: all when nothing is requested, else those named
    (names may be given comma-separated); an unknown name raises ValueError."""
    timed = {t: [c.name for c in spec.timed_cases] for t, spec in tasks.items()}
    names = [n.strip() for item in requested for n in item.split(",") if n.strip()]
    if not names:
        return timed
    known = {n for ns in timed.values() for n in ns}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(
            f"unknown case {', '.join(unknown)}; timed cases: {', '.join(sorted(known))}"
        )
    return {t: [n for n in ns if n in names] for t, ns in timed.items()}


def trials_for(call_s: float, trials: int, budget_s: float) -> int:
    """Trials that fit `budget_s` at `call_s` per call, between MIN_TRIALS and `trials`."""
    if call_s <= 0:
        return trials
    return max(min(trials, MIN_TRIALS), min(trials, int(budget_s / call_s)))


def input_sets(state_bytes: int, target: int = ROTATE_BYTES) -> int:
    """Decode input sets to rotate so their states span `target` bytes, within MIN/MAX_SETS."""
    return max(MIN_SETS, min(MAX_SETS, math.ceil(target / max(state_bytes, 1))))


def rel_rms(x: torch.Tensor, ref: torch.Tensor) -> float:
    """||x - ref|| / ||ref|| in float64 (||x|| when ref is all zeros); nan/inf propagate."""
    diff = (x.double() - ref.double()).norm()
    scale = ref.double().norm()
    return (diff / scale).item() if scale > 0 else diff.item()


def worst(errors: Sequence[float]) -> float:
    """The largest error; nan if any is nan (max() would drop a nan that is not first)."""
    return math.nan if any(math.isnan(e) for e in errors) else max(errors)


# ----------------------------------------------------------------------------- timing (GPU)
# graph_timer.py: Timer, hold_cycles, capture (imported above).


def settle() -> None:
    """Waits for the device after a failure; a sticky CUDA error surfaces in the next row."""
    try:
        torch.cuda.synchronize()
    except Exception as e:  # the failure is already recorded on the row
        print(f"device error after a failed row: {first_line(e)}", file=sys.stderr)


def first_line(e: BaseException, limit: int = 160) -> str:
    return (str(e).strip().splitlines() or [""])[0][:limit]


def _wall(call: Call, args: list[Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = call(args)
    torch.cuda.synchronize()
    return out, time.perf_counter() - t0


# ----------------------------------------------------------------------------- running


def check(outputs: Any, ref: list[torch.Tensor]) -> tuple[float, float]:
    got = as_outputs(outputs)
    if len(got) != 2 or any(g.shape != r.shape for g, r in zip(got, ref, strict=False)):
        shapes = [tuple(g.shape) for g in got]
        raise ValueError(f"outputs {shapes}, expected {[tuple(r.shape) for r in ref]}")
    return rel_rms(got[0], ref[0]), rel_rms(got[1], ref[1])


def run_row(
    row: Row, res: Result, sets: list, ref: list, timer: Timer, opts: argparse.Namespace
) -> None:
    """Times and checks one row on one case, filling `res`."""
    out, first_s = _wall(row.call, sets[0])
    errs = [check(out, ref)]
    del out
    call_s = first_s
    # The first call may include JIT compiling and autotuning: time the calls after it.
    for i in range(max(opts.warmup, 1) if first_s < 1.0 else 1):
        _, call_s = _wall(row.call, sets[(i + 1) % len(sets)])
    n = trials_for(call_s, opts.trials, opts.row_budget_s)
    if not opts.graph_only:
        res.eager_us, res.eager_trials = timer.eager(row.call, sets, n), n
    if n < opts.trials:
        res.note = f"{n} trials (a call takes {call_s:.2f} s)"
    if row.graph_skip or opts.no_graph:
        res.graph_note = row.graph_skip or "skipped: --no-graph"
    else:
        try:
            graph, outputs = capture(row.call, sets)
            res.graph_us, res.graph_trials = timer.graph(graph, len(sets), n), n
            graph.replay()  # its static outputs now hold every set's result again
            torch.cuda.synchronize()
            errs.append(check(outputs[0], ref))
            del graph, outputs
        except Exception as e:  # a capture failure is reported, not fatal
            res.graph_note = f"{type(e).__name__}: {first_line(e)}"
            settle()
    res.err_o, res.err_state = worst([e[0] for e in errs]), worst([e[1] for e in errs])
    res.ok = res.err_o <= opts.tolerance[res.task] and res.err_state <= opts.tolerance[res.task]


def case_inputs(task: TaskSpec, case_name: str) -> tuple[list, list[torch.Tensor]]:
    """(input sets, fp32 reference outputs of set 0) for one case."""
    module = load_module(task.reference)
    inputs = task.case(case_name).inputs
    first = build_inputs(module, inputs, "cuda", seed=0, draw_on_device=True)
    count = input_sets(first[5].numel() * first[5].element_size()) if task.name == DECODE else 1
    sets = [first] + [
        build_inputs(module, inputs, "cuda", seed=s, draw_on_device=True) for s in range(1, count)
    ]
    q, k, v, *rest = first  # g, beta, the state, and cu_seqlens for packed sequences
    with torch.no_grad():  # upcast q, k, v (exact) so the reference's o stays fp32
        ref = as_outputs(module.Model().cuda()(q.float(), k.float(), v.float(), *rest))
    torch.cuda.synchronize()
    return sets, [r.float() for r in ref]


def run_task(task: TaskSpec, cases: list[str], rows: list[Row], timer: Timer, opts, log) -> list:
    results = []
    for case_name in cases:
        case = task.case(case_name)
        sets, ref = case_inputs(task, case_name)
        log(f"{task.name} {case_name}: {len(sets)} input set(s), reference ready")
        for row in rows:
            res = Result(
                task.name, row.name, case_name, case.roofline.bytes if case.roofline else 0
            )
            if row.call is None:
                res.note = row.not_run
            else:
                try:
                    with torch.no_grad():
                        run_row(row, res, sets, ref, timer, opts)
                except Exception as e:  # one failing row must not end the bench
                    res.note = f"error: {type(e).__name__}: {first_line(e)}"
                    settle()
            log(f"  {row.name}: eager {num(res.eager_us, '.1f')} us, graph "
                f"{num(res.graph_us, '.1f')} us {res.graph_note or res.note}")  # fmt: skip
            results.append(res)
            torch.cuda.empty_cache()
        del sets, ref
        torch.cuda.empty_cache()
    return results


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--cases",
        action="append",
        default=[],
        metavar="NAMES",
        help="timed cases to run, comma-separated or repeated (default: all of both tasks)",
    )
    p.add_argument("--trials", type=int, default=30, help="timed trials per row and mode (30)")
    p.add_argument(
        "--warmup",
        type=int,
        default=3,
        help="untimed calls after the first, before the trials (3; at least 1)",
    )
    p.add_argument(
        "--row-budget-s",
        type=float,
        default=8.0,
        help="seconds of trials per row and mode before trials are cut, to >= 3 (8)",
    )
    p.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="[TASK=]PATH",
        help="a native candidate folder (kernel.hip, model.py); TASK prefill (default) "
        "or decode; repeatable",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="[decode:]NAME=VALUE[,NAME=VALUE]",
        help="the task's seed with these `// @tunable` values (prefill unless decode:), a row "
        "named by them; repeatable",
    )
    p.add_argument("--no-graph", action="store_true", help="skip CUDA-graph mode")
    p.add_argument(
        "--graph-only",
        action="store_true",
        help="skip eager mode: only CUDA-graph times (each row still runs eagerly, untimed, for "
        "its checks and warm-up)",
    )
    p.add_argument(
        "--anchors",
        action="append",
        default=[],
        metavar="NAMES",
        help=f"anchor rows to run, comma-separated or repeated: all (default), none, or of "
        f"{', '.join(ANCHOR_ROWS)}; the seed and candidate rows always run",
    )
    p.add_argument(
        "--build-cache",
        type=Path,
        default=Path(tempfile.gettempdir()) / "hipevolve-gdn-bench",
        help="compiled-library cache (default: $TMPDIR/hipevolve-gdn-bench)",
    )
    p.add_argument("--out", type=Path, help="also write every row as JSON here")
    opts = p.parse_args(argv)
    if opts.trials < 1 or opts.warmup < 0:
        p.error("--trials must be >= 1 and --warmup >= 0")
    if opts.graph_only and opts.no_graph:
        p.error("--graph-only and --no-graph leave nothing to time")
    tasks = {PREFILL: get_task(PREFILL), DECODE: get_task(DECODE)}
    try:
        opts.selected = select_cases(opts.cases, tasks)
        opts.anchor_rows = parse_anchors(opts.anchors)
        opts.candidates = dict(parse_candidate(c) for c in opts.candidate)
        opts.variants = [parse_variant(v, tasks) for v in opts.variant]
    except (ValueError, KeyError) as e:
        p.error(str(e))
    for task, folder in opts.candidates.items():
        missing = candidate_missing(folder)
        if missing:
            p.error(f"--candidate {folder} ({task}) has no {' or '.join(missing)}")
    opts.tasks = tasks
    opts.tolerance = {t: spec.tolerance.max_rel_rms for t, spec in tasks.items()}
    return opts


def candidate_missing(folder: Path) -> list[str]:
    """The files a native candidate folder lacks, of kernel.hip and model.py."""
    return [f for f in ("kernel.hip", "model.py") if not (folder / f).is_file()]


def no_gpu() -> bool:
    """True, after saying so on stderr, when torch sees no GPU to run on."""
    if torch.cuda.is_available():
        return False
    print("needs a GPU: torch.cuda.is_available() is False", file=sys.stderr)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    if no_gpu():
        return 2
    t0 = time.monotonic()

    def log(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)

    folders = {f"{t}:seed {spec.seeds[0].name}": spec.seeds[0] for t, spec in opts.tasks.items()}
    folders.update({f"{t}:candidate": path for t, path in opts.candidates.items()})
    variant_root = Path(tempfile.mkdtemp(prefix="gdn-variants-"))
    folders.update(variant_folders(opts.variants, opts.tasks, variant_root))
    natives = native_models(folders, opts.build_cache)
    built = [f"{n}: {m if isinstance(m, str) else 'ok'}" for n, m in natives.items()]
    log(f"native builds: {'; '.join(built)}")
    wants_fla = opts.anchor_rows & {ANCHOR_ROWS["fla_chunk"], ANCHOR_ROWS["fla_recurrent"]}
    fla = fla_calls() if wants_fla else "not run: --anchors"
    fla_version = (
        "-" if isinstance(fla, str) else getattr(sys.modules.get("fla"), "__version__", "?")
    )
    device = torch.cuda.get_device_name()
    card = by_device_name(device) or H200
    if card.name not in device:
        log(f"{device}: a card hipevolve does not know; roofline shares at {card.name}'s HBM")
    print(f"device {device}, torch {torch.__version__}, FLA {fla_version}, "
          f"FLA_DISABLE_BACKEND_DISPATCH={os.environ.get('FLA_DISABLE_BACKEND_DISPATCH')}")  # fmt: skip
    wants_anchors = opts.anchor_rows & {ANCHOR_ROWS["flashqla"], ANCHOR_ROWS["flashinfer"]}
    anchors = {n: c for n, c in (anchor_calls() if wants_anchors else {}).items()
               if n in opts.anchor_rows}  # fmt: skip
    log("anchors: " + "; ".join(f"{n}: {c if isinstance(c, str) else 'ok'}"
                                for n, c in anchors.items()))  # fmt: skip
    timer, results = Timer(), []
    copy = copy_bytes_per_s(timer)
    share = 100 * copy / card.hbm_bytes_per_s
    print(f"device copy: {copy / 1e12:.2f} TB/s read and written, {share:.1f}% of the "
          f"{card.name}'s {card.hbm_bytes_per_s / 1e12:g} TB/s: the ceiling of %roof")  # fmt: skip
    for name, spec in opts.tasks.items():
        cases = opts.selected[name]
        if not cases:
            continue
        variants = [row for task, row, _ in opts.variants if task == name]
        rows = keep_rows(
            rows_for(spec, fla, natives, "candidate", anchors, variants), opts.anchor_rows
        )
        task_results = run_task(spec, cases, rows, timer, opts, log)
        add_ratios(task_results)
        print("\n" + format_table(name, task_results, opts.tolerance[name], card), flush=True)
        ours = [f"seed {spec.seeds[0].name}", "candidate", *variants]
        for line in anchor_summary(task_results, ours):
            print(line, flush=True)
        results += task_results
    if timer.late_holds:
        print(f"\nnote: {timer.late_holds} graph trial(s) were enqueued after their "
              f"{HOLD_US:.0f} us hold ended: their times include some host launch cost")
    log("done")
    if opts.out:
        report = {"device": device, "roofline_card": card.name, "copy_bytes_per_s": copy,
                  "torch": torch.__version__, "fla": fla_version,
                  "graph_late_holds": timer.late_holds,
                  "results": [as_json(r, card) for r in results]}  # fmt: skip
        opts.out.write_text(json.dumps(report, indent=1))
    return 0 if all(r.ok is not False for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
