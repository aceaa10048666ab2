-- The contract in SQL: one named block per operation, loaded once per store.
-- The schema placeholder is replaced by the quoted schema name; %(name)s are bound parameters
-- (sent separately from the query text, never interpolated), %(name)b the same sent in
-- binary: the payloads, which the text format would escape one by one (for enqueue_many
-- of 1,000 jobs that escaping was 20 % of the client's CPU).
-- Every statement runs alone in autocommit mode (or inside the caller's transaction
-- for tx_enqueue) and reads the clock through the schema's alk_now(): the database's
-- clock, once per statement, never the client's.
--
-- The validity predicate V (Q4) appears verbatim in every handle operation:
--   state = 'processing' AND attempts = <token> AND claim_expires_at >= <now>
-- A single UPDATE/DELETE with V in its WHERE clause locks the row and re-checks V on
-- its latest version (READ COMMITTED re-evaluation), so the check and the effect are
-- one atomic unit: a concurrent reclaim either happened first (V fails) or waits.
-- Statements that find rows by id write V as `(V) IS TRUE`: the same truth value, but
-- it no longer matches the partial lease index's predicate, so the planner cannot pick
-- a scan of every lease in the queue over the primary key (it did, with thousands of
-- leases in flight and statistics taken while there were few).
--
-- D27: every statement that moves jobs out of the live table (acks, dead-letter moves,
-- cancel) adds their number, in the same statement, to its queue's counter row for this
-- session's shard (pg_backend_pid() mod 64) in queue_counters: a CTE `counted` with an
-- INSERT ... ON CONFLICT DO UPDATE, which writes nothing when nothing moved. It reads
-- the moved rows to count them, so it locks its one counter row only after the
-- statement holds every job row it moves (no lock-order cycle with another statement),
-- and keeps that lock until the commit. Sessions whose backends share a shard then
-- commit one after the other; the others never wait for each other.
--
-- D30: a job's headers are a jsonb object, kept for the job's life like the payload: the
-- enqueue writes them (one value for every row of a statement), every dead-letter move
-- copies them into dead_jobs and every redrive back. Statements that return jobs (claim,
-- ack_claims_and_claim, get_job, find_job, list_live, list_dead) return the Job fields
-- in one order: the columns of jobs up to last_error, then nullif(headers, '{}'), then
-- died_at. The nullif makes a job without headers (the usual case) a NULL, which the
-- client turns into no headers without parsing any JSON. They name every column:
-- their results never change shape when a migration adds a column to a table.

-- name: enqueue
-- Q2: one row per payload (in order), resolved with one clock read, all with the same
-- headers (D30: JSON text, '{}' for none); the wake is a NOTIFY, delivered at commit.
WITH inserted AS (
    INSERT INTO @schema@.jobs (
        queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, headers
    )
    SELECT
        %(queue)s::text, p.payload, %(priority)s::integer, 'pending', 0, %(max_attempts)s::integer,
        CASE
            WHEN %(delay_s)s::float8 IS NOT NULL THEN t.now + %(delay_s)s::float8 * interval '1 second'
            ELSE coalesce(%(run_at)s::timestamptz, t.now)
        END,
        t.now, %(visibility_timeout_s)s::float8, %(backoff_base_s)s::float8,
        t.now + %(expires_in_s)s::float8 * interval '1 second', %(headers)s::jsonb
    FROM (SELECT @schema@.alk_now() AS now) AS t,
        unnest(%(payloads)b::bytea[]) WITH ORDINALITY AS p (payload, ord)
    ORDER BY p.ord
    RETURNING id
)
SELECT inserted.id
FROM inserted, (SELECT pg_catalog.pg_notify(%(channel)s::text, '')) AS wake
ORDER BY inserted.id;

-- name: enqueue_one
-- Q2 for a single payload: the same row and wake as `enqueue`, without the unnest and
-- its sorts (the common case of one job per call).
WITH inserted AS (
    INSERT INTO @schema@.jobs (
        queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, headers
    )
    SELECT
        %(queue)s::text, %(payload)b::bytea, %(priority)s::integer, 'pending', 0,
        %(max_attempts)s::integer,
        CASE
            WHEN %(delay_s)s::float8 IS NOT NULL
                THEN t.now + %(delay_s)s::float8 * interval '1 second'
            ELSE coalesce(%(run_at)s::timestamptz, t.now)
        END,
        t.now, %(visibility_timeout_s)s::float8, %(backoff_base_s)s::float8,
        t.now + %(expires_in_s)s::float8 * interval '1 second', %(headers)s::jsonb
    FROM (SELECT @schema@.alk_now() AS now) AS t
    RETURNING id
)
SELECT inserted.id
FROM inserted, (SELECT pg_catalog.pg_notify(%(channel)s::text, '')) AS wake;

-- name: claim
-- Q3: the pre-claim sweep (its dead-letter moves counted: D27) and up to n claims, in
-- one statement (one transaction). Candidates come from two index walks (ready pending
-- rows; lapsed leases with attempts left), each locked with SKIP LOCKED so concurrent
-- claimers never wait for or share a row; the best n of them are claimed. The
-- MATERIALIZED CTEs make each walk run exactly once, so no more than n rows are ever
-- handed out.
WITH spent AS MATERIALIZED (
    SELECT j.id FROM @schema@.jobs AS j
    WHERE j.queue = %(queue)s::text AND j.state = 'processing'
        AND j.claim_expires_at < @schema@.alk_now() AND j.attempts >= j.max_attempts
    FOR UPDATE OF j SKIP LOCKED
),
swept AS (
    DELETE FROM @schema@.jobs AS j USING spent WHERE j.id = spent.id
    RETURNING j.*
),
buried AS (
    INSERT INTO @schema@.dead_jobs (
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, last_error, died_at, headers
    )
    SELECT
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, 'max attempts exceeded', @schema@.alk_now(), headers
    FROM swept
),
ready AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at FROM @schema@.jobs AS j
    WHERE j.queue = %(queue)s::text AND j.state = 'pending' AND j.run_at <= @schema@.alk_now()
        AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(n)s::bigint
    FOR UPDATE OF j SKIP LOCKED
),
lapsed AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at FROM @schema@.jobs AS j
    WHERE j.queue = %(queue)s::text AND j.state = 'processing'
        AND j.claim_expires_at < @schema@.alk_now() AND j.attempts < j.max_attempts
        AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(n)s::bigint
    FOR UPDATE OF j SKIP LOCKED
),
picked AS MATERIALIZED (
    SELECT c.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM lapsed) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT %(n)s::bigint
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, dead_lettered)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), m.n
    FROM (SELECT count(*) AS n FROM swept) AS m
    WHERE m.n > 0
    ON CONFLICT (queue, shard) DO UPDATE
        SET dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered
)
UPDATE @schema@.jobs AS j SET
    state = 'processing',
    attempts = j.attempts + 1,
    claimed_by = %(worker_id)s::text,
    claimed_at = @schema@.alk_now(),
    claim_expires_at = @schema@.alk_now() + j.visibility_timeout_s * interval '1 second'
