"""Compiling candidates: backends, the cached compile, the HIP-on-NVIDIA layer, AMD static facts."""
