-- Migration 3: job headers (D30). The schema placeholder is replaced by the quoted
-- schema name.

-- Each job's headers: a JSON object of str names to str values, '{}' for none. Kept for
-- the job's life like the payload, so dead rows carry them too.
--
-- On PostgreSQL 11 and later, ADD COLUMN with a constant default changes only the
-- catalog: no table rewrite and no index rebuild, whatever the tables hold (existing
-- rows read the default, '{}'). Each ALTER still takes an ACCESS EXCLUSIVE lock on its
-- table, held until the migration commits: it waits for the statements in flight on that
-- table, and the statements that come after wait for it (see docs/how-to/migrate.md).
--
-- Stop the workers of version 2 before applying it: their ack_claims_and_claim returns
-- every column of jobs, and this new one changes its result (a statement they prepared
-- fails, one they did not misreads the row). Version 2's other statements name their
-- columns and keep working (without headers).
ALTER TABLE @schema@.jobs ADD COLUMN headers jsonb NOT NULL DEFAULT '{}';
ALTER TABLE @schema@.dead_jobs ADD COLUMN headers jsonb NOT NULL DEFAULT '{}';