FROM picked
WHERE j.id = picked.id
RETURNING
    j.id, j.queue, j.payload, j.priority, j.state, j.attempts, j.max_attempts, j.run_at,
    j.enqueued_at, j.visibility_timeout_s, j.backoff_base_s, j.expires_at, j.claimed_by,
    j.claimed_at, j.claim_expires_at, j.last_error, nullif(j.headers, '{}'::jsonb),
    NULL::timestamptz;

-- name: heartbeat
-- Q4: an absolute reset of a valid claim's deadline.
UPDATE @schema@.jobs SET
    claim_expires_at = @schema@.alk_now()
        + coalesce(%(extend_s)s::float8, visibility_timeout_s) * interval '1 second'
WHERE id = %(id)s::bigint AND queue = %(queue)s::text
    AND (state = 'processing' AND attempts = %(token)s::integer
        AND claim_expires_at >= @schema@.alk_now()) IS TRUE
RETURNING id;

-- name: heartbeat_claims
-- R2: renew each listed (id, claim token) pair of this queue whose claim is valid (Q4's V),
-- in one statement (an absolute reset, as heartbeat); the ids renewed. The pairs drive
-- primary-key lookups.
UPDATE @schema@.jobs AS j SET
    claim_expires_at = @schema@.alk_now()
        + coalesce(%(extend_s)s::float8, j.visibility_timeout_s) * interval '1 second'
FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[]) AS c(id, token)
WHERE j.id = c.id AND j.queue = %(queue)s::text
    AND (j.state = 'processing' AND j.attempts = c.token
        AND j.claim_expires_at >= @schema@.alk_now()) IS TRUE
