"""Synthetic task generation: mutation, composition and constraints, each task verified."""
