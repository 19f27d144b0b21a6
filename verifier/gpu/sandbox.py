"""The candidate process: forked for the judge by its zygote (zygote.py), or spawned by the judge
as `python -m hipevolve.verifier.gpu.sandbox MSG_FD WORKDIR DEVICE`.

It reads its job (job.SandboxJob: no reference outputs, those never enter this process, and
nothing it is judged by) as JSON on stdin,
confines itself, imports torch and captures the timer before the candidate exists, then loads
the candidate, runs every case and seed twice on fresh input copies with the caching allocator
poisoned, and sends outputs, the inputs as they were after the call, and metadata (exact type,
strides, aliasing, Python thread counts) to the judge over MSG_FD in the wire format. It judges
nothing: the judge decides. After the checks it waits for the judge's word on stdin ("time" or
"stop"), times the timed cases (each call on inputs no other call saw; the outputs of a few
calls drawn at random go to the judge), runs one more check call after timing, and leaves with
os._exit, so atexit handlers and lingering threads never run past the end.

For a native candidate this process is the trusted executor (executor.py) and never imports
candidate Python: model.py ran earlier, in a recorder process of its own (record.py, forked by
the same zygote, with `{"record": true}` as its job), and what it did arrives here as a launch
plan (plan.py) that this process validates and replays with its own inputs, buffers and timer.
A KernelBench-format candidate gets a plan too (plan_kb.py): its .py ran in a recorder of its
own (record_kb.py, forked by the zygote on the job's device), and this process replays what its
forward did (replay_kb.py: aten ops, and the calls of its prebuilt load_inline extensions, whose
C++ does run here: flag `plan:kb-executor (...)`). Only a load_inline file the build stage did
not build (worker-level jobs with no extension folder) still has no plan: its .py is imported
here, beside the checks and the timer, and runs less isolated (flag `plan:none`).

Imports torch, the standard library and hipevolve.core.reference / hipevolve.runtime /
hipevolve.verifier.gpu.{confine,ipc,job,prebuilt,timing,wire} only (and, for a recorder or a
planned candidate, record / record_kb / executor / replay_kb).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from typing import TYPE_CHECKING

from hipevolve.verifier.gpu import confine
from hipevolve.verifier.gpu.job import SandboxJob

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import SandboxCase

_LINE = 300
CHECKED_TRIALS = 3  # timed calls (or graph replays) of a case whose outputs are checked
GUARD = 4096  # canary bytes on each side of every input copy (keeps any dtype aligned)
CANARY = 0xA5


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    line = f"{type(e).__name__}: {text[0] if text else ''}".strip()
    return line[:_LINE]


class Sandbox:
    def __init__(self, job: SandboxJob, out) -> None:  # noqa: ANN001 (a binary file)
        import torch

        from hipevolve.core import reference
        from hipevolve.verifier.gpu import ipc, timing, wire

        self.torch, self.reference, self.timing, self.wire = torch, reference, timing, wire
        self.job = job
        self.out = out
        self.device = job.device
        # Captured before the candidate exists: it may patch any of these later.
        self.clock = timing.Clock(self.device, job.flush_bytes)
        self.write_message = wire.write_message
        self.readline = sys.stdin.readline
        self.release = ipc.release
        # Outputs go to the judge by IPC on the GPU (ipc.py); on the CPU as bytes.
        self.share = self.device.startswith("cuda")
        self.active_count = threading.active_count
        self.clone, self.to = torch.Tensor.clone, torch.Tensor.to
        self.ref_module = reference.load_module(job.reference)
        self.model_class = None
        self.hosted: set[int] = set()  # ids of kept outputs moved to the host (to_host)

    def send(self, kind: str, tensors=(), **fields) -> None:  # noqa: ANN001
        self.write_message(self.out, kind, list(tensors), **fields)

    # --- loading ------------------------------------------------------------------------------
    def load(self) -> None:
        cand = self.job.candidate
        if cand.format == "native":
            from hipevolve.runtime import kernels

            with open(cand.source) as f:
                kernels.bind(str(cand.library), f.read())
        elif cand.library is not None:  # KernelBench: load_inline returns the prebuilt modules
            from hipevolve.verifier.gpu.prebuilt import use_prebuilt

            use_prebuilt(cand.library)
        module = _import_path(str(cand.model))
        if not hasattr(module, "ModelNew"):
            raise AttributeError(f"{os.path.basename(cand.model)} defines no ModelNew")
        self.model_class = module.ModelNew

    def build_model(self, case: SandboxCase, seed: int):  # noqa: ANN201
        self.torch.manual_seed(seed)
        init = list(self.ref_module.get_init_inputs(**case.init))
        model = self.model_class(*init)
        if isinstance(model, self.torch.nn.Module):
            model = model.to(self.device).eval()
        return model

    def inputs(self, case: SandboxCase, seed: int) -> list:
        """Drawn on the device, as the judge draws them: the same values for the same seed."""
        return self.reference.build_inputs(
            self.ref_module, case.inputs, self.device, seed, draw_on_device=True
        )

    # --- checking -----------------------------------------------------------------------------
    def poison(self, sizes: tuple[int, ...]) -> None:
        """Fills free allocator memory with 0xFF (NaN in every float type) and frees it, so an
        output the candidate allocates but never writes reads NaN, not a stale answer: one
        block twice the outputs' total (split by the CUDA caching allocator), and two blocks of
        each output's size (reused as they are by the CUDA allocator and by malloc)."""
        torch = self.torch
        # Under a lean plan (memplan.py): one block of each output's size, which the caching
        # allocator hands back as it is to an allocation of that size.
        wanted = list(sizes) if self.lean else [2 * sum(sizes)] + [n for n in sizes for _ in "ab"]
        blocks = [torch.empty(n, dtype=torch.uint8, device=self.device) for n in wanted if n > 0]
        for block in blocks:
            block.fill_(0xFF)
        self.clock.sync()
        del blocks

    def guarded_clone(self, t):  # noqa: ANN001, ANN201
        """A copy of input `t` between two canary regions: (view, (buffer, size)), or a plain
        clone when `t` is not contiguous. A write just past either end breaks a canary."""
        torch = self.torch
        if not t.is_contiguous():
            return self.clone(t), None
        size = t.numel() * t.element_size()
        buf = torch.empty(GUARD + size + GUARD, dtype=torch.uint8, device=t.device)
        buf[:GUARD].fill_(CANARY)
        buf[GUARD + size :].fill_(CANARY)
        view = buf[GUARD : GUARD + size].view(t.dtype).view(t.shape)
        view.copy_(t)
        return view, (buf, size)

    def intact(self, guard: tuple) -> bool:
        buf, size = guard
        return bool((buf[:GUARD] == CANARY).all()) and bool((buf[GUARD + size :] == CANARY).all())

    def outputs_broken(self, model) -> list:  # noqa: ANN001
        """Canaries around the candidate's own allocations (the executor's plans have them)."""
        return []

    def call(self, model, args: list):  # noqa: ANN001, ANN201
        with self.clock.no_grad():
            result = model(*args)
        self.clock.sync()
        return result

    def describe(self, outs: list, args: list) -> list[dict]:
        torch = self.torch
        spans = [_span(a) for a in args if type(a) is torch.Tensor]
        metas = []
        for t in outs:
            exact = type(t) is torch.Tensor
            meta = {"type": f"{type(t).__module__}.{type(t).__qualname__}", "exact": exact}
            if exact:
                s = _span(t)
                meta |= {
                    "dtype": str(t.dtype).removeprefix("torch."),
                    "shape": list(t.shape),
                    "stride": list(t.stride()),
                    "device": str(t.device),
                    "contiguous": t.is_contiguous(),
                    "span": list(s),
                    "aliases_input": [i for i, a in enumerate(spans) if _overlap(s, a)],
                }
            metas.append(meta)
        return metas

    def check_call(
        self,
        case: SandboxCase,
        seed: int,
        model,
        base: list,
        run: str,  # noqa: ANN001
        send_inputs: bool,
    ) -> list:
        torch = self.torch
        guarded = [self.guarded_clone(a) if type(a) is torch.Tensor else (a, None) for a in base]
        if self.lean:
            base.clear()  # drawn for this call alone (check): only its guarded copy stays
        args = [a for a, _ in guarded]
        self.poison(case.poison_sizes)
        before = self.active_count()
        result = self.call(model, args)
        after = self.active_count()
        outs = [result] if isinstance(result, torch.Tensor) else result
        if not isinstance(outs, (list, tuple)) or not all(
            isinstance(o, torch.Tensor) for o in outs
        ):
            raise TypeError(f"forward returned {type(result).__name__}, expected tensors")
        outs = list(outs)
        metas = self.describe(outs, args)
        tensor_guards = [g for a, g in guarded if type(a) is torch.Tensor]
        broken: list = [
            i for i, g in enumerate(tensor_guards) if g is not None and not self.intact(g)
        ]
        broken += [f"allocation {k}" for k in self.outputs_broken(model)]
        values = [o for o, m in zip(outs, metas, strict=True) if m["exact"]]
        tensor_args = [a for a in args if type(a) is torch.Tensor] if send_inputs else []
        shared = self.write_message(
            self.out,
            "outputs",
            values + tensor_args,
            share=self.share,
            case=case.name,
            seed=seed,
            run=run,
            meta=metas,
            n_inputs=len(tensor_args),
            guards_broken=broken,
            threads_before=before,
            threads_after=after,
        )
        if shared:
            # The judge reads shared memory in place: nothing here may be freed before its ack.
            if self.readline().strip() != "ack":
                raise RuntimeError("the judge did not acknowledge shared outputs")
            self.release(shared)
        del guarded, args, values, tensor_args
        self.give_back()
        return outs

    @property
    def lean(self) -> bool:
        """A lean memory plan (memplan.py): the judge counted on this process holding only
        the outputs of `job.kept_calls` earlier check calls, and no unused cached blocks."""
        return self.job.kept_calls > 0

    def give_back(self) -> None:
        """Under a lean plan, the allocator's unused blocks (the poison's, a call's input
        copies) go back to the device, for the judge's comparison and the next call."""
        if self.lean and self.device.startswith("cuda"):
            self.torch.cuda.empty_cache()

    def to_host(self, outs: list) -> list:
        """A checked timed call's outputs kept until they are sent: clones on the device, or
        on the host under a lean plan (send_timed brings them back one call at a time)."""
        # The class's own clone and to, captured before the candidate loaded: an output whose
        # instance overrides them (to compute the answer only when looked at) is copied as the
        # storage it really holds.
        if self.lean:
            moved = [self.to(o, "cpu", copy=True) for o in outs]
            self.hosted.update(id(m) for m, o in zip(moved, outs, strict=True) if o.is_cuda)
            return moved
        return [self.clone(o) for o in outs]

    def check(self) -> None:
        window = self.job.kept_calls  # 0: every call's outputs alive until the case ends
        for case in self.job.cases:
            kept: list[tuple[str, list]] = []
            reuse: list[str] = []  # under a window: pairs of calls at most `window` apart
            for seed in self.job.seeds:
                model = self.build_model(case, seed)
                # Under a lean plan each call's inputs are drawn anew (the same values).
                base = None if self.lean else self.inputs(case, seed)
                for run in ("1", "2"):
                    args = base if base is not None else self.inputs(case, seed)
                    outs = self.check_call(case, seed, model, args, run, run == "1")
                    del args
                    kept.append((f"seed {seed} run {run}", outs))
                    del outs
                    if window:
                        reuse += [f for f in _shared_storage(kept) if f not in reuse]
                        del kept[:-window]
                        self.give_back()
                del base
            self.send("case_checked", case=case.name,
                      reuse=reuse[:5] if window else _shared_storage(kept))  # fmt: skip
            del kept
        self.send("checked", threads=self.active_count())

    # --- timing -----------------------------------------------------------------------------
    def time_cases(self) -> None:
        for case in self.job.cases:
            if not case.timed:
                continue
            # Built from the seed the post-timing check compares with: a task's random
            # parameters (a norm's weight) are drawn from it, on both sides.
            seed = self.job.seeds[-1]
            model = self.build_model(case, seed)
            sets = [self.inputs(case, self.job.timing_seed + i) for i in range(case.timing_sets)]
            self.clock.sync()
            self.send("timing_start", case=case.name)
            if self.job.timing == "graph":
                self.time_graph(case, model, sets)
            else:
                self.time_eager(case, model, sets)
            del sets
            # Detecting the warm-up to cut work afterwards shows here: one more checked call.
            self.check_call(case, seed, model, self.inputs(case, seed), "post", False)
        self.send("done", threads=self.active_count())

    def time_eager(self, case: SandboxCase, model, sets: list) -> None:  # noqa: ANN001
        """Each call on inputs no other call saw (timing.time_fresh_trials: a set drawn afresh
        once the budget's sets are used); the outputs of calls drawn at random go to the judge
        to be checked, as a graph's replays' do."""
        job = self.job
        got = self.timing.time_fresh_trials(
            self.clock, lambda a, m=model: m(*a), sets, job.trials, job.warmup,
            fresh=lambda i: self.inputs(case, job.timing_seed + i), keep=CHECKED_TRIALS,
            kept=self.to_host,
        )  # fmt: skip
        sets.clear()
        self.give_back()
        self.send("timing_done", case=case.name, trials=got.times, windows=got.windows,
                  threads=self.active_count())  # fmt: skip
        for index, outs in got.kept:
            self.send_timed(case, job.timing_seed + index, index, outs)

    def time_graph(self, case: SandboxCase, model, sets: list) -> None:  # noqa: ANN001
        """The forward captured as a CUDA graph and replayed (timing.time_graph_trials), or
        timed eagerly, flagged, when it cannot be captured. The outputs of replays drawn at
        random go to the judge to be checked, as the executor sends its timed calls': a
        forward that does less while it is captured shows there."""
        job = self.job
        got = self.timing.time_graph_trials(
            self.clock, lambda a, m=model: m(*a), sets, job.trials, job.warmup,
            keep=CHECKED_TRIALS, poison=True,
        )  # fmt: skip
        self.send(
            "timing_done",
            case=case.name,
            trials=got.times,
            windows=got.windows,
            threads=self.active_count(),
            flags=[graph_flag(case.name, got.eager)],
        )
        for index, outs in got.kept:
            self.send_timed(case, job.timing_seed + index, index, outs)

    def send_timed(
        self, case: SandboxCase, seed: int, index: int, outs: list, broken: list | None = None
    ) -> None:
        """Outputs of a timed call (index: its input set) or of a check call slipped in among
        them (index -1), for the judge to check; broken: canaries found overwritten."""
        if self.hosted:  # kept on the host (to_host): on the device only while it is sent
            back = [o.to(self.device) if id(o) in self.hosted else o for o in outs]
            self.hosted.difference_update(id(o) for o in outs)
            outs = back
        metas = self.describe(outs, [])
        shared = self.write_message(
            self.out,
            "outputs",
            outs,
            share=self.share,
            case=case.name,
            seed=seed,
            run="timed" if index >= 0 else "interleaved",
            meta=metas,
            n_inputs=0,
            guards_broken=broken or [],
            threads_before=1,
            threads_after=self.active_count(),
        )
        if shared:
            if self.readline().strip() != "ack":
                raise RuntimeError("the judge did not acknowledge shared outputs")
            self.release(shared)
        del outs
        self.give_back()


