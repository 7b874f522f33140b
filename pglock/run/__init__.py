"""The run path: a slot's attempts under one lock, the command, its supervision, what it tells."""
