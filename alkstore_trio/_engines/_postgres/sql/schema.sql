-- The canonical alkstore_trio schema (version 9). The schema placeholder is replaced
-- by the quoted schema name. The numbered files in migrations/ must produce exactly this; a test
-- checks it.

-- Create the schema only when it is missing: CREATE SCHEMA IF NOT EXISTS would still
-- need the CREATE right on the database, which a role that owns a schema a DBA made
-- for it does not have.
DO $alk$
BEGIN
    IF pg_catalog.to_regnamespace('@schema@') IS NULL THEN
        CREATE SCHEMA @schema@;
    END IF;
END
$alk$;

-- The schema version: one row, written only by migrations.
CREATE TABLE @schema@.alk_schema_version (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version integer NOT NULL
);

-- The database clock every statement reads (one read per statement). Tests of the
-- library replace it in throwaway schemas to freeze time; production never does.
CREATE FUNCTION @schema@.alk_now() RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    AS 'SELECT pg_catalog.statement_timestamp()';

-- Live jobs: pending or processing.
CREATE TABLE @schema@.jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL,
    payload bytea NOT NULL,
    priority integer NOT NULL,
    state text NOT NULL CHECK (state IN ('pending', 'processing')),
    attempts integer NOT NULL,
    max_attempts integer NOT NULL CHECK (max_attempts >= 1),
    run_at timestamptz NOT NULL,
    enqueued_at timestamptz NOT NULL,
    visibility_timeout_s double precision NOT NULL,
    backoff_base_s double precision NOT NULL,
    expires_at timestamptz,
    claimed_by text,
    claimed_at timestamptz,
    claim_expires_at timestamptz,
    last_error text,
    -- The job's headers (D30): a JSON object of str to str, '{}' for none.
    headers jsonb NOT NULL DEFAULT '{}',
    -- The job's unique key (Q15), NULL for none.
    unique_key text,
    -- The job's concurrency key (Q18.8), NULL for none.
    concurrency_key text,
    -- Q19.2: the stamp keep_completed_s, NULL to delete the row at its ack.
    keep_completed_s double precision
);

-- Claims walk pending rows of one queue in claim order.
CREATE INDEX jobs_claim_idx ON @schema@.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending';
-- Reclaims and the pre-claim sweep find lapsed leases of one queue.
CREATE INDEX jobs_lease_idx ON @schema@.jobs (queue, claim_expires_at)
    WHERE state = 'processing';
-- The expiry sweep finds expired rows of one queue.
CREATE INDEX jobs_expiry_idx ON @schema@.jobs (queue, expires_at)
    WHERE expires_at IS NOT NULL;
-- Q15: at most one live job per (queue, unique_key); keyless rows have no entry.
CREATE UNIQUE INDEX jobs_unique_key_idx ON @schema@.jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL;
-- Q18.8: the per-key claim finds the keys with pending rows and each key's best ready
-- rows, and each key's leases; keyless rows have no entry.
CREATE INDEX jobs_key_claim_idx ON @schema@.jobs (queue, concurrency_key, priority DESC, run_at, id)
    WHERE state = 'pending' AND concurrency_key IS NOT NULL;
CREATE INDEX jobs_key_lease_idx ON @schema@.jobs (queue, concurrency_key, claim_expires_at)
    WHERE state = 'processing' AND concurrency_key IS NOT NULL;

-- Dead jobs: the dead-letter store. Same columns, plus when the job died (before the
-- headers: the column order is the order the migrations added them in).
CREATE TABLE @schema@.dead_jobs (
    id bigint PRIMARY KEY,
    queue text NOT NULL,
    payload bytea NOT NULL,
    priority integer NOT NULL,
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
    died_at timestamptz NOT NULL,
    headers jsonb NOT NULL DEFAULT '{}',
    unique_key text,
    concurrency_key text,
    keep_completed_s double precision
);

-- Retention purges the oldest dead rows of one queue.
CREATE INDEX dead_jobs_retention_idx ON @schema@.dead_jobs (queue, died_at);

