"""The command line: typer's commands, `pglock run`'s own parser, the error boundary, screens."""
