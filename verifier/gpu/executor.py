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

Timing (time_cases): each trial's inputs are copied to a fresh, shifted place first, so no
address keeps its data from one trial to the next; its buffers are allocated, guarded, poisoned
and given their weights before the start event (PlanModel.prepare), so a trial times only what
the forward asked for: its fills (torch.zeros, zero_) and its launcher calls (PlanModel.run); after each timed call a random draw (made
after the call, from os.urandom) decides whether its outputs go to the judge to be checked
(`CHECKED_TRIALS` a case, uniformly among all its calls), and check calls on the checked seeds
are slipped in at random places among the timed ones. A library that counts calls, or keys a
cache on addresses, cannot tell which of its calls are judged.

What it does not protect against: the library's host code runs in this process and could read
its memory (the seeds, the job); the build stage's library check (verifier/build/
library_check.py) refuses libraries with constructors of their own, imports outside an
allowlist or raw system calls, so nothing runs before a launcher is called, and a launcher
finds no Python symbols to call by name.

Imports torch, ctypes, the standard library and hipevolve.runtime /
hipevolve.verifier.gpu.{plan,sandbox,timing} only.
"""

from __future__ import annotations

import ctypes
import secrets
from typing import TYPE_CHECKING, Any

import torch

from hipevolve.runtime import Launcher, launcher_signatures
from hipevolve.verifier.gpu.plan import ALIGN, CasePlan, Plan, PlanError, Ref, validate
from hipevolve.verifier.gpu.sandbox import CANARY, GUARD, Sandbox

if TYPE_CHECKING:
    from hipevolve.verifier.gpu.job import SandboxCase

SHIFTS = 16  # a buffer starts GUARD + k * ALIGN bytes into its allocation, k in [0, SHIFTS)
CHECKED_TRIALS = 3  # timed calls of a case whose outputs are checked, drawn after each call
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
        job, torch = self.job, self.torch
        # The reference's parameters under the seed the post-timing check compares with (the
        # judge computes the timed calls' references with it), and each check seed's own.
        models = {seed: self.build_model(case, seed) for seed in job.seeds}
        model = models[job.seeds[-1]]
        sets = [self.inputs(case, job.timing_seed + i) for i in range(case.timing_sets)]
        checks = {seed: self.inputs(case, seed) for seed in job.seeds}
        calls = job.warmup + job.trials
        slipped = sorted(secrets.randbelow(calls + 1) for _ in range(INTERLEAVED_CHECKS))
        keep_left = min(CHECKED_TRIALS, calls)
        kept: list[tuple[int, int, list]] = []  # (seed, set index, outputs)
        times: list[float] = []
        windows: list[float] = []
        self.clock.sync()
        self.send("timing_start", case=case.name)
        with self.clock.no_grad():
            for i in range(calls):
                while slipped and slipped[0] == i:
                    slipped.pop(0)
                    seed = list(checks)[secrets.randbelow(len(checks))]
                    args = [
                        self.guarded_clone(a)[0] if type(a) is torch.Tensor else a
                        for a in checks[seed]
                    ]
                    outs: list = []
                    m = models[seed]
                    bases = m.prepare(*args)
                    self.clock.trial(lambda b=bases, o=outs, m=m: o.extend(m.run(b)))
                    kept.append((seed, -1, outs))
                index = i % len(sets)
                args = [
                    self.guarded_clone(a)[0] if type(a) is torch.Tensor else a for a in sets[index]
                ]
                outs = []
                bases = model.prepare(*args)  # the harness's allocations and poison: untimed
                t, w = self.clock.trial(lambda b=bases, o=outs: o.extend(model.run(b)))
                if i >= job.warmup:
                    times.append(t)
                    windows.append(w)
                # Drawn after the call: nothing the call could see decided it.
                if keep_left and secrets.randbelow(calls - i) < keep_left:
                    keep_left -= 1
                    kept.append((job.timing_seed + index, index, [o.clone() for o in outs]))
                del args, outs, bases
        self.clock.sync()
        self.send(
            "timing_done",
            case=case.name,
            trials=times,
            windows=windows,
            threads=self.active_count(),
        )
        for seed, index, outs in kept:
            self.send_timed(case, seed, index, outs)
        del sets, checks, kept
        seed = job.seeds[-1]
        self.check_call(case, seed, model, self.inputs(case, seed), "post", False)

    def send_timed(self, case: SandboxCase, seed: int, index: int, outs: list) -> None:
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
            guards_broken=[],
            threads_before=1,
            threads_after=self.active_count(),
        )
        if shared:
            if self.readline().strip() != "ack":
                raise RuntimeError("the judge did not acknowledge shared outputs")
            self.release(shared)
