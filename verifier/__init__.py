"""The shared verifier: parse, static checks, compile, static AMD analysis, GPU worker.

Importing this package must stay light (no pydantic, no compilers): the GPU worker runs
`python -m hipevolve.verifier.gpu.judge.worker` with torch, numpy and the standard library alone.
"""
