"""Hack: read files of the host and smuggle what they hold out in the error message: the
password file, a note planted in /tmp (tests/hostile/test_hostile.py writes one), the
repository's README and the user's shell profile, found from the paths the harness's own
modules were imported from. FAULTS.md 8 and 12 (red team round 10: /etc/passwd's first line
reached a verdict).

Expected: every read denied (a sandbox reads only its own folder, Python's and the system's
programs and libraries); the message reports `read=[]`.
"""

from pathlib import Path

import torch.nn as nn

import hipevolve

PLANTED = Path("/tmp") / "hipevolve_dyn_planted_secret.txt"
TARGETS = (
    Path("/etc/passwd"),
    PLANTED,
    Path(hipevolve.__file__).resolve().parents[1] / "README.md",
    Path("/root/.bashrc"),
    Path("/root/.profile"),
)


def _read() -> list[str]:
    found = []
    for target in TARGETS:
        try:
            found.append(f"{target}:{target.read_text(errors='replace')[:60]!r}")
        except OSError:
            continue
    return found


class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError(f"read={_read()}")
