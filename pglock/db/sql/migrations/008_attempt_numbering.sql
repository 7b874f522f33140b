-- pglock schema, version 8: no table changes. record_start (sql/functions.sql, created
-- after this file) numbers a slot's attempt no lower than the caller's own number: a
-- holder that kept its lock across an asynchronous failover that lost a further
-- attempt's start record used to be given the lost attempt's number again, and so made
-- one attempt more than --retries allows (the soak, seed 3435: docs/soak.md; docs/ha.md,
-- "What asynchronous replication still cannot give").

UPDATE {schema}.meta SET value = '8' WHERE key = 'version';