RETURNING j.id;

-- name: ack
-- Q4: delete a validly claimed row; count it as acked (D27).
WITH acked AS (
    DELETE FROM @schema@.jobs
    WHERE id = %(id)s::bigint AND queue = %(queue)s::text
        AND (state = 'processing' AND attempts = %(token)s::integer
            AND claim_expires_at >= @schema@.alk_now()) IS TRUE
    RETURNING id
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, acked)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), 1 FROM acked
    ON CONFLICT (queue, shard) DO UPDATE SET acked = c.acked + EXCLUDED.acked
)
SELECT id FROM acked;

-- name: retry
-- Q4: below budget, back to pending after delay_s; at budget (attempts >= max_attempts),
-- a dead-letter move with error (default 'max attempts exceeded'), counted (D27). The
-- row is locked and V checked once, in the first CTE; the two branches then act on that
-- one row.
WITH target AS MATERIALIZED (
    SELECT id, attempts >= max_attempts AS spent FROM @schema@.jobs
    WHERE id = %(id)s::bigint AND queue = %(queue)s::text
        AND (state = 'processing' AND attempts = %(token)s::integer
            AND claim_expires_at >= @schema@.alk_now()) IS TRUE
    FOR UPDATE
),
moved AS (
    DELETE FROM @schema@.jobs AS j USING target AS t WHERE j.id = t.id AND t.spent
    RETURNING j.*
),
buried AS (
    INSERT INTO @schema@.dead_jobs (
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, last_error, died_at, headers
    )
    SELECT
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, coalesce(%(error)s::text, 'max attempts exceeded'),
        @schema@.alk_now(), headers
    FROM moved
    RETURNING id
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, dead_lettered)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), 1 FROM buried
    ON CONFLICT (queue, shard) DO UPDATE
        SET dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered
),
requeued AS (
    UPDATE @schema@.jobs AS j SET
        state = 'pending',
        run_at = @schema@.alk_now() + coalesce(%(delay_s)s::float8, 0) * interval '1 second',
        last_error = %(error)s::text,
        claimed_by = NULL,
        claimed_at = NULL,
        claim_expires_at = NULL
    FROM target AS t
    WHERE j.id = t.id AND NOT t.spent
    RETURNING j.id
)
SELECT id FROM buried UNION ALL SELECT id FROM requeued;

-- name: bury
-- Q4 fail: a dead-letter move of a validly claimed row: the live row is deleted and the
-- dead row written by one statement, so both or neither happen; counted (D27).
WITH moved AS (
    DELETE FROM @schema@.jobs
    WHERE id = %(id)s::bigint AND queue = %(queue)s::text
        AND (state = 'processing' AND attempts = %(token)s::integer
            AND claim_expires_at >= @schema@.alk_now()) IS TRUE
    RETURNING *
),
buried AS (
    INSERT INTO @schema@.dead_jobs (
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, last_error, died_at, headers
    )
    SELECT
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, %(error)s::text, @schema@.alk_now(), headers
    FROM moved
    RETURNING id
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, dead_lettered)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), 1 FROM buried
    ON CONFLICT (queue, shard) DO UPDATE
        SET dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered
)
SELECT id FROM buried;

-- name: ack_batch
-- Q6: delete each listed, ackable row of this queue (no token); count them, as acked
-- (D27).
WITH deleted AS (
    DELETE FROM @schema@.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND queue = %(queue)s::text
        AND (state = 'processing' AND claim_expires_at >= @schema@.alk_now()) IS TRUE
    RETURNING 1
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, acked)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), m.n
    FROM (SELECT count(*) AS n FROM deleted) AS m
    WHERE m.n > 0
    ON CONFLICT (queue, shard) DO UPDATE SET acked = c.acked + EXCLUDED.acked
)
SELECT count(*) FROM deleted;

