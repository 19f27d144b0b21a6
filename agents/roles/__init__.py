"""The agents' roles, one module each; agents/graph.py wires them."""
