-- pglock schema, version 6: the server incarnation of an advisory lock row
-- (docs/advisory.md, "Restarts and failovers"). A free session lock proves an advisory
-- holder gone only on the server that granted it, in the life of its lock table: the row
-- records which one that was (incarnation(), sql/functions.sql), stamped by acquire,
-- renew and retake while the caller's session holds the lock. A contender takes an
-- advisory row over at once only when it was stamped by the server answering now; any
-- other (a restart, a crash, a promoted standby since) is a lease, waited out to its
-- expiry or until its holder takes its session lock back. NULL (a row of an older
-- pglock, until its holder's next renewal) is never the current one.
ALTER TABLE {schema}.locks ADD COLUMN incarnation text;

UPDATE {schema}.meta SET value = '6' WHERE key = 'version';
