"""The GPU side: the judge, the sandbox and its zygote, isolation, timing and comparison.

Importing this package must stay light (no pydantic): the judge and the sandbox import it."""
