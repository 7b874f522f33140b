"""pglock: run a cron job on exactly one host, with a PostgreSQL lease or advisory lock."""

__version__ = "0.1.0"
