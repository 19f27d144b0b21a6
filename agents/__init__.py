"""The eight agents, their langgraph graph, the LLM client and the offline policies."""
