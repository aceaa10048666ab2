-- The canonical alkstore_trio schema (version 16). The schema placeholder is replaced
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

-- Live jobs: pending, processing or cancelling (Q19.5).
CREATE TABLE @schema@.jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue text NOT NULL,
    payload bytea NOT NULL,
    priority integer NOT NULL,
    state text NOT NULL,
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
    -- The claim's token (Q19.8), drawn by the claiming client; NULL while pending.
    claim_token bigint,
    -- Q19.2: the stamp keep_completed_s, NULL to delete the row at its ack.
    keep_completed_s double precision,
    -- Q19.5: when cancel was first called while the job was processing; NULL otherwise.
    cancel_requested_at timestamptz,
    -- Q19.7: the last progress text a heartbeat carried; NULL until one was reported.
    progress text,
    CONSTRAINT jobs_state_check CHECK (state IN ('pending', 'processing', 'cancelling')),
    -- Version 8 workers claim without a token: refused by this name (migrate.md).
    CONSTRAINT jobs_claim_needs_v9_workers
        CHECK (state <> 'processing' OR claim_token IS NOT NULL)
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
-- D26.1: the listing of one concurrency key's rows in one state walks them by id, a page
-- at a time, however deep the key's backlog (keyless rows have no entry).
CREATE INDEX jobs_key_list_idx ON @schema@.jobs (queue, concurrency_key, state, id)
    WHERE concurrency_key IS NOT NULL;
-- Q19.5: the sweep finds the cancelling rows whose lease lapsed (empty in the usual case).
CREATE INDEX jobs_cancelling_idx ON @schema@.jobs (queue, claim_expires_at)
    WHERE state = 'cancelling';

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
    claim_token bigint,
    keep_completed_s double precision,
    progress text
);

-- Retention purges the oldest dead rows of one queue.
CREATE INDEX dead_jobs_retention_idx ON @schema@.dead_jobs (queue, died_at);
-- D26.1: the listings by key walk one key's dead rows by id (keyless rows: no entry).
CREATE INDEX dead_jobs_unique_key_idx ON @schema@.dead_jobs (queue, unique_key, id)
    WHERE unique_key IS NOT NULL;
CREATE INDEX dead_jobs_concurrency_key_idx ON @schema@.dead_jobs (queue, concurrency_key, id)
    WHERE concurrency_key IS NOT NULL;

-- Q19.2: the kept rows of finished jobs (history), moved here by their ack (state
-- 'completed') or, Q19.5, by their cancel's finalization ('cancelled'): the columns of
-- jobs, the state, when it was acked or cancelled, when a sweep may purge it
-- (completed_at + keep_completed_s) and the handler's result (Q19.1). Nothing on the
-- claim path reads this table.
CREATE TABLE @schema@.completed_jobs (
    id bigint PRIMARY KEY,
    queue text NOT NULL,
    payload bytea NOT NULL,
    priority integer NOT NULL,
    state text NOT NULL CHECK (state IN ('completed', 'cancelled')),
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
    result bytea,
    progress text
);
-- Q19.3: sweeps purge one queue's oldest kept rows in batches.
CREATE INDEX completed_jobs_purge_idx ON @schema@.completed_jobs (queue, purge_at);
-- D26: the operator's listing pages by id.
CREATE INDEX completed_jobs_list_idx ON @schema@.completed_jobs (queue, state, id);
-- D26.1: the listings by key walk one key's kept rows by id (keyless rows: no entry).
CREATE INDEX completed_jobs_unique_key_idx
    ON @schema@.completed_jobs (queue, state, unique_key, id)
    WHERE unique_key IS NOT NULL;
CREATE INDEX completed_jobs_concurrency_key_idx
    ON @schema@.completed_jobs (queue, state, concurrency_key, id)
    WHERE concurrency_key IS NOT NULL;

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


-- Q21: one row per worker id, its registration and its last beat (the worker registry).
CREATE TABLE @schema@.workers (
    worker_id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    queues text[] NOT NULL,
    concurrency integer NOT NULL,
    version text NOT NULL,
    started_at timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    stopped_at timestamptz
);
CREATE INDEX workers_heartbeat_idx ON @schema@.workers (heartbeat_at);


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