def graph_flag(case: str, eager: str) -> str:
    """The result's flag for a case timed under timing = "graph"."""
    return f"timing:eager (not capturable: {case}: {eager})"[:300] if eager else "timing:graph"


def reserve(torch, device: str, nbytes: int) -> None:  # noqa: ANN001
    """Takes `nbytes` of device memory in one allocation and frees it into the caching
    allocator, which then serves the check and timing stages from it (worker.sandbox_reserve)."""
    if nbytes > 0:
        with contextlib.suppress(RuntimeError):  # short of memory: allocate as the run goes
            block = torch.empty(nbytes, dtype=torch.uint8, device=device)
            del block


def load_kernels(torch, device: str) -> None:  # noqa: ANN001
    """Runs, once and small, the kernels every check runs (drawing inputs in the usual float
    types, poison and canary fills, the canary test and its read back), before the job arrives.
    CUDA loads a kernel when it is first launched (lazy loading), and each sandbox is a fresh
    process: launched first during the check, the canary test took 38-43 ms of each softmax
    evaluation on an H200; loaded here, all of a check's canary tests take 3-4 ms
    (bench/scaling.py, docs/SCALING.md). The global random state is left as it was."""
    draws = torch.Generator(device=device)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        torch.randn(64, dtype=dtype, device=device, generator=draws)
    buf = torch.empty(2 * GUARD, dtype=torch.uint8, device=device)
    buf.fill_(CANARY)
    bool((buf[:GUARD] == CANARY).all())
    buf.zero_()


