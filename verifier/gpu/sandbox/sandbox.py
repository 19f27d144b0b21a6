"""What the candidate process does with a candidate (the process itself, forked by the zygote or
spawned by the judge, is sandbox_process.py).

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
hipevolve.verifier.gpu.{confine,ipc,job,sandbox.prebuilt,timing,wire} only (and, for a recorder or a
planned candidate, record / record_kb / executor / replay_kb).
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING

from hipevolve.verifier.gpu.job import SandboxJob

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import SandboxCase

_LINE = 300
CHECKED_TRIALS = 3  # timed calls (or graph replays) of a case whose outputs are checked
GUARD = 4096  # canary bytes on each side of every input copy (keeps any dtype aligned)
CANARY = 0xA5


def first_line(e: BaseException) -> str:
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
            from hipevolve.verifier.gpu.sandbox.prebuilt import use_prebuilt

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
            self.send(
                "case_checked", case=case.name, reuse=reuse[:5] if window else _shared_storage(kept)
            )
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
            self.clock,
            lambda a, m=model: m(*a),
            sets,
            job.trials,
            job.warmup,
            fresh=lambda i: self.inputs(case, job.timing_seed + i),
            keep=CHECKED_TRIALS,
            kept=self.to_host,
        )
        sets.clear()
        self.give_back()
        self.send(
            "timing_done",
            case=case.name,
            trials=got.times,
            windows=got.windows,
            threads=self.active_count(),
        )
        for index, outs in got.kept:
            self.send_timed(case, job.timing_seed + index, index, outs)

    def time_graph(self, case: SandboxCase, model, sets: list) -> None:  # noqa: ANN001
        """The forward captured as a CUDA graph and replayed (timing.time_graph_trials), or
        timed eagerly, flagged, when it cannot be captured. The outputs of replays drawn at
        random go to the judge to be checked, as the executor sends its timed calls': a
        forward that does less while it is captured shows there."""
        job = self.job
        got = self.timing.time_graph_trials(
            self.clock,
            lambda a, m=model: m(*a),
            sets,
            job.trials,
            job.warmup,
            keep=CHECKED_TRIALS,
            poison=True,
        )
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
