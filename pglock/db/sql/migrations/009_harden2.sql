-- pglock schema, version 9 (issue 46): acquire refuses a slot more than a minute ahead of
-- the server's clock (a host whose clock runs fast), before it takes or records anything;
-- the body is in sql/functions.sql, created after this file.

UPDATE {schema}.meta SET value = '9' WHERE key = 'version';
