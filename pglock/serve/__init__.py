"""`pglock serve`: the fleet in a browser (docs/serve.md). Above the command line: it renders
the JSON shapes the command line makes (cli/screens.py); nothing below imports it, and its
stack (Starlette, uvicorn, Jinja2) is imported here only."""
