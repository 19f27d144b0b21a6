"""The LLM behind the agents: the client, the per-role ensemble and bandit, reply parsing."""
