-- Migration 12: two-phase cancel (Q19.5). The schema placeholder is replaced by the
-- quoted schema name.

-- When cancel was first called on the job while it was processing. A nullable column
-- without a default: a catalog-only change, no table rewrite.
ALTER TABLE @schema@.jobs ADD COLUMN cancel_requested_at timestamptz;

-- A live job may now be 'cancelling': cancelled while processing, its holder not yet
-- stopped. The CHECK is swapped in two steps so that no step holds the table's
-- ACCESS EXCLUSIVE lock for a scan: the new constraint is added NOT VALID (a catalog
-- change), the old one dropped, and VALIDATE then scans the rows under a SHARE UPDATE
-- EXCLUSIVE lock, which lets claims, acks and enqueues run on.
ALTER TABLE @schema@.jobs
    ADD CONSTRAINT jobs_state_check_new
        CHECK (state IN ('pending', 'processing', 'cancelling')) NOT VALID,
    DROP CONSTRAINT jobs_state_check;
ALTER TABLE @schema@.jobs RENAME CONSTRAINT jobs_state_check_new TO jobs_state_check;
ALTER TABLE @schema@.jobs VALIDATE CONSTRAINT jobs_state_check;

-- A kept job (Q19.2, migration 11) may now be kept as 'cancelled' too: the same swap
-- on completed_jobs, under the same locks.
ALTER TABLE @schema@.completed_jobs
    ADD CONSTRAINT completed_jobs_state_check_new
        CHECK (state IN ('completed', 'cancelled')) NOT VALID,
    DROP CONSTRAINT completed_jobs_state_check;
ALTER TABLE @schema@.completed_jobs
    RENAME CONSTRAINT completed_jobs_state_check_new TO completed_jobs_state_check;
ALTER TABLE @schema@.completed_jobs VALIDATE CONSTRAINT completed_jobs_state_check;

-- The sweep finds the cancelling rows whose lease lapsed through this index; it is
-- empty in the usual case (no row is cancelling). Its build reads the table once under
-- a SHARE lock: enqueues wait for it, reads do not (see docs/how-to/migrate.md).
CREATE INDEX jobs_cancelling_idx ON @schema@.jobs (queue, claim_expires_at)
    WHERE state = 'cancelling';