def record(data: dict, out, flags: list[str]) -> None:  # noqa: ANN001
    """A candidate's recorder (record.py for a native one, record_kb.py for a KernelBench one):
    its Python runs here, and nothing else of the evaluation does."""
    from hipevolve.verifier.gpu import record as recorder
    from hipevolve.verifier.gpu import wire
    from hipevolve.verifier.gpu.job import RecordJob

    flags.append(confine.confine_syscalls(False))
    wire.write_message(out, "ready", [], flags=flags, pid=os.getpid())
    send = lambda kind, **f: wire.write_message(out, kind, [], **f)  # noqa: E731
    if data.get("candidate", {}).get("format") == "kernelbench":
        from hipevolve.verifier.gpu import record_kb

        record_kb.record_job(data, send)
    else:
        recorder.record_job(RecordJob.from_dict(data), out, send)
    out.flush()


def _span(t) -> tuple[int, int]:  # noqa: ANN001
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[0] != a[1] and b[0] != b[1]


def _shared_storage(kept: list[tuple[str, list]]) -> list[str]:
    """Pairs of calls whose outputs share memory: a buffer handed out again across calls."""
    found = []
    spans = [
        (label, [_span(o) for o in outs if type(o).__name__ == "Tensor"]) for label, outs in kept
    ]
    for i, (la, sa) in enumerate(spans):
        for lb, sb in spans[i + 1 :]:
            if any(_overlap(x, y) for x in sa for y in sb):
                found.append(f"{la} and {lb}")
    return found[:5]


