-- pglock schema, version 7 (docs38's part; the lead joins the 007 parts into one): the
-- fencing guard `fence` and `note_windows` (a trigger skipped inside a --window records
-- the job's windows), both in sql/functions.sql, created after this file. No table changes.

UPDATE {schema}.meta SET value = '7' WHERE key = 'version';
