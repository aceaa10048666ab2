-- Migration 14: the enqueue function (Q20.4) takes keep_completed_s (Q19.2), so a job
-- enqueued from SQL can be kept after its ack, read back with its result and waited for
-- (Q19.4), as a job enqueued by a store handle with QueueOpts(keep_completed_s=...) is.
-- The schema placeholder is replaced by the quoted schema name.
--
--   SELECT * FROM @schema@.enqueue('reports', '\x00'::bytea, keep_completed_s => 3600);
--
-- A new parameter changes the function's signature, so the function of migration 10 is
-- dropped and created again, with that parameter last (calls by position or by name that
-- worked before work the same: it defaults to NULL, not kept) and one more check: NULL
-- or a duration >= 0, finite, at most 100 years, as QueueOpts checks it. Everything else
-- is migration 10's function as it was. DROP and CREATE run in the migration's one
-- transaction: no caller ever sees the schema without the function. A trigger or a
-- PL/pgSQL function that calls it resolves it by name at its next call and gets this
-- one; a view or an SQL-language function that names it would block the drop (migrate
-- then fails and changes nothing: drop that object first).
DROP FUNCTION @schema@.enqueue(
    text, bytea, bigint, double precision, timestamptz, bigint, double precision,
    double precision, double precision, jsonb, text, double precision, text
);

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
