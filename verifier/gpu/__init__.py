"""What runs in the judge's process and the processes it starts (no controller code here):

- judge/: the judge process (`python -m hipevolve.verifier.gpu.judge.worker`): references,
  comparison, the sandbox's channel and the scorecard;
- sandbox/: the sandbox and recorder processes and the zygote that forks them
  (`python -m hipevolve.verifier.gpu.sandbox.sandbox_process`, `... .sandbox.zygote`);
- here, what both sides read: the job (job.py), the messages and shared memory between them
  (wire.py, ipc.py), launch plans (plan.py, plan_kb.py), timing, the memory plan, confinement.

The controller's side (spawning judges, slots) is a level up: verifier/isolate.py, slots.py.
Importing this package must stay light (no pydantic, nothing of the controller's): pyproject.toml's
import-linter contract "verifier/gpu stays light" forbids it, and tests/test_gpu_imports_light.py
checks it in a real process."""