-- name: ack_claims
-- R2: delete each listed (id, claim token) pair of this queue whose claim is valid (Q4's V),
-- in one statement, counted as acked (D27); the ids deleted. The pairs drive primary-key
-- lookups.
WITH acked AS (
    DELETE FROM @schema@.jobs
    WHERE queue = %(queue)s::text
        AND (id, attempts) IN (SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[]))
        AND (state = 'processing' AND claim_expires_at >= @schema@.alk_now()) IS TRUE
    RETURNING id
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, acked)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), m.n
    FROM (SELECT count(*) AS n FROM acked) AS m
    WHERE m.n > 0
    ON CONFLICT (queue, shard) DO UPDATE SET acked = c.acked + EXCLUDED.acked
)
SELECT id FROM acked;

-- name: ack_claims_and_claim
-- R2 (D21): ack_claims, then claim (the pre-claim sweep and up to n claims), in one
-- statement: one transaction, one clock read, one round trip for a worker's finished
-- jobs and its next jobs. `acked` is ack_claims' CTE verbatim; spent … picked and the
-- UPDATE are the claim block's (a test checks both); `counted` adds the acks and the
-- pre-claim sweep's dead-letter moves to one counter row (D27: one upsert, as one
-- statement may update a row only once). All CTEs see one snapshot, so the claim
-- cannot see the acked rows gone; it needs not: an acked row is processing with
-- claim_expires_at >= alk_now(), which is never ready (pending) nor lapsed or spent
-- (claim_expires_at < alk_now()) at the same alk_now(), so the two sets are disjoint
-- and the claim hands out exactly what a claim after the acks would. The acks come first
-- in the UNION ALL, so their DELETE has finished (and waited for any row lock it had to)
-- before the claim locks anything. Rows: (acked id, NULLs) per acked job, then (NULL,
-- job columns, as claim returns them) per claimed job.
WITH acked AS (
    DELETE FROM @schema@.jobs
    WHERE queue = %(queue)s::text
        AND (id, attempts) IN (SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[]))
        AND (state = 'processing' AND claim_expires_at >= @schema@.alk_now()) IS TRUE
    RETURNING id
),
spent AS MATERIALIZED (
    SELECT j.id FROM @schema@.jobs AS j
    WHERE j.queue = %(queue)s::text AND j.state = 'processing'
        AND j.claim_expires_at < @schema@.alk_now() AND j.attempts >= j.max_attempts
    FOR UPDATE OF j SKIP LOCKED
),
swept AS (
    DELETE FROM @schema@.jobs AS j USING spent WHERE j.id = spent.id
    RETURNING j.*
),
buried AS (
    INSERT INTO @schema@.dead_jobs (
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, last_error, died_at, headers
    )
    SELECT
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, 'max attempts exceeded', @schema@.alk_now(), headers
    FROM swept
),
ready AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at FROM @schema@.jobs AS j
    WHERE j.queue = %(queue)s::text AND j.state = 'pending' AND j.run_at <= @schema@.alk_now()
        AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(n)s::bigint
    FOR UPDATE OF j SKIP LOCKED
),
lapsed AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at FROM @schema@.jobs AS j
    WHERE j.queue = %(queue)s::text AND j.state = 'processing'
        AND j.claim_expires_at < @schema@.alk_now() AND j.attempts < j.max_attempts
        AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT %(n)s::bigint
    FOR UPDATE OF j SKIP LOCKED
),
picked AS MATERIALIZED (
    SELECT c.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM lapsed) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT %(n)s::bigint
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, acked, dead_lettered)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), a.n, d.n
    FROM (SELECT count(*) AS n FROM acked) AS a, (SELECT count(*) AS n FROM swept) AS d
    WHERE a.n + d.n > 0
    ON CONFLICT (queue, shard) DO UPDATE SET
        acked = c.acked + EXCLUDED.acked,
        dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered
),
claimed AS (
    UPDATE @schema@.jobs AS j SET
        state = 'processing',
        attempts = j.attempts + 1,
        claimed_by = %(worker_id)s::text,
        claimed_at = @schema@.alk_now(),
        claim_expires_at = @schema@.alk_now() + j.visibility_timeout_s * interval '1 second'
    FROM picked
    WHERE j.id = picked.id
    RETURNING
        j.id, j.queue, j.payload, j.priority, j.state, j.attempts, j.max_attempts, j.run_at,
        j.enqueued_at, j.visibility_timeout_s, j.backoff_base_s, j.expires_at, j.claimed_by,
        j.claimed_at, j.claim_expires_at, j.last_error, nullif(j.headers, '{}'::jsonb),
        NULL::timestamptz
)
SELECT
    acked.id,
    -- A NULL per column of claimed (18): the result has the RETURNING list's shape, not
    -- the table's, so a column a later migration adds to jobs changes no running
    -- statement's result (a prepared statement's result type must not change).
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL
FROM acked
UNION ALL
SELECT NULL, claimed.* FROM claimed;

