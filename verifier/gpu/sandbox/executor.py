"""The trusted executor: runs a native candidate's launch plans (plan.py) with no candidate Python.

For a native candidate the sandbox process (sandbox.py) is the executor: it never imports
model.py. It loads the compiled library with ctypes and, for every checked and every timed call,
replays the case's plan through `PlanModel`: inputs built by trusted code (the task's
get_inputs under the job's seeds, then the global generators reseeded from os.urandom so no
random state left behind depends on a seed), copied between canaries at an address shifted by a
random multiple of 256 bytes; every allocation of the plan made fresh, between canaries, shifted
the same way and poisoned with 0xFF (NaN) unless the plan fills it; the launchers called with
the executor's own stream. The checks, the flush, the events and the trial loop are the
executor's (sandbox.Sandbox, timing.py), and the messages to the judge are the sandbox's.

Eager timing (time_case_eager): each trial's inputs are copied to a shifted place first, so no
address keeps its data from one trial to the next (the places are made once per case, each
trial's shift drawn afresh and its canaries made again: input_pool.py; nothing of an earlier
trial stays readable); its buffers are allocated, guarded, poisoned and given their weights
before the start event (PlanModel.prepare), so a trial times only what the forward asked for:
its fills (torch.zeros, zero_) and its launcher calls (PlanModel.run); after each timed call a
random draw (made after the call, from os.urandom) decides whether its outputs go to the judge to be checked
(`CHECKED_TRIALS` a case, uniformly among all its calls), and check calls on the checked seeds
are slipped in at random places among the timed ones. A library that counts calls, or keys a
cache on addresses, cannot tell which of its calls are judged. Every call's inputs are a set no
other call saw: the memory budget's sets first, then each call's set drawn anew (untimed) in
place of the oldest, so a cache kept in device memory and keyed by content never hits (also
where a large case fits two sets: tests/test_timed_inputs_fresh.py).

CUDA graph timing (a task's `timing = "graph"`, time_case_graph): the warm-up calls run as above;
then the plan's replay (its fills and launcher calls, the launchers given the capture stream) is
captured once per case (timing.Clock.capture), and each timed trial replays it. What a graph
changes, and what stands in for it:
- Addresses are fixed across replays: the graph's inputs sit between canaries at one shifted
  address, chosen at random once per case, and the plan's buffers are allocated by prepare before
  the capture, outside its memory pool. A library that keys a cache on addresses sees the same
  addresses every trial: what stands in for the per-trial shift is that each trial's inputs
  (another input set, drawn anew as eagerly once the budget's sets are used) are copied into
  those buffers before it, so a cached or skipped answer is a wrong answer, and the replays
  drawn at random to be checked catch it.
- Per-trial allocation is gone: before each replay (untimed) every buffer the plan does not fill
  is poisoned again and the parameter buffers are given the seed's weights again (PlanModel.
  refresh), so a replay that writes nothing leaves NaN, as a fresh allocation would.
- Canaries are read once, after all the replays of a case (not after each call); broken ones
  fail the case with the last checked replay's outputs.
- Device-side state (a counter in device memory) can tell replays apart where the host cannot
  (the launchers run once, at the capture): the checked replays, drawn after each replay, and the
  check replays on the check seeds slipped in among them are what catch a kernel that changes
  behaviour after its first replay; the check after timing runs the plan eagerly.
A plan that cannot be captured (a launcher that synchronises, allocates or launches on the legacy
default stream) is timed eagerly as above and flagged `timing:eager (not capturable: ...)`.

What it does not protect against: the library's host code runs in this process and could read
its memory (the seeds, the job); the build stage's library check (verifier/build/
library_check.py) refuses libraries with constructors of their own, imports outside an
allowlist or raw system calls, so nothing runs before a launcher is called, and a launcher
finds no Python symbols to call by name.

Imports torch, ctypes, the standard library and hipevolve.runtime /
hipevolve.verifier.gpu.{sandbox.input_pool,plan,sandbox.sandbox,timing} only.
"""

from __future__ import annotations

import ctypes
import secrets
from typing import TYPE_CHECKING, Any

import torch

from hipevolve.runtime import Launcher, launcher_signatures
from hipevolve.verifier.gpu.plan import ALIGN, CasePlan, Plan, PlanError, Ref, validate
from hipevolve.verifier.gpu.sandbox.input_pool import ShiftedInputs
from hipevolve.verifier.gpu.sandbox.sandbox import (
    CANARY,
    CHECKED_TRIALS,
    GUARD,
    Sandbox,
    graph_flag,
)

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import SandboxCase

