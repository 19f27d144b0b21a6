"""Reaches the harness from model.py, as a candidate sharing the timer's process could: through
torch.sys.modules it makes every timed trial report 1 us and every input set the first one,
and through the caller's stack frames it cuts the trial count of any job it finds. Then it calls
an honest kernel. In a recorder process these changes reach nothing that checks or times."""

import torch
import torch.nn as nn

from hipevolve.runtime import kernels

REACHED = []


def _reach() -> None:
    modules = torch.sys.modules
    timing = modules.get("hipevolve.verifier.gpu.timing")
    if timing is not None and hasattr(timing, "Clock"):
        timing.Clock.trial = lambda self, fn: (fn(), (1.0, 1.0))[1]
        REACHED.append("timing")
    for name in (
        "hipevolve.verifier.gpu.sandbox.sandbox",
        "hipevolve.verifier.gpu.sandbox.executor",
    ):
        module = modules.get(name)
        for cls in ("Sandbox", "Executor"):
            target = getattr(module, cls, None)
            if target is not None:
                original = target.inputs
                target.inputs = lambda self, case, seed, f=original: f(self, case, 0)
                REACHED.append(f"{name}.{cls}")
    frame = torch.sys._getframe(1)
    while frame is not None:
        for value in list(frame.f_locals.values()):
            job = getattr(value, "job", value)
            for field in ("trials", "warmup"):
                if hasattr(job, field):
                    try:
                        object.__setattr__(job, field, 1)
                        REACHED.append(f"frame:{field}")
                    except (AttributeError, TypeError):
                        pass
        frame = frame.f_back


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _reach()
        x = x.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        kernels.softmax_bf16(x, out, x.numel() // cols, cols)
        return out