def _import_path(path: str):  # noqa: ANN202
    import importlib.util

    spec = importlib.util.spec_from_file_location("hipevolve_candidate", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["hipevolve_candidate"] = module
    spec.loader.exec_module(module)
    return module


def _error_fields(e: BaseException, torch) -> dict:  # noqa: ANN001
    # torch's CPU allocator raises a plain RuntimeError when the address space limit is hit.
    oom = (
        isinstance(e, MemoryError)
        or (torch is not None and isinstance(e, torch.cuda.OutOfMemoryError))
        or (isinstance(e, RuntimeError) and "can't allocate memory" in str(e))
    )
    line = _first_line(e)
    found = {"message": f"resource exhaustion: {line}" if oom else line, "oom": oom}
    if getattr(type(e), "verdict", None) == "hacked":  # the executor's own finding (plan_kb.Hacked)
        found["verdict"] = "hacked"
    return found


def main() -> None:
    """argv: MSG_FD WORKDIR DEVICE: a sandbox spawned as a new Python (the judge's fallback
    when its zygote cannot fork one, zygote.py)."""
    serve(int(sys.argv[1]), sys.argv[2], sys.argv[3], forked=False)


def serve(msg_fd: int, workdir: str, device: str, forked: bool) -> None:
    """Confines this process, creates its device context and loads the check's kernels
    (load_kernels), waits for its job, runs it and exits. Starts before its job exists, so the
    judge's next evaluation finds it ready. In a process forked from the zygote torch is
    imported already; in a spawned one it is imported here, after confine_process."""
    # CUDA's driver writes under the process's own /proc entry while it initialises (measured on
    # an H200: without it cudaGetDeviceCount fails with error 304); "/proc/self" resolves to
    # this process's folder when the rule is made, so no other process's entry becomes writable.
    flags = confine.confine_process([workdir, "/dev", "/proc/self"])
    flags.append("sandbox:forked" if forked else "sandbox:spawned")
    out = os.fdopen(msg_fd, "wb")
    torch = None
    stage = "start"
    try:
        import torch

        if device.startswith("cuda"):
            torch.cuda.init()
            torch.zeros(1, device=device)
            load_kernels(torch, device)
        else:
            torch.set_num_threads(1)  # judge and sandbox share the cores: no spinning pools
        data = json.loads(sys.stdin.readline())
        if not data:
            os._exit(0)  # the judge needs no candidate run (a bad reference)
        if data.get("record"):
            stage = "record"
            record(data, out, flags)
            os._exit(0)
        job = SandboxJob.from_dict(data)
        if device.startswith("cuda"):
            reserve(torch, device, job.reserve_bytes)
        if job.candidate.format == "native":
            from hipevolve.verifier.gpu.executor import Executor

            box: Sandbox = Executor(job, out)
        elif job.plan is not None:  # KernelBench format, recorded (plan_kb.py)
            from hipevolve.verifier.gpu.replay_kb import KbExecutor

            box = KbExecutor(job, out)
        else:
            box = Sandbox(job, out)
        flags.append(confine.confine_syscalls(job.allow_processes))
        if not job.allow_processes:
            flags.append("processes:denied")
        box.send("ready", flags=flags, pid=os.getpid())
        stage = "load"
        box.load()
        box.send("loaded")
        stage = "check"
        box.check()
        if sys.stdin.readline().strip() == "time":
            stage = "timing"
            box.time_cases()
    except BaseException as e:  # noqa: BLE001 (everything the candidate raises is a result)
        from hipevolve.verifier.gpu import wire

        with contextlib.suppress(BaseException):  # else the judge sees the pipe close
            wire.write_message(out, "error", [], stage=stage, **_error_fields(e, torch))
    try:
        out.flush()
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