SHIFTS = 16  # a buffer starts GUARD + k * ALIGN bytes into its allocation, k in [0, SHIFTS)
INTERLEAVED_CHECKS = 2  # check calls slipped in among a case's timed calls


def _shift() -> int:
    return ALIGN * secrets.randbelow(SHIFTS)


def reseed() -> None:
    """Every global generator from os.urandom: nothing left depends on a job's seed."""
    torch.manual_seed(secrets.randbits(62))


class PlanModel:
    """One case's plan as a callable: `model(*inputs)` replays it and returns its outputs."""

    def __init__(
        self,
        plan: CasePlan,
        launchers: dict[str, Launcher],
        device: str,
        weights: dict[str, torch.Tensor] | None = None,
    ) -> None:
        self.plan = plan
        self.launchers = launchers
        self.device = device
        self.weights = weights or {}  # parameter buffers' contents, from the reference model
        self.stream = torch.cuda.current_stream().cuda_stream if device.startswith("cuda") else 0
        self.guards: list[tuple[torch.Tensor, int, int]] = []  # (raw, start, nbytes)

    def _allocate(self, nbytes: int, dtype: str, on_device: bool) -> tuple[torch.Tensor, int]:
        """(raw bytes, where the buffer starts in them): a device buffer between canaries."""
        if not on_device:
            return torch.empty(max(nbytes, 1), dtype=torch.uint8), 0
        start = GUARD + _shift()
        raw = torch.empty(start + nbytes + GUARD, dtype=torch.uint8, device=self.device)
        raw[:start].fill_(CANARY)
        raw[start + nbytes :].fill_(CANARY)
        self.guards.append((raw, start, nbytes))
        return raw, start

    def broken(self) -> list[int]:
        """Allocations whose canaries were overwritten by the last call."""
        return [
            i
            for i, (raw, start, n) in enumerate(self.guards)
            if not bool((raw[:start] == CANARY).all())
            or not bool((raw[start + n :] == CANARY).all())
        ]

    @staticmethod
    def _view(base: tuple[torch.Tensor, int], ref: Ref) -> torch.Tensor:
        raw, start = base
        dtype = getattr(torch, ref.dtype)
        size = torch.empty(0, dtype=dtype).element_size()
        first = raw.storage_offset() * raw.element_size() + start + ref.offset
        return torch.empty(0, dtype=dtype, device=raw.device).set_(
            raw.untyped_storage(), first // size, ref.shape, ref.stride
        )

    def __call__(self, *args: Any) -> list[torch.Tensor]:
        return self.run(self.prepare(*args))

    def prepare(self, *args: Any) -> dict[str, tuple[torch.Tensor, int]]:
        """The harness's part of a call, never timed: the inputs checked against the plan, every
        buffer allocated between canaries, poisoned or filled with the reference's weights."""
        plan = self.plan
        bases: dict[str, tuple[torch.Tensor, int]] = {}
        for i, (arg, spec) in enumerate(zip(args, plan.inputs, strict=True)):
            if spec is None:
                continue
            if (
                str(arg.dtype).removeprefix("torch.") != spec["dtype"]
                or list(arg.shape) != list(spec["shape"])
                or list(arg.stride()) != list(spec["stride"])
            ):
                raise RuntimeError(f"input {i} does not match the recorded plan")
            bases[f"in{i}"] = (arg, 0)
        self.guards = []
        for j, b in enumerate(plan.buffers):
            raw, start = self._allocate(b.nbytes, b.dtype, b.device == "cuda")
            region = raw[start : start + b.nbytes]
            if b.param:
                region.view(getattr(torch, b.dtype)).copy_(self.weights[b.param].reshape(-1))
            elif b.fill is None:
                region.fill_(0xFF)  # poison: NaN in every float type
            bases[f"a{j}"] = (raw, start)
        return bases

    def refresh(
        self, bases: dict[str, tuple[torch.Tensor, int]], weights: dict[str, torch.Tensor]
    ) -> None:
        """What prepare did to the buffers of `bases`, done again in place before a graph
        replay (never timed): every buffer the plan does not fill poisoned, `weights` (a
        seed's parameters) copied into the parameter buffers."""
        for j, b in enumerate(self.plan.buffers):
            raw, start = bases[f"a{j}"]
            region = raw[start : start + b.nbytes]
            if b.param:
                region.view(getattr(torch, b.dtype)).copy_(weights[b.param].reshape(-1))
            elif b.fill is None:
                region.fill_(0xFF)

    def run(self, bases: dict[str, tuple[torch.Tensor, int]]) -> list[torch.Tensor]:
        """The candidate's part, timed: the fills its forward asked for (torch.zeros, zero_)
        and its launcher calls, as its forward made them; the plan's outputs."""
        plan = self.plan
        for j, b in enumerate(plan.buffers):
            if b.fill is not None and not b.param and b.nbytes:
                raw, start = bases[f"a{j}"]
                raw[start : start + b.nbytes].view(getattr(torch, b.dtype)).fill_(b.fill)
        for step in plan.steps:
            if step.op == "fill":
                self._view(bases[step.ref.buf], step.ref).fill_(step.value)
                continue
            values: list[Any] = []
            for a in step.args:
                if "ref" in a:
                    raw, start = bases[a["ref"].buf]
                    values.append(raw.data_ptr() + start + a["ref"].offset)
                elif "stream" in a:
                    values.append(self.stream)
                else:
                    values.append(a.get("int", a.get("float")))
            launcher = self.launchers[step.launcher]
            code = launcher.fn(*values)
            if launcher.checks and code != 0:
                raise RuntimeError(f"launcher {step.launcher} returned HIP error {code}")
        return [self._view(bases[r.buf], r) for r in plan.outputs]


