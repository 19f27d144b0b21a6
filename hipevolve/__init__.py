"""hipevolve: evolves fast, verified HIP kernels for PyTorch operators.

This package must stay importable with torch, numpy and the standard library alone: the GPU
worker imports hipevolve.verifier.* modules through it.
"""

__version__ = "0.1.0"
