"""One path for a refusal: every rule the verifier enforces on a candidate (the screen, the AMD
limits, the library and extension checks, the recorders, the executor) answers through
`refused`, by the rule's name, with `rejected` or `hacked`, never with a crash's runtime_error.
So a dataset record and the repairer read what a rule refused as a rule's verdict, and the
message begins the same way wherever the rule fired.

rejected: a rule refused what the candidate does before it ran on a GPU, and says how to fix it.
hacked: what the candidate did can only be a hack (a host-code hack the library checks find in
its build, a launcher rebound, PyTorch compute beside its kernels, what the executor caught).
docs/statuses.md lists every status and what it means for a candidate, a dataset record and
the repairer.

Imports nothing: the controller, the judge and the sandbox all read it.
"""

from __future__ import annotations

REJECTED, HACKED = "rejected", "hacked"

# rule -> (verdict, how its message begins); where each fires is named beside it.
RULES: dict[str, tuple[str, str]] = {
    "screen":          (REJECTED, ""),                               # verifier/screen (@check)
    "amd_limits":      (REJECTED, "over the AMD target's limits: "),  # build/rocm_limits.py
    "library_check":   (HACKED,   "library refused: "),              # build/library_check.py
    "extension_check": (HACKED,   "extension refused: "),            # build/kb_library_check.py
    "launch_plan":     (HACKED,   "launch plan refused: "),          # sandbox/record.py
    "kb_plan":         (REJECTED, "KernelBench plan refused: "),     # sandbox/record_kb.py
    "kb_plan_hack":    (HACKED,   "KernelBench plan refused: "),     # record_kb.py, hacked=True
    "kernels_only":    (HACKED,   ""),                               # judge/kb_stage.py
    "executor":        (HACKED,   ""),                               # plan_kb.Hacked (replay)
}  # fmt: skip


def refused(rule: str, why: str) -> tuple[str, str]:
    """The verdict of `rule` refusing a candidate, and its message: (status, message)."""
    status, begins = RULES[rule]
    return status, begins + why