-- Q19.2: the kept rows of acked jobs (history), moved here by their ack: the columns of
-- jobs, the state 'completed', when it was acked, when a sweep may purge it
-- (completed_at + keep_completed_s) and the handler's result (Q19.1). Nothing on the
-- claim path reads this table.
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
    keep_completed_s double precision NOT NULL,
    completed_at timestamptz NOT NULL,
    purge_at timestamptz NOT NULL,
    result bytea
);
-- Q19.3: sweeps purge one queue's oldest kept rows in batches.
CREATE INDEX completed_jobs_purge_idx ON @schema@.completed_jobs (queue, purge_at);
-- D26: the operator's listing pages by id.
CREATE INDEX completed_jobs_list_idx ON @schema@.completed_jobs (queue, state, id);

-- Per queue, how many jobs were acked, dead-lettered and cancelled since this table was
-- created. The statements that move jobs out of the live table add to it in the same
-- statement. Each queue's counts are spread over up to 64 rows (shard =
-- pg_backend_pid() mod 64), so the commits of two sessions never wait on one row lock
-- unless their backends share a shard; readers sum the shards. A low fillfactor leaves
-- room on every page for the new row versions of updates, which stay heap-only (HOT):
-- no index entry per update.
CREATE TABLE @schema@.queue_counters (
    queue text NOT NULL,
    shard integer NOT NULL,
    acked bigint NOT NULL DEFAULT 0,
    dead_lettered bigint NOT NULL DEFAULT 0,
    cancelled bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, shard)
) WITH (fillfactor = 10);

-- Q15: the unique_for_s windows: while expires_at is ahead, an enqueue of the key
-- creates nothing and gets job_id, the last job created with the key.
CREATE TABLE @schema@.unique_windows (
    queue text NOT NULL,
    unique_key text NOT NULL,
    job_id bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, unique_key)
);
CREATE INDEX unique_windows_expiry_idx ON @schema@.unique_windows (queue, expires_at);


-- Q17: one row per periodic schedule, locked by the transaction that fires it.
CREATE TABLE @schema@.periodic (
    name text PRIMARY KEY,
    queue text NOT NULL,
    expression text NOT NULL,
    tz text NOT NULL,
    next_fire_at timestamptz,
    last_fire_at timestamptz,
    last_seen_at timestamptz NOT NULL
);


-- Per queue, its controls: paused or not (Q18). A queue without a row is not paused;
-- pause() writes the row and resume() keeps it (paused = false). Later controls of a
-- queue (a concurrency limit, a rate) are more columns of this row, read by the claim.
--
-- The pause barrier needs no function and costs the claims nothing: every claim
-- statement reads `paused` in its own snapshot, and a pause takes the jobs table in
-- SHARE mode before it writes the flag. A claim takes the jobs table in ROW EXCLUSIVE
-- mode before its snapshot is taken, so the pause waits for the claims in flight (they
-- saw the queue open and commit first), and a claim that comes later waits for the
-- pause's commit and then takes a snapshot that sees the flag.
--
-- Q18.7-Q18.11: the limits are more columns of the row: max_running, the rate limit's
-- token bucket (rate_per_s, burst, and the tokens it held at refilled_at), and how many
-- claims each limit throttled. `limited` says whether any limit is set: the fast claim
-- statements read it with `paused` and hand out nothing from a limited queue; the engine
-- then claims from it with the limited claim (claim_limited in queries.sql), which
-- serializes the queue's claims on this row's lock.
CREATE TABLE @schema@.queue_controls (
    queue text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL,
    max_running integer CHECK (max_running >= 1),
    rate_per_s double precision CHECK (rate_per_s > 0),
    burst integer CHECK (burst >= 1),
    tokens double precision NOT NULL DEFAULT 0,
    refilled_at timestamptz,
    throttled_running bigint NOT NULL DEFAULT 0,
    throttled_rate bigint NOT NULL DEFAULT 0,
    -- Q18.8: at most this many live leases per concurrency key; the claims it throttled.
    max_running_per_key integer CHECK (max_running_per_key >= 1),
    throttled_per_key bigint NOT NULL DEFAULT 0,
    limited boolean NOT NULL GENERATED ALWAYS AS (
        max_running IS NOT NULL OR rate_per_s IS NOT NULL OR max_running_per_key IS NOT NULL
    ) STORED,
    CONSTRAINT queue_controls_burst_with_rate CHECK ((burst IS NULL) = (rate_per_s IS NULL))
);

INSERT INTO @schema@.alk_schema_version (version) VALUES (9);
