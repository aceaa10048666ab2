-- Migration 11: completed-job history and results (Q19.1-Q19.3). The schema
-- placeholder is replaced by the quoted schema name.

-- The stamp keep_completed_s (Q19.2): how long a job stays readable after its ack, NULL
-- to delete it at its ack (every row enqueued before this migration). Dead rows keep
-- it, so that a redriven job is kept as it would have been. Nullable columns without a
-- default: catalog-only changes, no table rewrite.
ALTER TABLE @schema@.jobs ADD COLUMN keep_completed_s double precision;
ALTER TABLE @schema@.dead_jobs ADD COLUMN keep_completed_s double precision;

-- The kept rows of acked jobs, moved here by the ack that finishes them (a DELETE from
-- jobs and an INSERT here in one statement): the live table stays the size of the live
-- work, and nothing on the claim path reads this table. purge_at is completed_at +
-- keep_completed_s, indexed per queue for the sweeps' batched purge; the list index
-- serves the operator's keyset paging by id. A kept row keeps its last claim's fields
-- and token, as a dead row does (D1).
CREATE TABLE @schema@.completed_jobs (
    id bigint PRIMARY KEY,
    queue text NOT NULL,
    payload bytea NOT NULL,
    priority integer NOT NULL,
    state text NOT NULL CHECK (state IN ('completed')),
    attempts integer NOT NULL,
    max_attempts integer NOT NULL,
    run_at timestamptz NOT NULL,
    enqueued_at timestamptz NOT NULL,
    visibility_timeout_s double precision NOT NULL,
    backoff_base_s double precision NOT NULL,
    expires_at timestamptz,
    claimed_by text,
    claimed_at timestamptz,
    claim_expires_at timestamptz,
    last_error text,
    headers jsonb NOT NULL DEFAULT '{}',
    unique_key text,
    concurrency_key text,
    claim_token bigint,
    keep_completed_s double precision NOT NULL,
    completed_at timestamptz NOT NULL,
    purge_at timestamptz NOT NULL,
    result bytea
);
CREATE INDEX completed_jobs_purge_idx ON @schema@.completed_jobs (queue, purge_at);
CREATE INDEX completed_jobs_list_idx ON @schema@.completed_jobs (queue, state, id);
