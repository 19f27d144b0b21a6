"""The LLM behind the agents: the client, the per-role ensemble and bandit, reply parsing.

Nothing here knows the agents' context (agents/context.py builds on this package): the roles'
calls that log to the run (agents/structured_call.py, agents/reply_record.py) sit a level up."""
