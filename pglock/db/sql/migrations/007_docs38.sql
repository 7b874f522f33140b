-- pglock schema, version 7 (docs38's part; the lead joins the 007 parts into one): the
-- fencing guard `fence` (sql/functions.sql, created after this file). No table changes.

UPDATE {schema}.meta SET value = '7' WHERE key = 'version';
