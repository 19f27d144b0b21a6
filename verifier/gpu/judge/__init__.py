"""The judge process: `python -m hipevolve.verifier.gpu.judge.worker` (worker.py). No pydantic."""