-- name: retry_claims
-- R2 (D20): retry each listed (id, claim token, error, delay_s) item of this queue whose
-- claim is valid (Q4's V), as retry does, in one statement: at budget a dead-letter move
-- with error (default 'max attempts exceeded'; counted: D27), else back to pending after
-- delay_s.
-- The items drive primary-key lookups; the valid rows are locked (in id order, so two
-- batches never wait on each other in a cycle) and V checked once, in the first CTE.
-- A job listed twice is retried once, by its first valid item. Returns the ordinals
-- (1-based positions) of the items applied.
WITH valid AS MATERIALIZED (
    SELECT j.id, c.ord, c.error, c.delay_s, j.attempts >= j.max_attempts AS spent
    FROM unnest(
        %(ids)s::bigint[], %(tokens)s::integer[], %(errors)s::text[], %(delays)s::float8[]
    ) WITH ORDINALITY AS c (id, token, error, delay_s, ord)
    JOIN @schema@.jobs AS j ON j.id = c.id
    WHERE j.queue = %(queue)s::text
        AND (j.state = 'processing' AND j.attempts = c.token
            AND j.claim_expires_at >= @schema@.alk_now()) IS TRUE
    ORDER BY j.id
    FOR UPDATE OF j
),
target AS MATERIALIZED (
    SELECT DISTINCT ON (id) id, ord, error, delay_s, spent FROM valid ORDER BY id, ord
),
moved AS (
    DELETE FROM @schema@.jobs AS j USING target AS t WHERE j.id = t.id AND t.spent
    RETURNING j.*, t.ord, t.error
),
buried AS (
    INSERT INTO @schema@.dead_jobs (
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, last_error, died_at, headers
    )
    SELECT
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, coalesce(error, 'max attempts exceeded'), @schema@.alk_now(), headers
    FROM moved
    RETURNING id
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, dead_lettered)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), m.n
    FROM (SELECT count(*) AS n FROM buried) AS m
    WHERE m.n > 0
    ON CONFLICT (queue, shard) DO UPDATE
        SET dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered
),
requeued AS (
    UPDATE @schema@.jobs AS j SET
        state = 'pending',
        run_at = @schema@.alk_now() + coalesce(t.delay_s, 0) * interval '1 second',
        last_error = t.error,
        claimed_by = NULL,
        claimed_at = NULL,
        claim_expires_at = NULL
    FROM target AS t
    WHERE j.id = t.id AND NOT t.spent
    RETURNING t.ord
)
SELECT moved.ord FROM moved JOIN buried USING (id)
UNION ALL
SELECT ord FROM requeued;