-- Q20.4: enqueue from SQL (a trigger, psql, any language), with the library's checks,
-- stamps, unique keys and wake. Migration 10 explains it; migration 14 added
-- keep_completed_s.
CREATE FUNCTION @schema@.enqueue(
    queue text,
    payload bytea,
    priority bigint DEFAULT 0,
    delay_s double precision DEFAULT NULL,
    run_at timestamptz DEFAULT NULL,
    max_attempts bigint DEFAULT 3,
    visibility_timeout_s double precision DEFAULT 300,
    backoff_base_s double precision DEFAULT 5,
    expires_in_s double precision DEFAULT NULL,
    headers jsonb DEFAULT NULL,
    unique_key text DEFAULT NULL,
    unique_for_s double precision DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    keep_completed_s double precision DEFAULT NULL,
    OUT job_id bigint,
    OUT created boolean
) RETURNS SETOF record
    LANGUAGE plpgsql VOLATILE ROWS 1
    AS $alk$
#variable_conflict use_column
DECLARE
    -- D8: the largest duration, 100 years, in seconds.
    max_s CONSTANT double precision := 3153600000;
    schema_name text;
    delay double precision;
    stamped_max_attempts integer;
    header_bytes bigint;
    channel text;
    due text;
BEGIN
    -- Q1: the queue's name.
    IF enqueue.queue IS NULL
        OR pg_catalog.char_length(enqueue.queue) > 63
        OR enqueue.queue !~ '^[A-Za-z0-9][A-Za-z0-9_.:-]*$'
    THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'queue name must be 1-63 characters from [A-Za-z0-9_.:-] starting '
                || 'with a letter or digit; got '
                || coalesce(pg_catalog.quote_literal(pg_catalog.left(enqueue.queue, 80)), 'NULL');
    END IF;
    IF pg_catalog.starts_with(enqueue.queue, 'alk_') THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'queue names starting with ''alk_'' are reserved for the library; got '
                || pg_catalog.quote_literal(enqueue.queue);
    END IF;
    -- Q2: the payload (never shown), at most open_store's default max_payload_bytes.
    IF enqueue.payload IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'payload must be a bytea value; got NULL';
    END IF;
    IF pg_catalog.octet_length(enqueue.payload) > 1048576 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'payload must be at most 1048576 bytes; got '
                || pg_catalog.octet_length(enqueue.payload) || ' bytes';
    END IF;
    -- Q2/D9: priority in int32; max_attempts in [1, 2^31 - 1].
    IF enqueue.priority IS NULL OR enqueue.priority NOT BETWEEN -2147483648 AND 2147483647 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'priority must be between -2147483648 and 2147483647; got '
                || coalesce(enqueue.priority::text, 'NULL');
    END IF;
    IF enqueue.max_attempts IS NULL OR enqueue.max_attempts NOT BETWEEN 1 AND 2147483647 THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'max_attempts must be between 1 and 2147483647; got '
                || coalesce(enqueue.max_attempts::text, 'NULL');
    END IF;
    stamped_max_attempts := enqueue.max_attempts;
    -- D8 durations: finite, at most 100 years in magnitude; Q1's bounds on the stamps.
    IF enqueue.delay_s IS NOT NULL
        AND NOT (enqueue.delay_s BETWEEN -max_s AND max_s)  -- NaN is above every number
    THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'delay_s must be a finite number of seconds, at most 100 years in '
                || 'magnitude; got ' || enqueue.delay_s;
    END IF;
    IF enqueue.visibility_timeout_s IS NULL
        OR NOT (enqueue.visibility_timeout_s > 0 AND enqueue.visibility_timeout_s <= max_s)
    THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'visibility_timeout_s must be > 0 seconds, finite, at most 100 years; got '
                || coalesce(enqueue.visibility_timeout_s::text, 'NULL');
    END IF;
    IF enqueue.backoff_base_s IS NULL
        OR NOT (enqueue.backoff_base_s >= 0 AND enqueue.backoff_base_s <= max_s)
    THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'backoff_base_s must be >= 0 seconds, finite, at most 100 years; got '
                || coalesce(enqueue.backoff_base_s::text, 'NULL');
    END IF;
    IF enqueue.expires_in_s IS NOT NULL
        AND NOT (enqueue.expires_in_s > 0 AND enqueue.expires_in_s <= max_s)
    THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'expires_in_s must be NULL or > 0 seconds, finite, at most 100 years; '
                || 'got ' || enqueue.expires_in_s;
    END IF;
    -- Q2: run_at within the range a client can read back (Python's datetime: years 1 to
    -- 9999 in UTC), so no infinity either.
    IF enqueue.run_at IS NOT NULL AND NOT (
        enqueue.run_at >= '0001-01-01 00:00:00+00'::timestamptz
        AND enqueue.run_at < '10000-01-01 00:00:00+00'::timestamptz
    ) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'run_at must be between the years 1 and 9999 (UTC); got '
                || enqueue.run_at;
    END IF;
    -- D30: headers, a JSON object of at most 64 names (1-256 characters) to strings,
    -- 16 KiB of names and values in all (UTF-8); jsonb itself refuses NUL and lone
    -- surrogates. Values are never shown.
    IF enqueue.headers IS NOT NULL THEN
        IF pg_catalog.jsonb_typeof(enqueue.headers) <> 'object' THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'headers must be a JSON object of strings to strings or NULL; got a '
                    || pg_catalog.jsonb_typeof(enqueue.headers);
        END IF;
        IF 64 < (SELECT count(*) FROM pg_catalog.jsonb_each(enqueue.headers)) THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'headers must have at most 64 entries';
        END IF;
        IF EXISTS (
            SELECT 1 FROM pg_catalog.jsonb_each(enqueue.headers) AS h
            WHERE h.key = '' OR pg_catalog.char_length(h.key) > 256
                OR pg_catalog.jsonb_typeof(h.value) <> 'string'
        ) THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'headers must map names of 1-256 characters to string values';
        END IF;
        header_bytes := (
            SELECT sum(pg_catalog.octet_length(h.key) + pg_catalog.octet_length(h.value))
            FROM pg_catalog.jsonb_each_text(enqueue.headers) AS h
        );
        IF header_bytes > 16384 THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'headers must be at most 16384 bytes of names and values (UTF-8); '
                    || 'got ' || header_bytes || ' bytes';
        END IF;
    END IF;
    -- Q15.7/Q18.8: keys of 1-256 characters (text holds no NUL), never shown; a window
    -- is a duration > 0 and needs a key.
    IF enqueue.unique_key IS NOT NULL
        AND pg_catalog.char_length(enqueue.unique_key) NOT BETWEEN 1 AND 256
    THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'unique_key must be 1-256 characters; got '
                || pg_catalog.char_length(enqueue.unique_key) || ' characters';
    END IF;
    IF enqueue.concurrency_key IS NOT NULL
        AND pg_catalog.char_length(enqueue.concurrency_key) NOT BETWEEN 1 AND 256
    THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'concurrency_key must be 1-256 characters; got '
                || pg_catalog.char_length(enqueue.concurrency_key) || ' characters';
    END IF;
    IF enqueue.unique_for_s IS NOT NULL THEN
        IF NOT (enqueue.unique_for_s > 0 AND enqueue.unique_for_s <= max_s) THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'unique_for_s must be > 0 seconds, finite, at most 100 years; got '
                    || enqueue.unique_for_s;
        END IF;
        IF enqueue.unique_key IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
                MESSAGE = 'unique_for_s needs a unique_key; got no key';
        END IF;
    END IF;

    -- Q19.2: how long the finished job stays readable (QueueOpts' stamp): NULL (not
    -- kept) or a duration >= 0, finite, at most 100 years.
    IF enqueue.keep_completed_s IS NOT NULL
        AND NOT (enqueue.keep_completed_s >= 0 AND enqueue.keep_completed_s <= max_s)
    THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = 'keep_completed_s must be NULL or >= 0 seconds, finite, at most 100 '
                || 'years; got ' || enqueue.keep_completed_s;
    END IF;

    -- Q2.1: a negative delay means now (greatest() would turn no delay into 0).
    delay := CASE WHEN enqueue.delay_s IS NOT NULL THEN greatest(enqueue.delay_s, 0) END;
    -- The queue's wake channel, as _sql.wake_channel names it: readable when it fits in
    -- 63 bytes, else a hash. The schema's own name, unquoted, as the library writes it.
    schema_name := (
        SELECT n.nspname FROM pg_catalog.pg_class AS c
            JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
        WHERE c.oid = '@schema@.jobs'::pg_catalog.regclass
    );
    channel := 'alk/' || schema_name || '/' || enqueue.queue;
    IF pg_catalog.octet_length(channel) > 63 THEN
        channel := 'alk#' || pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(
            pg_catalog.convert_to(schema_name || '/' || enqueue.queue, 'UTF8')), 'hex'), 59);
    END IF;
    -- R11: the wake announces in how many seconds the job is due ('' when ready now).
    due := CASE
        WHEN delay IS NOT NULL THEN CASE WHEN delay > 0 THEN delay::text ELSE '' END
        ELSE coalesce(
            pg_catalog.date_part('epoch', enqueue.run_at - @schema@.alk_now())::text, ''
        )
    END;

    IF enqueue.unique_key IS NULL THEN
        -- queries.sql's enqueue_one.
        RETURN QUERY
        WITH t AS MATERIALIZED (SELECT @schema@.alk_now() AS now),
        inserted AS (
            INSERT INTO @schema@.jobs (
                queue, payload, priority, state, attempts, max_attempts, run_at,
                enqueued_at, visibility_timeout_s, backoff_base_s, expires_at, headers,
                unique_key, concurrency_key, keep_completed_s
            )
            SELECT
                enqueue.queue, enqueue.payload, enqueue.priority::integer, 'pending', 0,
                stamped_max_attempts,
                CASE
                    WHEN delay IS NOT NULL THEN t.now + delay * interval '1 second'
                    ELSE coalesce(enqueue.run_at, t.now)
                END,
                t.now, enqueue.visibility_timeout_s, enqueue.backoff_base_s,
                t.now + enqueue.expires_in_s * interval '1 second',
                coalesce(enqueue.headers, '{}'::jsonb), NULL, enqueue.concurrency_key,
                enqueue.keep_completed_s
            FROM t
            RETURNING id
        ),
        woken AS (SELECT pg_catalog.pg_notify(channel, due) FROM inserted)
        SELECT i.id, true FROM inserted AS i, (SELECT count(*) FROM woken) AS wake;
        RETURN;
    END IF;

    -- Q15: queries.sql's lock_unique_keys, then enqueue_unique, which sees (in a fresh
    -- snapshot: this function is VOLATILE) every job and window an earlier holder of the
    -- lock committed. No row only when a redrive won the race to the unique index: then
    -- it runs again.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended(
        schema_name || '/' || enqueue.queue || '/' || enqueue.unique_key, 0));
    FOR attempt IN 1..100 LOOP
        RETURN QUERY
        WITH t AS MATERIALIZED (SELECT @schema@.alk_now() AS now),
        held AS MATERIALIZED (
            SELECT coalesce(
                (SELECT j.id FROM @schema@.jobs AS j
                    WHERE j.queue = enqueue.queue AND j.unique_key = enqueue.unique_key),
                (SELECT w.job_id FROM @schema@.unique_windows AS w, t
                    WHERE w.queue = enqueue.queue AND w.unique_key = enqueue.unique_key
                        AND w.expires_at > t.now)
            ) AS id
        ),
        inserted AS (
            INSERT INTO @schema@.jobs (
                queue, payload, priority, state, attempts, max_attempts, run_at,
                enqueued_at, visibility_timeout_s, backoff_base_s, expires_at, headers,
                unique_key, concurrency_key, keep_completed_s
            )
            SELECT
                enqueue.queue, enqueue.payload, enqueue.priority::integer, 'pending', 0,
                stamped_max_attempts,
                CASE
                    WHEN delay IS NOT NULL THEN t.now + delay * interval '1 second'
                    ELSE coalesce(enqueue.run_at, t.now)
                END,
                t.now, enqueue.visibility_timeout_s, enqueue.backoff_base_s,
                t.now + enqueue.expires_in_s * interval '1 second',
                coalesce(enqueue.headers, '{}'::jsonb), enqueue.unique_key,
                enqueue.concurrency_key, enqueue.keep_completed_s
            FROM t, held
            WHERE held.id IS NULL
            ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
            RETURNING id
        ),
        opened AS (
            INSERT INTO @schema@.unique_windows (queue, unique_key, job_id, expires_at)
            SELECT
                enqueue.queue, enqueue.unique_key, i.id,
                t.now + enqueue.unique_for_s * interval '1 second'
            FROM inserted AS i, t
            WHERE enqueue.unique_for_s IS NOT NULL
            ON CONFLICT (queue, unique_key) DO UPDATE
                SET job_id = EXCLUDED.job_id, expires_at = EXCLUDED.expires_at
        ),
        woken AS (SELECT pg_catalog.pg_notify(channel, due) FROM inserted)
        SELECT i.id, true FROM inserted AS i, (SELECT count(*) FROM woken) AS wake
        UNION ALL
        SELECT held.id, false FROM held WHERE held.id IS NOT NULL;
        IF FOUND THEN
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
        MESSAGE = 'enqueue with a unique_key kept losing the key to redrives; retry it';
END
$alk$;

COMMENT ON FUNCTION @schema@.enqueue(
    text, bytea, bigint, double precision, timestamptz, bigint, double precision,
    double precision, double precision, jsonb, text, double precision, text,
    double precision
) IS 'alkstore_trio Q20.4: enqueue one job in the caller''s transaction; see docs/reference/sql-schema.md';

INSERT INTO @schema@.alk_schema_version (version) VALUES (16);
