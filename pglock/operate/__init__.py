"""Operator actions: clear and prune, pause and stop and replay, doctor, roles, the crontab."""
