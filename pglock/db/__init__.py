"""The database: connections, the schema and its upgrades, the embedded server."""
