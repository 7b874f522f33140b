-- pglock schema, version 4: the run path as functions. Each step of `pglock run` is one
-- call (one statement, one round trip): acquire (and start the run), renew, finish (and
-- release), release, start a retry, note. They are SECURITY DEFINER, so a role granted
-- only EXECUTE on them (pglock_runner, `pglock init --print-grants`) can take, renew and
-- release its own claims and record its own runs, and write nothing else. The functions
-- themselves are in sql/functions.sql, which every creation and upgrade runs after the
-- migrations; this version's change to the tables is the claim's digest below.

-- A run row remembers its claim by a digest of the holder id (readable by anyone who can
-- read runs, and of no use without the id itself): finish and note check it.
ALTER TABLE {schema}.runs ADD COLUMN claim_digest bytea;

UPDATE {schema}.meta SET value = '4' WHERE key = 'version';