-- name: fail_claims
-- R2 (D20): fail each listed (id, claim token, error) item of this queue whose claim is
-- valid (Q4's V), as bury does, in one statement: a dead-letter move with error
-- (counted: D27). Locking, primary-key lookups and a job listed twice as in
-- retry_claims. Returns the ordinals of the items applied.
WITH valid AS MATERIALIZED (
    SELECT j.id, c.ord, c.error
    FROM unnest(%(ids)s::bigint[], %(tokens)s::integer[], %(errors)s::text[])
        WITH ORDINALITY AS c (id, token, error, ord)
    JOIN @schema@.jobs AS j ON j.id = c.id
    WHERE j.queue = %(queue)s::text
        AND (j.state = 'processing' AND j.attempts = c.token
            AND j.claim_expires_at >= @schema@.alk_now()) IS TRUE
    ORDER BY j.id
    FOR UPDATE OF j
),
target AS MATERIALIZED (
    SELECT DISTINCT ON (id) id, ord, error FROM valid ORDER BY id, ord
),
moved AS (
    DELETE FROM @schema@.jobs AS j USING target AS t WHERE j.id = t.id
    RETURNING j.*, t.ord, t.error
),
buried AS (
    INSERT INTO @schema@.dead_jobs (
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, last_error, died_at, headers
    )
    SELECT
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, error, @schema@.alk_now(), headers
    FROM moved
    RETURNING id
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, dead_lettered)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), m.n
    FROM (SELECT count(*) AS n FROM buried) AS m
    WHERE m.n > 0
    ON CONFLICT (queue, shard) DO UPDATE
        SET dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered
)
SELECT moved.ord FROM moved JOIN buried USING (id);

-- name: cancel
-- Q7: delete this queue's live row, whatever its state; count it as cancelled (D27).
WITH cancelled AS (
    DELETE FROM @schema@.jobs WHERE id = %(id)s::bigint AND queue = %(queue)s::text
    RETURNING id
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, cancelled)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), 1 FROM cancelled
    ON CONFLICT (queue, shard) DO UPDATE SET cancelled = c.cancelled + EXCLUDED.cancelled
)
SELECT id FROM cancelled;

-- name: get_job
-- Q8: this queue's row, live or dead.
SELECT
    id, queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, nullif(headers, '{}'::jsonb) AS headers,
    NULL::timestamptz AS died_at
FROM @schema@.jobs WHERE id = %(id)s::bigint AND queue = %(queue)s::text
UNION ALL
SELECT
    id, queue, payload, priority, 'dead', attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, nullif(headers, '{}'::jsonb) AS headers, died_at
FROM @schema@.dead_jobs WHERE id = %(id)s::bigint AND queue = %(queue)s::text;

-- name: sweep_expired
-- Q9: expired live rows to dead ('expired'; counted: D27), then purge dead rows past
-- retention (retention_s NULL: keep forever). Rows buried by this statement are not
-- visible to its purge, and could not qualify anyway (they died now).
WITH expired AS (
    DELETE FROM @schema@.jobs
    WHERE queue = %(queue)s::text AND expires_at < @schema@.alk_now()
    RETURNING *
),
buried AS (
    INSERT INTO @schema@.dead_jobs (
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, last_error, died_at, headers
    )
    SELECT
        id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, 'expired', @schema@.alk_now(), headers
    FROM expired
    RETURNING 1
),
counted AS (
    INSERT INTO @schema@.queue_counters AS c (queue, shard, dead_lettered)
    SELECT %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), m.n
    FROM (SELECT count(*) AS n FROM buried) AS m
    WHERE m.n > 0
    ON CONFLICT (queue, shard) DO UPDATE
        SET dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered
),
purged AS (
    DELETE FROM @schema@.dead_jobs
    WHERE queue = %(queue)s::text AND %(retention_s)s::float8 IS NOT NULL
        AND died_at < @schema@.alk_now() - %(retention_s)s::float8 * interval '1 second'
    RETURNING 1
)
SELECT (SELECT count(*) FROM buried), (SELECT count(*) FROM purged);

-- name: schema_version
SELECT version FROM @schema@.alk_schema_version;

-- name: find_job
-- D26: the row with this id, live or dead, of any queue (primary-key lookups).
SELECT
    id, queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, nullif(headers, '{}'::jsonb) AS headers,
    NULL::timestamptz AS died_at
FROM @schema@.jobs WHERE id = %(id)s::bigint
UNION ALL
SELECT
    id, queue, payload, priority, 'dead', attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, nullif(headers, '{}'::jsonb) AS headers, died_at
FROM @schema@.dead_jobs WHERE id = %(id)s::bigint;

-- name: list_live
-- D26: a page of this queue's live rows in one state, by id (a primary-key walk that
-- stops after limit rows).
SELECT
    id, queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, nullif(headers, '{}'::jsonb) AS headers,
    NULL::timestamptz AS died_at
