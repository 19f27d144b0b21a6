"""Exports: a run's best kernel as a drop-in package, datasets, and the HTML report."""
