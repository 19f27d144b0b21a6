"""The thin core every layer stands on: task specs, candidates, evaluations, settings, errors."""