FROM @schema@.jobs
WHERE queue = %(queue)s::text AND state = %(state)s::text AND id > %(after_id)s::bigint
ORDER BY id
LIMIT %(limit)s::bigint;

-- name: list_dead
-- D26: a page of this queue's dead rows, by id.
SELECT
    id, queue, payload, priority, 'dead', attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, nullif(headers, '{}'::jsonb) AS headers, died_at
FROM @schema@.dead_jobs
WHERE queue = %(queue)s::text AND id > %(after_id)s::bigint
ORDER BY id
LIMIT %(limit)s::bigint;

-- name: stats
-- D22: per queue, at one clock read: ready and delayed pending rows and the oldest ready
-- run_at, processing rows and the lapsed ones, dead rows, and the queue's counters
-- summed over their shards (D27); plus the ids issued so far (the identity sequence;
-- D23). With queue NULL, the queues are found by three skip scans (one index probe per
-- distinct queue of the claim, lease and retention indexes: no walk of every row) and
-- in the small counter table; with a queue, only that one (listed even when empty).
-- The counts then walk each queue's entries in those partial indexes: counting is
-- proportional to the rows counted, but never reads the table's payloads. The outer
-- LEFT JOIN keeps one row (the clock) when no queue is listed.
WITH RECURSIVE
pending_queues (queue) AS (
    (SELECT j.queue FROM @schema@.jobs AS j
     WHERE j.state = 'pending' AND %(queue)s::text IS NULL
     ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM @schema@.jobs AS j
            WHERE j.state = 'pending' AND j.queue > p.queue
            ORDER BY j.queue LIMIT 1)
    FROM pending_queues AS p WHERE p.queue IS NOT NULL
),
processing_queues (queue) AS (
    (SELECT j.queue FROM @schema@.jobs AS j
     WHERE j.state = 'processing' AND %(queue)s::text IS NULL
     ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM @schema@.jobs AS j
            WHERE j.state = 'processing' AND j.queue > p.queue
            ORDER BY j.queue LIMIT 1)
    FROM processing_queues AS p WHERE p.queue IS NOT NULL
),
dead_queues (queue) AS (
    (SELECT d.queue FROM @schema@.dead_jobs AS d
     WHERE %(queue)s::text IS NULL
     ORDER BY d.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT d.queue FROM @schema@.dead_jobs AS d
            WHERE d.queue > p.queue
            ORDER BY d.queue LIMIT 1)
    FROM dead_queues AS p WHERE p.queue IS NOT NULL
),
queues (queue) AS (
    SELECT %(queue)s::text WHERE %(queue)s::text IS NOT NULL
    UNION SELECT queue FROM pending_queues WHERE queue IS NOT NULL
    UNION SELECT queue FROM processing_queues WHERE queue IS NOT NULL
    UNION SELECT queue FROM dead_queues WHERE queue IS NOT NULL
    UNION SELECT f.queue FROM @schema@.queue_counters AS f WHERE %(queue)s::text IS NULL
),
clock AS MATERIALIZED (
    SELECT
        @schema@.alk_now() AS now,
        (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END
         FROM @schema@.jobs_id_seq AS s) AS issued
)
SELECT c.now, c.issued, x.queue, x.ready, x.delayed, x.oldest_ready, x.processing,
    x.reclaimable, x.dead, x.acked, x.dead_lettered, x.cancelled
FROM clock AS c
LEFT JOIN LATERAL (
    SELECT q.queue, p.ready, p.delayed, p.oldest_ready, l.processing, l.reclaimable,
        d.dead, f.acked, f.dead_lettered, f.cancelled
    FROM queues AS q
    CROSS JOIN LATERAL (
        SELECT
            count(*) FILTER (WHERE j.run_at <= c.now) AS ready,
            count(*) FILTER (WHERE j.run_at > c.now) AS delayed,
            min(j.run_at) FILTER (WHERE j.run_at <= c.now) AS oldest_ready
        FROM @schema@.jobs AS j
        WHERE j.queue = q.queue AND j.state = 'pending'
    ) AS p
    CROSS JOIN LATERAL (
        SELECT
            count(*) AS processing,
            count(*) FILTER (WHERE j.claim_expires_at < c.now) AS reclaimable
        FROM @schema@.jobs AS j
        WHERE j.queue = q.queue AND j.state = 'processing'
    ) AS l
    CROSS JOIN LATERAL (
        SELECT count(*) AS dead FROM @schema@.dead_jobs AS d WHERE d.queue = q.queue
    ) AS d
    CROSS JOIN LATERAL (
        SELECT
            coalesce(sum(f.acked), 0)::bigint AS acked,
            coalesce(sum(f.dead_lettered), 0)::bigint AS dead_lettered,
            coalesce(sum(f.cancelled), 0)::bigint AS cancelled
        FROM @schema@.queue_counters AS f
        WHERE f.queue = q.queue
    ) AS f
) AS x ON true
ORDER BY x.queue;

