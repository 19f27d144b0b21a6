"""Static screening: named checks over a candidate's sources, before any compile."""