class Executor(Sandbox):
    """The sandbox for a native candidate: runs its plans, never its Python."""

    def load(self) -> None:
        cand = self.job.candidate
        if self.job.plan is None:
            raise PlanError("a native candidate's job carries no launch plan")
        with open(cand.source) as f:
            signatures = launcher_signatures(f.read())
        plan = Plan.from_json(self.job.plan)
        for case in self.job.cases:
            if case.name not in plan.cases:
                raise PlanError(f"the plan has no case {case.name!r}")
            validate(plan.cases[case.name], signatures)
        library = ctypes.CDLL(str(cand.library), mode=ctypes.RTLD_LOCAL)
        used = {s.launcher for c in plan.cases.values() for s in c.steps if s.op == "call"}
        launchers = {
            name: Launcher(getattr(library, name), name, *signatures[name]) for name in used
        }
        self.models = {
            name: PlanModel(plan.cases[name], launchers, self.device) for name in plan.cases
        }

    def build_model(self, case: SandboxCase, seed: int) -> PlanModel:
        """The case's plan with the reference model's parameters drawn under `seed` (trusted
        code: the task's Model under the seed), where the plan asks for any."""
        model = self.models[case.name]
        wanted = {b.param: b for b in model.plan.buffers if b.param}
        if not wanted:
            return model
        ref = self.reference.build_model(self.ref_module, case.init, self.device, seed)
        reseed()
        state = {n: t.detach() for n, t in [*ref.named_parameters(), *ref.named_buffers()]}
        for name, b in wanted.items():
            t = state.get(name)
            if t is None:
                raise PlanError(
                    f"model.py has a parameter {name!r} the task's Model lacks "
                    f"(it has {', '.join(state) or 'none'}): name it as the Model does"
                )
            if str(t.dtype).removeprefix("torch.") != b.dtype or t.numel() * t.element_size() != (
                b.nbytes
            ):
                raise PlanError(
                    f"model.py's parameter {name!r} is {b.dtype}, {b.nbytes} bytes; "
                    f"the task's Model has {t.dtype}, {tuple(t.shape)}"
                )
        return PlanModel(model.plan, model.launchers, self.device, state)

    def inputs(self, case: SandboxCase, seed: int) -> list:
        values = super().inputs(case, seed)
        reseed()
        return values

    def guarded_clone(self, t):  # noqa: ANN001, ANN201
        """A copy of input `t` between canaries, at a randomly shifted address."""
        size = t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
        start = GUARD + _shift()
        buf = self.torch.empty(start + size + GUARD, dtype=self.torch.uint8, device=t.device)
        buf[:start].fill_(CANARY)
        buf[start + size :].fill_(CANARY)
        view = self.torch.empty(0, dtype=t.dtype, device=t.device).set_(
            buf.untyped_storage(), start // t.element_size(), t.shape, t.stride()
        )
        view.copy_(t)
        return view, (buf, start, size)

    def timed_inputs(self, pool: ShiftedInputs, values: list) -> list:
        """An eager timed call's inputs: each tensor copied to its place in `pool` at a shift
        drawn now (input_pool.py), the numbers as they are."""
        torch = self.torch
        return [pool.place(j, a) if type(a) is torch.Tensor else a for j, a in enumerate(values)]

    def intact(self, guard: tuple) -> bool:
        buf, start, size = guard
        return bool((buf[:start] == CANARY).all()) and bool((buf[start + size :] == CANARY).all())

    def outputs_broken(self, model: PlanModel) -> list[int]:
        return model.broken()

    def time_cases(self) -> None:
        for case in self.job.cases:
            if not case.timed:
                continue
            self.time_case(case)
        self.send("done", threads=self.active_count())

    def time_case(self, case: SandboxCase) -> None:
        if self.job.timing != "graph":
            self.time_case_eager(case)
            return
        why = self.time_case_graph(case) if self.clock.gpu else "no GPU"
        if why:  # timed eagerly, flagged: never a failure of the candidate
            self.time_case_eager(case, graph_flag(case.name, why))

    def time_case_eager(self, case: SandboxCase, flag: str = "") -> None:
        job, torch = self.job, self.torch
        # The reference's parameters under the seed the post-timing check compares with (the
        # judge computes the timed calls' references with it), and each check seed's own.
        models = {seed: self.build_model(case, seed) for seed in job.seeds}
        model = models[job.seeds[-1]]
        sets = [self.inputs(case, job.timing_seed + i) for i in range(case.timing_sets)]
        # Under a lean plan a check seed's inputs are drawn when its call is slipped in.
        checks = {seed: None if self.lean else self.inputs(case, seed) for seed in job.seeds}
        calls = job.warmup + job.trials
        # One set where two do not fit (memplan.py): each call's drawn anew before it, untimed.
        fresh = len(sets) == 1 and calls > 1
        kept_sets = len(sets)
        slipped = sorted(secrets.randbelow(calls + 1) for _ in range(INTERLEAVED_CHECKS))
        keep_left = min(CHECKED_TRIALS, calls)
        kept: list[tuple[int, int, list]] = []  # (seed, set index, outputs)
        times: list[float] = []
        windows: list[float] = []
        pool = ShiftedInputs(GUARD, CANARY)  # the timed calls' input places (input_pool.py)
        self.clock.sync()
        self.send("timing_start", case=case.name)
        with self.clock.no_grad():
            for i in range(calls):
                while slipped and slipped[0] == i:
                    slipped.pop(0)
                    seed = list(checks)[secrets.randbelow(len(checks))]
                    args = [
                        self.guarded_clone(a)[0] if type(a) is torch.Tensor else a
                        for a in checks[seed] or self.inputs(case, seed)
                    ]
                    outs: list = []
                    m = models[seed]
                    bases = m.prepare(*args)
                    self.clock.trial(lambda b=bases, o=outs, m=m: o.extend(m.run(b)))
                    kept.append((seed, -1, self.to_host(outs) if self.lean else outs))
                    del args, outs, bases
                index = i  # call i's set is the one drawn from seed i past the first timing seed
                if fresh:  # the first set, then one drawn for each call, dropped once copied
                    source = sets.pop() if sets else self.inputs(case, job.timing_seed + i)
                else:  # the budget's sets, then each call's drawn anew in place of the oldest
                    if i >= kept_sets:  # no call sees inputs another saw (timing.py)
                        sets[i % kept_sets] = []  # its memory back before the next is drawn
                        sets[i % kept_sets] = self.inputs(case, job.timing_seed + i)
                    source = sets[i % kept_sets]
                args = self.timed_inputs(pool, source)
                del source
                outs = []
                bases = model.prepare(*args)  # the harness's allocations and poison: untimed
                t, w = self.clock.trial(lambda b=bases, o=outs: o.extend(model.run(b)))
                if i >= job.warmup:
                    times.append(t)
                    windows.append(w)
                # Drawn after the call: nothing the call could see decided it.
                if keep_left and secrets.randbelow(calls - i) < keep_left:
                    keep_left -= 1
                    kept.append((job.timing_seed + index, index, self.to_host(outs)))
                del args, outs, bases
        self.clock.sync()
        self.send(
            "timing_done",
            case=case.name,
            trials=times,
            windows=windows,
            threads=self.active_count(),
            **({"flags": [flag]} if flag else {}),
        )
        sets.clear()
        checks.clear()
        del pool
        self.give_back()  # under a lean plan: the sets' memory, before the judge computes
        for seed, index, outs in kept:
            self.send_timed(case, seed, index, outs)
        del sets, checks, kept
        seed = job.seeds[-1]
        self.check_call(case, seed, model, self.inputs(case, seed), "post", False)

    def time_case_graph(self, case: SandboxCase) -> str:
        """The case timed as replays of one CUDA graph of its plan (see the module docstring);
        why it cannot be captured ('' when it was timed, checked and reported)."""
        job, torch, clock = self.job, self.torch, self.clock
        models = {seed: self.build_model(case, seed) for seed in job.seeds}
        model = models[job.seeds[-1]]
        sets = [self.inputs(case, job.timing_seed + i) for i in range(case.timing_sets)]
        checks = {seed: self.inputs(case, seed) for seed in job.seeds}
        if not self.timing.same_scalars([*sets, *checks.values()]):
            return "its non-tensor inputs differ between calls"
        clock.sync()
        self.send("timing_start", case=case.name)
        with clock.no_grad():
            for i in range(job.warmup):  # eager, as the eager timing's warm-up
                args = [
                    self.guarded_clone(a)[0] if type(a) is torch.Tensor else a
                    for a in sets[i % len(sets)]
                ]
                bases = model.prepare(*args)
                clock.trial(lambda b=bases: model.run(b))
                del args, bases
            # The graph's buffers: the inputs between canaries at a shifted address, the plan's
            # allocations as prepare makes them, all before the capture, at fixed addresses.
            fixed = [
                self.guarded_clone(a) if type(a) is torch.Tensor else (a, None) for a in sets[0]
            ]
            args = [a for a, _ in fixed]
            bases = model.prepare(*args)

            def launch(stream, bases=bases) -> list:  # noqa: ANN001 (a torch.cuda.Stream)
                before, model.stream = model.stream, stream.cuda_stream  # the capture stream
                try:
                    return model.run(bases)
                finally:
                    model.stream = before

            try:
                graph, outs = clock.capture(launch)
            except self.timing.NotCapturable as e:
                return str(e)
            times, windows, kept = self.replays(
                case, graph, outs, bases, args, models, sets, checks
            )
        clock.sync()
        self.send(
            "timing_done",
            case=case.name,
            trials=times,
            windows=windows,
            threads=self.active_count(),
            flags=[graph_flag(case.name, "")],
        )
        # The canaries around the graph's fixed buffers, read once after all its replays.
        guards = [g for a, g in fixed if type(a) is torch.Tensor]
        broken: list = [i for i, g in enumerate(guards) if not self.intact(g)]
        broken += [f"allocation {k}" for k in model.broken()]
        for n, (seed, index, got) in enumerate(kept):
            self.send_timed(case, seed, index, got, broken if n == len(kept) - 1 else None)
        del graph, outs, bases, args, fixed, guards, sets, checks, kept
        seed = job.seeds[-1]
        self.check_call(case, seed, model, self.inputs(case, seed), "post", False)
        return ""

    def replays(self, case, graph, outs, bases, args, models, sets, checks):  # noqa: ANN001, ANN201
        """The timed replays: (times, windows, kept outputs as (seed, set index, outputs)).
        Before each, untimed: the plan's buffers poisoned and given the seed's weights, the
        trial's inputs copied into the graph's input buffers (then the flush, in the trial).
        Check replays on the check seeds are slipped in among them at random places."""
        job, clock, timing = self.job, self.clock, self.timing
        model = models[job.seeds[-1]]
        slipped = sorted(secrets.randbelow(job.trials + 1) for _ in range(INTERLEAVED_CHECKS))
        keep_left = min(CHECKED_TRIALS, job.trials)
        kept: list[tuple[int, int, list]] = []
        times: list[float] = []
        windows: list[float] = []
        for i in range(job.trials):
            while slipped and slipped[0] == i:
                slipped.pop(0)
                seed = list(checks)[secrets.randbelow(len(checks))]
                model.refresh(bases, models[seed].weights)
                timing.refill(args, checks[seed])
                clock.trial(lambda: clock.replay(graph))
                kept.append((seed, -1, [o.clone() for o in outs]))
            # Replay i's set is the one drawn from seed warmup + i past the first timing seed:
            # the budget's sets, then each drawn anew in place of the oldest, so no replay sees
            # inputs another saw (a cache in device memory, keyed by content, never hits).
            index = job.warmup + i
            slot = index % len(sets)
            if index >= len(sets):
                sets[slot] = []
                sets[slot] = self.inputs(case, job.timing_seed + index)
            model.refresh(bases, model.weights)
            timing.refill(args, sets[slot])
            t, w = clock.trial(lambda: clock.replay(graph))
            times.append(t)
            windows.append(w)
            # Drawn after the replay: nothing the replay could see decided it.
            if keep_left and secrets.randbelow(job.trials - i) < keep_left:
                keep_left -= 1
                kept.append((job.timing_seed + index, index, [o.clone() for o in outs]))
        return times, windows, kept