-- name: requeue_dead
-- D24: redrive the listed dead rows of this queue: back to jobs as pending, ready now,
-- attempts 0, enqueued now, expires_at at its old distance from enqueued_at; claim
-- fields and died_at cleared, last_error kept. Ids that are not dead rows of this queue
-- match nothing. The dead rows are found by primary key; the live row keeps its id
-- (OVERRIDING SYSTEM VALUE: the identity sequence is not used). The queue is woken
-- (NOTIFY, at commit) when any row moved. Returns the count moved.
WITH moved AS (
    DELETE FROM @schema@.dead_jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND queue = %(queue)s::text
    RETURNING *
),
revived AS (
    INSERT INTO @schema@.jobs (
        id, queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, last_error, headers
    )
    OVERRIDING SYSTEM VALUE
    SELECT
        m.id, m.queue, m.payload, m.priority, 'pending', 0, m.max_attempts, t.now, t.now,
        m.visibility_timeout_s, m.backoff_base_s, t.now + (m.expires_at - m.enqueued_at),
        NULL, NULL, NULL, m.last_error, m.headers
    FROM moved AS m, (SELECT @schema@.alk_now() AS now) AS t
    RETURNING 1
),
woken AS (
    SELECT pg_catalog.pg_notify(%(channel)s::text, '')
    FROM (SELECT 1 FROM revived LIMIT 1) AS any_row
)
SELECT (SELECT count(*) FROM revived), (SELECT count(*) FROM woken);

-- name: requeue_dead_all
-- D24: requeue_dead for every dead row of this queue (a walk of the queue's entries in
-- the retention index).
WITH moved AS (
    DELETE FROM @schema@.dead_jobs
    WHERE queue = %(queue)s::text
    RETURNING *
),
revived AS (
    INSERT INTO @schema@.jobs (
        id, queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, last_error, headers
    )
    OVERRIDING SYSTEM VALUE
    SELECT
        m.id, m.queue, m.payload, m.priority, 'pending', 0, m.max_attempts, t.now, t.now,
        m.visibility_timeout_s, m.backoff_base_s, t.now + (m.expires_at - m.enqueued_at),
        NULL, NULL, NULL, m.last_error, m.headers
    FROM moved AS m, (SELECT @schema@.alk_now() AS now) AS t
    RETURNING 1
),
woken AS (
    SELECT pg_catalog.pg_notify(%(channel)s::text, '')
    FROM (SELECT 1 FROM revived LIMIT 1) AS any_row
)
SELECT (SELECT count(*) FROM revived), (SELECT count(*) FROM woken);

-- name: purge_dead
-- D25: delete this queue's dead rows with died_at + older_than_s < now, or every one
-- when older_than_s is NULL (the bound is then +infinity); the count.
WITH purged AS (
    DELETE FROM @schema@.dead_jobs
    WHERE queue = %(queue)s::text
        AND died_at < coalesce(
            @schema@.alk_now() - %(older_than_s)s::float8 * interval '1 second',
            'infinity'::timestamptz
        )
    RETURNING 1
)
SELECT count(*) FROM purged;

-- name: count_dead
-- D29: purge_dead's dry run: how many rows purge_dead would delete now (same predicate,
-- same retention-index walk), deleting nothing.
SELECT count(*) FROM @schema@.dead_jobs
WHERE queue = %(queue)s::text
    AND died_at < coalesce(
        @schema@.alk_now() - %(older_than_s)s::float8 * interval '1 second',
        'infinity'::timestamptz
    );
