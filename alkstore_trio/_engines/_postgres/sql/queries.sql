-- The contract in SQL: one named block per operation, loaded once per store.
-- The schema placeholder is replaced by the quoted schema name; %(name)s are bound parameters
-- (sent separately from the query text, never interpolated), %(name)b the same sent in
-- binary: the payloads, which the text format would escape one by one (for enqueue_many
-- of 1,000 jobs that escaping was 20 % of the client's CPU).
-- Every statement runs alone in autocommit mode (or inside the caller's transaction
-- for tx_enqueue) and reads the clock through the schema's alk_now(): the database's
-- clock, once per statement, never the client's.
--
-- Statements are named after the contract's operations (claim, heartbeat, ack, retry,
-- fail, cancel, sweep_expired, ...). What several statements share is written once, as
-- a fragment (the blocks at the top): `-- fragment: dead_letter(moved, last_error)`
-- declares one with two slots, `{dead_letter(moved = swept, last_error = 'expired')}`
-- includes it, and `{moved}` inside its body is a slot. The loader expands every
-- reference once, when it reads this file: the server receives plain SQL, the same text
-- as if each statement were written out (see docs/reference/sql-schema.md).
--
-- The validity predicate V (Q4) appears verbatim in every handle operation:
--   state = 'processing' AND claim_token = <token> AND claim_expires_at >= <now>
-- (Q19.8: the claim token is drawn for each claim, never the attempt count, which a
-- redrive resets and a release gives back).
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
-- session's shard: a CTE `counted` that is the count_moves fragment.
--
-- D30: a job's headers are a jsonb object, kept for the job's life like the payload: the
-- enqueue writes them (one value for every row of a statement), every dead-letter move
-- copies them into dead_jobs and every redrive back. Statements that return jobs (claim,
-- ack_claims_and_claim, get_job, find_job, list_live, list_dead) return the job_fields
-- fragment. They name every column: their results never change shape when a migration
-- adds a column to a table.

-- fragment: job_fields(state, died_at, payload = j.payload)
-- D30: the Job fields, in the order _backend._job reads them: the columns of jobs up to
-- last_error (with the row's state given by `state`), then nullif(headers, '{}'), then
-- `died_at`, then the unique key (Q15), the claim token (Q19.8), the concurrency key
-- (Q18.8) and the stamp keep_completed_s (Q19.2). The rows are `j`.
-- The nullif makes a job without
-- headers (the usual case) a NULL, which the client turns into no headers without
-- parsing any JSON. `payload` is the payload column's expression (the reads of one job
-- send a large payload apart, in slices: see get_job).
j.id, j.queue, {payload}, j.priority, {state} AS state, j.attempts, j.max_attempts,
j.run_at, j.enqueued_at, j.visibility_timeout_s, j.backoff_base_s, j.expires_at,
j.claimed_by, j.claimed_at, j.claim_expires_at, j.last_error,
nullif(j.headers, '{}'::jsonb) AS headers, {died_at} AS died_at, j.unique_key,
j.claim_token, j.concurrency_key, j.keep_completed_s

-- fragment: new_jobs(payload, key = NULL::text, group = %(concurrency_key)s::text)
-- Q2: the insert of new pending jobs, resolved at the clock read t.now, one per row of
-- the FROM clause that follows (which names `t`); `payload` is each row's payload.
-- Q15: `key` is the rows' unique key (NULL for none: a keyless row has no entry in the
-- unique index). Q18.8: `group` is each row's concurrency key (NULL for none: no entry
-- in the per-key indexes). The delay is never negative (Q2.1: the store sends
-- max(delay_s, 0)).
INSERT INTO @schema@.jobs (
    queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, headers, unique_key, concurrency_key,
    keep_completed_s
)
SELECT
    %(queue)s::text, {payload}, %(priority)s::integer, 'pending', 0,
    %(max_attempts)s::integer,
    CASE
        WHEN %(delay_s)s::float8 IS NOT NULL
            THEN t.now + %(delay_s)s::float8 * interval '1 second'
        ELSE coalesce(%(run_at)s::timestamptz, t.now)
    END,
    t.now, %(visibility_timeout_s)s::float8, %(backoff_base_s)s::float8,
    t.now + %(expires_in_s)s::float8 * interval '1 second', %(headers)s::jsonb, {key},
    {group}, %(keep_completed_s)s::float8

-- fragment: dead_letter(moved, last_error)
-- Q4/D1: the dead-letter insert: one dead row per row of the CTE `moved` (a DELETE of
-- jobs rows RETURNING them: the live rows are deleted and the dead ones written by one
-- statement, so both or neither happen). The claim fields stay as they were; last_error
-- is `last_error` (an expression over moved's columns), died_at is now. The ids written.
INSERT INTO @schema@.dead_jobs (
    id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, died_at, headers, unique_key, concurrency_key, claim_token,
    keep_completed_s, progress
)
SELECT
    id, queue, payload, priority, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, {last_error}, @schema@.alk_now(), headers, unique_key, concurrency_key,
    claim_token, keep_completed_s, progress
FROM {moved}
RETURNING id

-- fragment: keep_rows(moved, result = NULL::bytea, state = 'completed')
-- Q19.2: the history insert of an ack: one completed row per row of the CTE `moved` (a
-- DELETE of jobs rows RETURNING them, as dead_letter's) whose stamp keeps it; the other
-- rows are simply gone. completed_at is now, purge_at now + keep_completed_s; `result`
-- is the handler's result (Q19.1), an expression over moved's columns; `state` is
-- 'cancelled' for Q19.5's finalization (finalize_cancelled). The ids kept.
INSERT INTO @schema@.completed_jobs (
    id, queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, headers, unique_key, concurrency_key, claim_token,
    keep_completed_s, completed_at, purge_at, result, progress
)
SELECT
    id, queue, payload, priority, {state}, attempts, max_attempts, run_at, enqueued_at,
    visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
    claim_expires_at, last_error, headers, unique_key, concurrency_key, claim_token,
    keep_completed_s,
    @schema@.alk_now(),
    @schema@.alk_now() + keep_completed_s * interval '1 second',
    {result}, progress
FROM {moved}
WHERE keep_completed_s IS NOT NULL
RETURNING id

-- fragment: count_moves(moves, acked = 0, dead_lettered = 0, cancelled = 0)
-- D27: add the statement's moves to its queue's counter row for this session's shard
-- (pg_backend_pid() mod 64) in queue_counters; nothing is written when nothing moved.
-- `moves` is what the counts are selected from: for a statement that moves at most one
-- job, the CTE of the moved row, with a count of 1 (`moves = acked, acked = 1`); else one
-- row of counts that exists only when something moved (`moves = (SELECT count(*) AS n
-- FROM dead) AS m WHERE m.n > 0, dead_lettered = m.n`). Never one row per job of a
-- batch: a statement may update the counter row only once. (Counts as scalar
-- subqueries in the select list, or a count where a row is enough, made the hot
-- statements measurably slower to plan.)
-- The counts read the moved rows, so the upsert locks its one counter row only after the
-- statement holds every job row it moves (no lock-order cycle with another statement),
-- and keeps that lock until the commit. Sessions whose backends share a shard then
-- commit one after the other; the others never wait for each other.
INSERT INTO @schema@.queue_counters AS c (queue, shard, acked, dead_lettered, cancelled)
SELECT
    %(queue)s::text, pg_catalog.mod(pg_catalog.pg_backend_pid(), 64), {acked},
    {dead_lettered}, {cancelled}
FROM {moves}
ON CONFLICT (queue, shard) DO UPDATE SET
    acked = c.acked + EXCLUDED.acked,
    dead_lettered = c.dead_lettered + EXCLUDED.dead_lettered,
    cancelled = c.cancelled + EXCLUDED.cancelled

-- fragment: notify_done(rows)
-- Q19.4: announce the ids of the CTE `rows` (finalized jobs: kept completions, kept or
-- unkept cancels, dead-letter moves) on the queue's done channel, at commit: one
-- notification per group of up to 400 ids, comma-separated and ascending (at most
-- 400 * 20 - 1 = 7,999 bytes: under PostgreSQL's 8,000-byte payload limit). None when
-- `rows` is empty: a statement that finalized nothing sends nothing and takes no
-- notification lock at its commit. A statement includes it as a CTE that its last
-- SELECT reads (a SELECT in WITH that nothing reads is never run).
SELECT pg_catalog.pg_notify(
    %(done_channel)s::text, pg_catalog.string_agg(d.id::text, ',' ORDER BY d.id)
)
FROM (
    SELECT r.id, (pg_catalog.row_number() OVER (ORDER BY r.id) - 1) / 400 AS grp
    FROM {rows} AS r
) AS d
GROUP BY d.grp

-- fragment: claim_gate
-- Q18: the queue's controls, read once in the statement's snapshot (see set_paused for
-- why that snapshot is recent enough): the claim is `open` when the queue is neither
-- paused nor limited. A limited queue (Q18.7-Q18.9) is claimed only by claim_limited:
-- this statement locks and hands out nothing (the sweep still runs) and answers one
-- marker row, so the engine claims again with claim_limited (and goes on doing so).
gate AS MATERIALIZED (
    SELECT
        NOT coalesce(pg_catalog.bool_or(k.paused OR k.limited), false) AS open,
        coalesce(pg_catalog.bool_or(k.limited), false) AS limited
    FROM @schema@.queue_controls AS k WHERE k.queue = %(queue)s::text
)

-- fragment: claim_candidates(walk = %(n)s::bigint, take = %(n)s::bigint)
-- Q3 steps 1 and 2, as CTEs after the CTE `gate` (its `open`): the pre-claim sweep
-- (`swept`, moved to dead by `dead`) and the rows to claim (`picked`). Candidates come
-- from two index walks (ready pending rows; lapsed leases with attempts left) of up to
-- `walk` rows each, each locked with SKIP LOCKED so concurrent claimers never wait for
-- or share a row; the best `take` of them are picked. The MATERIALIZED CTEs make each
-- walk run exactly once, so no more than `take` rows are ever handed out. Both walks are
-- gated by `open`: a closed gate locks and hands out nothing (the sweep still runs).
{claim_walks(walk = {walk})},
picked AS MATERIALIZED (
    SELECT c.id FROM (SELECT * FROM ready UNION ALL SELECT * FROM lapsed) AS c
    ORDER BY {claim_order(alias = c)}
    LIMIT {take}
)

-- fragment: claim_walks(walk, only = true)
-- Q3 step 1, the pre-claim sweep (`swept`, moved to dead by `dead`), and step 2's two
-- index walks, gated by `open`: `ready` (pending rows due and not expired) and `lapsed`
-- (lapsed leases with attempts left), up to `walk` rows each in claim order, locked
-- with SKIP LOCKED; `only` narrows the walks' rows (Q18.8: to the keyless ones).
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
dead AS (
    {dead_letter(moved = swept, last_error = 'max attempts exceeded')}
),
ready AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at FROM @schema@.jobs AS j
    WHERE j.queue = %(queue)s::text AND j.state = 'pending' AND j.run_at <= @schema@.alk_now()
        AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
        AND (SELECT g.open FROM gate AS g) AND {only}
    ORDER BY {claim_order(alias = j)}
    LIMIT {walk}
    FOR UPDATE OF j SKIP LOCKED
),
lapsed AS MATERIALIZED (
    SELECT j.id, j.priority, j.run_at FROM @schema@.jobs AS j
    WHERE j.queue = %(queue)s::text AND j.state = 'processing'
        AND j.claim_expires_at < @schema@.alk_now() AND j.attempts < j.max_attempts
        AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
        AND (SELECT g.open FROM gate AS g) AND {only}
    ORDER BY {claim_order(alias = j)}
    LIMIT {walk}
    FOR UPDATE OF j SKIP LOCKED
)

-- fragment: claim_update
-- Q3 step 3: claim the picked rows; the claimed jobs. Q19.8: each row's claim token is
-- the client's 62 random bits XOR its id: one parameter per statement, a distinct token
-- per row of it (ids differ), never negative, never NULL.
UPDATE @schema@.jobs AS j SET
    state = 'processing',
    attempts = j.attempts + 1,
    claim_token = %(token_base)s::bigint # j.id,
    claimed_by = %(worker_id)s::text,
    claimed_at = @schema@.alk_now(),
    claim_expires_at = @schema@.alk_now() + j.visibility_timeout_s * interval '1 second'
FROM picked
WHERE j.id = picked.id
RETURNING
    {job_fields(state = j.state, died_at = NULL::timestamptz)}

-- fragment: ack_claims_delete
-- R2: delete each listed (id, claim token) pair of this queue whose claim is valid
-- (Q4's V) and whose row is not kept (Q19.2: keep_completed_s IS NULL; a kept row is
-- finished by complete_claims, which moves it); the ids deleted. The pairs drive
-- primary-key lookups.
DELETE FROM @schema@.jobs
WHERE queue = %(queue)s::text
    AND (id, claim_token) IN (SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]))
    AND (state = 'processing' AND claim_expires_at >= @schema@.alk_now()) IS TRUE
    AND keep_completed_s IS NULL
RETURNING id

-- fragment: complete_delete
-- Q19.1/Q19.2: delete each listed (id, claim token) pair of this queue whose claim is
-- valid (Q4's V), kept or not, RETURNING the whole rows with the result given for each
-- (the results array runs parallel to ids and tokens; NULL for none), for keep_rows.
DELETE FROM @schema@.jobs AS j
USING unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(results)b::bytea[])
    AS c (id, token, result)
WHERE j.id = c.id AND j.queue = %(queue)s::text
    AND (j.state = 'processing' AND j.claim_token = c.token
        AND j.claim_expires_at >= @schema@.alk_now()) IS TRUE
RETURNING j.*, c.result AS handler_result

-- fragment: redrive
-- D24: the rest of a redrive, after the CTE `candidates` (the dead rows to move, locked
-- FOR UPDATE, so two redrives of one row move it once): back to jobs as pending, ready
-- now, attempts 0, enqueued now, expires_at at its old distance from enqueued_at; claim
-- fields and died_at cleared, last_error kept. The live row keeps its id (OVERRIDING
-- SYSTEM VALUE: the identity sequence is not used). Q15: a row whose unique key a live
-- job holds is not inserted (ON CONFLICT DO NOTHING on the unique index: it waits for a
-- concurrent keyed enqueue to commit or roll back) and stays dead; of rows sharing a
-- key, the lowest id moves (the insert runs in id order). Only the inserted rows are
-- deleted from dead_jobs (`moved`). The queue is woken (NOTIFY, at commit) when any row
-- moved. Returns the count moved.
revived AS (
    INSERT INTO @schema@.jobs (
        id, queue, payload, priority, state, attempts, max_attempts, run_at, enqueued_at,
        visibility_timeout_s, backoff_base_s, expires_at, claimed_by, claimed_at,
        claim_expires_at, last_error, headers, unique_key, concurrency_key, keep_completed_s
    )
    OVERRIDING SYSTEM VALUE
    SELECT
        m.id, m.queue, m.payload, m.priority, 'pending', 0, m.max_attempts, t.now, t.now,
        m.visibility_timeout_s, m.backoff_base_s, t.now + (m.expires_at - m.enqueued_at),
        NULL, NULL, NULL, m.last_error, m.headers, m.unique_key, m.concurrency_key,
        m.keep_completed_s
    FROM candidates AS m, (SELECT @schema@.alk_now() AS now) AS t
    ORDER BY m.id
    ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id
),
moved AS (
    DELETE FROM @schema@.dead_jobs AS d USING revived AS r WHERE d.id = r.id
),
woken AS (
    SELECT pg_catalog.pg_notify(%(channel)s::text, '')
    FROM (SELECT 1 FROM revived LIMIT 1) AS any_row
)
SELECT (SELECT count(*) FROM revived), (SELECT count(*) FROM woken)

-- fragment: wake_due
-- R11: the enqueue wake's payload: in how many seconds the enqueued rows are due, on the
-- database clock (delay_s, which wins, or run_at less this statement's alk_now()), as
-- float8 text; '' when they are ready now (a listener reads a number <= 0 as ready now
-- too). A listener adds it to its own monotonic clock when the wake arrives, so no wall
-- clock is compared with another. (In a transaction the wake arrives at commit, and the
-- due time is counted from then: late by the time from this statement to the commit.)
-- Plain expressions over the parameters, no subquery: the enqueue plans as fast as with
-- the constant '' it replaced.
CASE
    WHEN %(delay_s)s::float8 IS NOT NULL
        THEN CASE WHEN %(delay_s)s::float8 > 0 THEN %(delay_s)s::float8::text ELSE '' END
    ELSE coalesce(
        pg_catalog.date_part('epoch', %(run_at)s::timestamptz - @schema@.alk_now())::text, ''
    )
END

-- name: enqueue_many
-- Q2: one row per payload (in order), resolved with one clock read, all with the same
-- headers (D30: JSON text, '{}' for none); the wake is a NOTIFY, delivered at commit.
-- Q18.8: concurrency_keys is one key (or NULL) per payload, or NULL for none (unnest
-- pads it with NULLs).
WITH inserted AS (
    {new_jobs(payload = p.payload, group = p.concurrency_key)}
    FROM (SELECT @schema@.alk_now() AS now) AS t,
        unnest(%(payloads)b::bytea[], %(concurrency_keys)s::text[])
            WITH ORDINALITY AS p (payload, concurrency_key, ord)
    ORDER BY p.ord
    RETURNING id
)
SELECT inserted.id
FROM inserted, (SELECT pg_catalog.pg_notify(%(channel)s::text, {wake_due})) AS wake
ORDER BY inserted.id;

-- name: enqueue_one
-- Q2 for a single payload: the same row and wake as `enqueue_many`, without the unnest
-- and its sorts (the common case of one job per call).
WITH inserted AS (
    {new_jobs(payload = %(payload)b::bytea)}
    FROM (SELECT @schema@.alk_now() AS now) AS t
    RETURNING id
)
SELECT inserted.id
FROM inserted, (SELECT pg_catalog.pg_notify(%(channel)s::text, {wake_due})) AS wake;

-- name: lock_unique_keys
-- Q15: the first statement of a keyed enqueue's transaction: a transaction-level
-- advisory lock per (schema, queue, key) (`locks`: their texts), taken in the order of
-- their hashes so two enqueues of many keys cannot deadlock, and held until the commit.
-- The enqueue_unique statements that follow take their snapshots after it: they see
-- every job and window that an earlier holder of a key committed.
SELECT count(pg_catalog.pg_advisory_xact_lock(l.h))
FROM (
    SELECT DISTINCT pg_catalog.hashtextextended(k, 0) AS h
    FROM unnest(%(locks)s::text[]) AS k
    ORDER BY 1
) AS l;

-- name: enqueue_unique
-- Q15: one keyed job, under lock_unique_keys' lock of its key: nothing is created when
-- a live job of the queue holds the key, or its unique_for_s window is open (then the
-- window's job id comes back); else the job is inserted, its window (re)opened when
-- unique_for_s is given, and the queue woken. One row: (id, created). No row only when
-- a redrive of a dead job with the key won the race to the unique index between this
-- statement's snapshot and its insert: the engine runs the statement again.
WITH t AS MATERIALIZED (SELECT @schema@.alk_now() AS now),
held AS MATERIALIZED (
    SELECT coalesce(
        (SELECT j.id FROM @schema@.jobs AS j
            WHERE j.queue = %(queue)s::text AND j.unique_key = %(unique_key)s::text),
        (SELECT w.job_id FROM @schema@.unique_windows AS w, t
            WHERE w.queue = %(queue)s::text AND w.unique_key = %(unique_key)s::text
                AND w.expires_at > t.now)
    ) AS id
),
inserted AS (
    {new_jobs(payload = %(payload)b::bytea, key = %(unique_key)s::text)}
    FROM t, held
    WHERE held.id IS NULL
    ON CONFLICT (queue, unique_key) WHERE unique_key IS NOT NULL DO NOTHING
    RETURNING id
),
opened AS (
    INSERT INTO @schema@.unique_windows (queue, unique_key, job_id, expires_at)
    SELECT
        %(queue)s::text, %(unique_key)s::text, i.id,
        t.now + %(unique_for_s)s::float8 * interval '1 second'
    FROM inserted AS i, t
    WHERE %(unique_for_s)s::float8 IS NOT NULL
    ON CONFLICT (queue, unique_key) DO UPDATE
        SET job_id = EXCLUDED.job_id, expires_at = EXCLUDED.expires_at
),
woken AS (
    SELECT pg_catalog.pg_notify(%(channel)s::text, '') FROM inserted
)
SELECT i.id, true FROM inserted AS i, (SELECT count(*) FROM woken) AS wake
UNION ALL
SELECT held.id, false FROM held WHERE held.id IS NOT NULL;

-- name: claim
-- Q3: the pre-claim sweep (its dead-letter moves counted: D27) and up to n claims, in
-- one statement (one transaction). Q18.7: a limited queue's claim is one row of NULLs
-- (see claim_gate).
WITH {claim_gate},
{claim_candidates},
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM swept) AS m WHERE m.n > 0, dead_lettered = m.n
    )}
),
claimed AS (
    {claim_update}
)
SELECT * FROM claimed
UNION ALL
SELECT
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM gate AS g WHERE g.limited;

-- name: heartbeat
-- Q4: an absolute reset of a valid claim's deadline.
UPDATE @schema@.jobs SET
    claim_expires_at = @schema@.alk_now()
        + coalesce(%(extend_s)s::float8, visibility_timeout_s) * interval '1 second'
WHERE id = %(id)s::bigint AND queue = %(queue)s::text
    AND (state = 'processing' AND claim_token = %(token)s::bigint
        AND claim_expires_at >= @schema@.alk_now()) IS TRUE
RETURNING id;

-- name: heartbeat_claims
-- R2: renew each listed (id, claim token) pair of this queue whose claim is valid (Q4's V),
-- in one statement (an absolute reset, as heartbeat); the ids renewed. The pairs drive
-- primary-key lookups.
UPDATE @schema@.jobs AS j SET
    claim_expires_at = @schema@.alk_now()
        + coalesce(%(extend_s)s::float8, j.visibility_timeout_s) * interval '1 second'
FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]) AS c(id, token)
WHERE j.id = c.id AND j.queue = %(queue)s::text
    AND (j.state = 'processing' AND j.claim_token = c.token
        AND j.claim_expires_at >= @schema@.alk_now()) IS TRUE
RETURNING j.id;

-- name: heartbeat_claims_progress
-- Q19.7: heartbeat_claims, and each renewed row takes its item's progress text (NULL:
-- no news, the row keeps its own; a claim listed twice: its first item). The worker
-- sends it instead of heartbeat_claims only when some claim of the batch has news, so
-- the plain heartbeat stays as it was.
UPDATE @schema@.jobs AS j SET
    claim_expires_at = @schema@.alk_now()
        + coalesce(%(extend_s)s::float8, j.visibility_timeout_s) * interval '1 second',
    progress = coalesce(c.progress, j.progress)
FROM (
    SELECT DISTINCT ON (p.id, p.token) p.id, p.token, p.progress
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(progress)s::text[])
        WITH ORDINALITY AS p (id, token, progress, ord)
    ORDER BY p.id, p.token, p.ord
) AS c
WHERE j.id = c.id AND j.queue = %(queue)s::text
    AND (j.state = 'processing' AND j.claim_token = c.token
        AND j.claim_expires_at >= @schema@.alk_now()) IS TRUE
RETURNING j.id;

-- name: ack
-- Q4: delete a validly claimed row that is not kept (Q19.2: see ack_claims_delete);
-- count it as acked (D27).
WITH acked AS (
    DELETE FROM @schema@.jobs
    WHERE id = %(id)s::bigint AND queue = %(queue)s::text
        AND (state = 'processing' AND claim_token = %(token)s::bigint
            AND claim_expires_at >= @schema@.alk_now()) IS TRUE
        AND keep_completed_s IS NULL
    RETURNING id
),
counted AS (
    {count_moves(moves = acked, acked = 1)}
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
        AND (state = 'processing' AND claim_token = %(token)s::bigint
            AND claim_expires_at >= @schema@.alk_now()) IS TRUE
    FOR UPDATE
),
moved AS (
    DELETE FROM @schema@.jobs AS j USING target AS t WHERE j.id = t.id AND t.spent
    RETURNING j.*
),
dead AS (
    {dead_letter(moved = moved, last_error = coalesce(%(error)s::text, 'max attempts exceeded'))}
),
counted AS (
    {count_moves(moves = dead, dead_lettered = 1)}
),
announced AS (
    {notify_done(rows = dead)}
),
requeued AS (
    UPDATE @schema@.jobs AS j SET
        state = 'pending',
        run_at = @schema@.alk_now() + coalesce(%(delay_s)s::float8, 0) * interval '1 second',
        last_error = %(error)s::text,
        claimed_by = NULL,
        claimed_at = NULL,
        claim_expires_at = NULL,
        claim_token = NULL
    FROM target AS t
    WHERE j.id = t.id AND NOT t.spent
    RETURNING j.id
)
SELECT id FROM dead, (SELECT count(*) FROM announced) AS a
UNION ALL
SELECT id FROM requeued;

-- name: fail
-- Q4: a dead-letter move of a validly claimed row, with error; counted (D27); announced
-- done (Q19.4).
WITH moved AS (
    DELETE FROM @schema@.jobs
    WHERE id = %(id)s::bigint AND queue = %(queue)s::text
        AND (state = 'processing' AND claim_token = %(token)s::bigint
            AND claim_expires_at >= @schema@.alk_now()) IS TRUE
    RETURNING *
),
dead AS (
    {dead_letter(moved = moved, last_error = %(error)s::text)}
),
counted AS (
    {count_moves(moves = dead, dead_lettered = 1)}
),
announced AS (
    {notify_done(rows = dead)}
)
SELECT id FROM dead, (SELECT count(*) FROM announced) AS a;

-- name: ack_batch
-- Q6: finish each listed, ackable row of this queue (no token): deleted, or moved to
-- history when kept (Q19.2); count them, as acked (D27).
WITH deleted AS (
    DELETE FROM @schema@.jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND queue = %(queue)s::text
        AND (state = 'processing' AND claim_expires_at >= @schema@.alk_now()) IS TRUE
    RETURNING *
),
kept AS (
    {keep_rows(moved = deleted)}
),
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM deleted) AS m WHERE m.n > 0, acked = m.n
    )}
),
announced AS (
    {notify_done(rows = kept)}
)
SELECT (SELECT count(*) FROM deleted) + 0 * (SELECT count(*) FROM announced);

-- name: ack_claims
-- R2: ack each listed (id, claim token) pair whose claim is valid, in one statement,
-- counted as acked (D27); the ids deleted.
WITH acked AS (
    {ack_claims_delete}
),
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM acked) AS m WHERE m.n > 0, acked = m.n
    )}
)
SELECT id FROM acked;

-- name: ack_claims_and_claim
-- R2 (D21): ack_claims, then claim (the pre-claim sweep and up to n claims), in one
-- statement: one transaction, one clock read, one round trip for a worker's finished
-- jobs and its next jobs. It is made of the same fragments as ack_claims and claim;
-- `counted` adds the acks and the pre-claim sweep's dead-letter moves in its one upsert.
-- All CTEs see one snapshot, so the claim cannot see the acked rows gone; it needs not:
-- an acked row is processing with claim_expires_at >= alk_now(), which is never ready
-- (pending) nor lapsed or spent (claim_expires_at < alk_now()) at the same alk_now(), so
-- the two sets are disjoint and the claim hands out exactly what a claim after the acks
-- would. The acks come first in the UNION ALL, so their DELETE has finished (and waited
-- for any row lock it had to) before the claim locks anything. Rows: (acked id, NULLs)
-- per acked job, then (NULL, job fields) per claimed job; Q18.7: then a row of NULLs
-- when the queue is limited (see claim_gate).
WITH acked AS (
    {ack_claims_delete}
),
{claim_gate},
{claim_candidates},
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM acked) AS a
            CROSS JOIN (SELECT count(*) AS n FROM swept) AS d
            WHERE a.n + d.n > 0,
        acked = a.n,
        dead_lettered = d.n
    )}
),
claimed AS (
    {claim_update}
)
SELECT
    acked.id,
    -- A NULL per job field (22): the result has the job fields' shape, not the table's,
    -- so a column a later migration adds to jobs changes no running statement's result
    -- (a prepared statement's result type must not change).
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM acked
UNION ALL
SELECT NULL, claimed.* FROM claimed
UNION ALL
-- Q18.7: a limited queue's claim is one row of NULLs (see claim_gate).
SELECT
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM gate AS g WHERE g.limited;

-- name: complete_claims
-- Q19.1/Q19.2: ack each listed (id, claim token, result) item whose claim is valid, in
-- one statement: a kept row (keep_completed_s not NULL) moves to completed_jobs with its
-- result, an unkept one is deleted and its result discarded; counted as acked (D27);
-- the ids finished. The store sends it only when some claim of the batch is kept or has
-- a result: a queue without history runs ack_claims.
WITH done AS (
    {complete_delete}
),
kept AS (
    {keep_rows(moved = done, result = handler_result)}
),
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM done) AS m WHERE m.n > 0, acked = m.n
    )}
),
announced AS (
    {notify_done(rows = kept)}
)
SELECT id FROM done, (SELECT count(*) FROM announced) AS a;

-- name: complete_claims_and_claim
-- Q19.1 (D21): complete_claims, then claim, in one statement, as ack_claims_and_claim
-- is made of ack_claims and claim (the same reasoning holds: an acked row is never
-- claimable at the same alk_now()). Rows as ack_claims_and_claim's.
WITH done AS (
    {complete_delete}
),
kept AS (
    {keep_rows(moved = done, result = handler_result)}
),
announced AS (
    {notify_done(rows = kept)}
),
{claim_gate},
{claim_candidates},
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM done) AS a
            CROSS JOIN (SELECT count(*) AS n FROM swept) AS d
            WHERE a.n + d.n > 0,
        acked = a.n,
        dead_lettered = d.n
    )}
),
claimed AS (
    {claim_update}
)
SELECT
    done.id,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM done, (SELECT count(*) FROM announced) AS a
UNION ALL
SELECT NULL, claimed.* FROM claimed
UNION ALL
SELECT
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
FROM gate AS g WHERE g.limited;

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
        %(ids)s::bigint[], %(tokens)s::bigint[], %(errors)s::text[], %(delays)s::float8[]
    ) WITH ORDINALITY AS c (id, token, error, delay_s, ord)
    JOIN @schema@.jobs AS j ON j.id = c.id
    WHERE j.queue = %(queue)s::text
        AND (j.state = 'processing' AND j.claim_token = c.token
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
dead AS (
    {dead_letter(moved = moved, last_error = coalesce(error, 'max attempts exceeded'))}
),
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM dead) AS m WHERE m.n > 0, dead_lettered = m.n
    )}
),
announced AS (
    {notify_done(rows = dead)}
),
requeued AS (
    UPDATE @schema@.jobs AS j SET
        state = 'pending',
        run_at = @schema@.alk_now() + coalesce(t.delay_s, 0) * interval '1 second',
        last_error = t.error,
        claimed_by = NULL,
        claimed_at = NULL,
        claim_expires_at = NULL,
        claim_token = NULL
    FROM target AS t
    WHERE j.id = t.id AND NOT t.spent
    RETURNING t.ord
)
SELECT moved.ord
FROM moved JOIN dead USING (id) CROSS JOIN (SELECT count(*) FROM announced) AS a
UNION ALL
SELECT ord FROM requeued;

-- name: fail_claims
-- R2 (D20): fail each listed (id, claim token, error) item of this queue whose claim is
-- valid (Q4's V), as fail does, in one statement: a dead-letter move with error
-- (counted: D27). Locking, primary-key lookups and a job listed twice as in
-- retry_claims. Returns the ordinals of the items applied.
WITH valid AS MATERIALIZED (
    SELECT j.id, c.ord, c.error
    FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[], %(errors)s::text[])
        WITH ORDINALITY AS c (id, token, error, ord)
    JOIN @schema@.jobs AS j ON j.id = c.id
    WHERE j.queue = %(queue)s::text
        AND (j.state = 'processing' AND j.claim_token = c.token
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
dead AS (
    {dead_letter(moved = moved, last_error = error)}
),
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM dead) AS m WHERE m.n > 0, dead_lettered = m.n
    )}
),
announced AS (
    {notify_done(rows = dead)}
)
SELECT moved.ord
FROM moved JOIN dead USING (id) CROSS JOIN (SELECT count(*) FROM announced) AS a;

-- fragment: finalize_cancelled(doomed)
-- Q19.5: the CTE `finalized`: the jobs rows whose ids the CTE `doomed` lists (locked by
-- it) leave the live table as cancelled; the rows finalized. The one place a job becomes
-- *cancelled*: cancel, settle_cancelled and sweep_expired all finalize through it, and
-- count what it returns (D27). Q19.2's keep step: a row whose stamp keep_completed_s
-- is set moves into completed_jobs as 'cancelled' (`kept_cancelled`, keep_rows).
finalized AS (
    DELETE FROM @schema@.jobs AS j USING {doomed} AS x WHERE j.id = x.id
    RETURNING j.*
),
kept_cancelled AS (
    {keep_rows(moved = finalized, state = 'cancelled')}
)

-- name: release_claims
-- Q19.8: give each listed (id, claim token) pair of this queue whose claim is valid (Q4's
-- V) back: pending, ready now, its attempt given back (attempts - 1), last_error the
-- reason, claim fields and token cleared; the queue is woken (NOTIFY, at commit) when
-- any was released, so other workers take them at once. The ids released.
WITH released AS (
    UPDATE @schema@.jobs AS j SET
        state = 'pending',
        attempts = j.attempts - 1,
        run_at = @schema@.alk_now(),
        last_error = %(error)s::text,
        claimed_by = NULL,
        claimed_at = NULL,
        claim_expires_at = NULL,
        claim_token = NULL
    FROM (SELECT DISTINCT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[])) AS c(id, token)
    WHERE j.id = c.id AND j.queue = %(queue)s::text
        AND (j.state = 'processing' AND j.claim_token = c.token
            AND j.claim_expires_at >= @schema@.alk_now()) IS TRUE
    RETURNING j.id
),
woken AS (
    SELECT pg_catalog.pg_notify(%(channel)s::text, '')
    FROM (SELECT 1 FROM released LIMIT 1) AS any_row
)
SELECT id FROM released, (SELECT count(*) FROM woken) AS w;

-- name: cancel
-- Q19.5: cancel this queue's live row. The row is locked first (`target`: its latest
-- version). A pending row, or a processing or cancelling one whose lease lapsed (nobody
-- holds it), is finalized at once and counted as cancelled (D27); a processing row under
-- a live lease becomes cancelling (out of every claim index, so Q4's V refuses its
-- holder), and its holder is told on the queue's wake channel (`cancel:<id>`), as is an
-- already cancelling one again (a lost first announcement gets a second chance).
-- One row: whether a live row was cancelled, and the announcements sent.
WITH target AS MATERIALIZED (
    SELECT j.id, j.state, (j.claim_expires_at < @schema@.alk_now()) IS TRUE AS lapsed
    FROM @schema@.jobs AS j
    WHERE j.id = %(id)s::bigint AND j.queue = %(queue)s::text
    FOR UPDATE
),
{finalize_cancelled(doomed = (SELECT t.id FROM target AS t WHERE t.state = 'pending' OR t.lapsed))},
marked AS (
    UPDATE @schema@.jobs AS j SET
        state = 'cancelling',
        cancel_requested_at = coalesce(j.cancel_requested_at, @schema@.alk_now())
    FROM target AS t
    WHERE j.id = t.id AND t.state IN ('processing', 'cancelling') AND NOT t.lapsed
    RETURNING j.id
),
counted AS (
    {count_moves(moves = finalized, cancelled = 1)}
),
announced AS (
    SELECT pg_catalog.pg_notify(%(channel)s::text, 'cancel:' || m.id::text) FROM marked AS m
),
done AS (
    {notify_done(rows = finalized)}
)
SELECT
    (SELECT count(*) FROM target) > 0,
    (SELECT count(*) FROM announced) + 0 * (SELECT count(*) FROM done);

-- name: settle_cancelled
-- Q19.5: the holders finalize their cancelling claims: each listed (id, claim token)
-- pair of this queue whose row is cancelling under that token (no lease check: a holder
-- may settle late), counted as cancelled (D27); the ids finalized. Rows are locked in id
-- order, as the sweep's `lapsed` locks them: the two never deadlock.
WITH doomed AS MATERIALIZED (
    SELECT j.id FROM @schema@.jobs AS j
    WHERE j.queue = %(queue)s::text
        AND (j.id, j.claim_token) IN (SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::bigint[]))
        AND (j.state = 'cancelling') IS TRUE
    ORDER BY j.id
    FOR UPDATE
),
{finalize_cancelled(doomed = doomed)},
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM finalized) AS m WHERE m.n > 0, cancelled = m.n
    )}
),
announced AS (
    {notify_done(rows = finalized)}
)
SELECT id FROM finalized, (SELECT count(*) FROM announced) AS a;

-- name: cancelling_among
-- Q19.5: which of these ids are cancelling rows of this queue (primary-key probes; a
-- worker's safety net for a lost announcement).
SELECT j.id FROM @schema@.jobs AS j
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.queue = %(queue)s::text
    AND (j.state = 'cancelling') IS TRUE;

-- fragment: inline_payload
-- Q8: a read of one job sends its payload along when it is at most inline_max bytes,
-- else NULL; the last column is the payload's size. The client then reads a larger one
-- in slices (payload_slice), so neither the server's result nor the client's copy of it
-- holds a large payload whole: a 100 MiB payload read back peaked at 6x its size in the
-- client in one result (hex text, then bytes), about 1x in slices.
CASE WHEN pg_catalog.octet_length(j.payload) <= %(inline_max)s::integer THEN j.payload END

-- fragment: inline_result
-- Q19.1: a kept row's result as inline_payload sends the payload (the larger ones in
-- slices: result_slice).
CASE WHEN pg_catalog.octet_length(j.result) <= %(inline_max)s::integer THEN j.result END

-- fragment: read_tail(completed_at = NULL::timestamptz, result = NULL::bytea, result_size = NULL::integer)
-- Q8/Q19.2: the columns a read of one job adds after job_fields: completed_at, the
-- result (inline or NULL, as inline_payload) and its size, then the payload's size,
-- then (Q19.7) the progress text.
{completed_at}, {result}, {result_size}, pg_catalog.octet_length(j.payload), j.progress

-- name: get_job
-- Q8: this queue's row, live, dead or kept (Q19.2) (a large payload or result apart:
-- inline_payload). Primary-key lookups.
SELECT
    {job_fields(state = j.state, died_at = NULL::timestamptz, payload = {inline_payload})},
    {read_tail}
FROM @schema@.jobs AS j WHERE id = %(id)s::bigint AND queue = %(queue)s::text
UNION ALL
SELECT
    {job_fields(state = 'dead', died_at = j.died_at, payload = {inline_payload})},
    {read_tail}
FROM @schema@.dead_jobs AS j WHERE id = %(id)s::bigint AND queue = %(queue)s::text
UNION ALL
SELECT
    {job_fields(state = j.state, died_at = NULL::timestamptz, payload = {inline_payload})},
    {read_tail(
        completed_at = j.completed_at,
        result = {inline_result},
        result_size = pg_catalog.octet_length(j.result)
    )}
FROM @schema@.completed_jobs AS j WHERE id = %(id)s::bigint AND queue = %(queue)s::text;

-- name: payload_slice
-- Q8: `len` bytes of a job's payload from byte `start` (1-based), live, dead or kept. A
-- job's payload never changes while its id exists (a redrive or an ack moves it whole),
-- so slices read by separate statements make up the payload the first read saw; no
-- row: the job left.
SELECT pg_catalog.substring(j.payload, %(start)s::integer, %(len)s::integer)
FROM @schema@.jobs AS j WHERE id = %(id)s::bigint
UNION ALL
SELECT pg_catalog.substring(j.payload, %(start)s::integer, %(len)s::integer)
FROM @schema@.dead_jobs AS j WHERE id = %(id)s::bigint
UNION ALL
SELECT pg_catalog.substring(j.payload, %(start)s::integer, %(len)s::integer)
FROM @schema@.completed_jobs AS j WHERE id = %(id)s::bigint
LIMIT 1;

-- name: result_slice
-- Q19.1: `len` bytes of a kept job's result from byte `start` (1-based), as
-- payload_slice: a kept row never changes; no row: it was purged.
SELECT pg_catalog.substring(j.result, %(start)s::integer, %(len)s::integer)
FROM @schema@.completed_jobs AS j WHERE id = %(id)s::bigint;

-- name: sweep_expired
-- Q19.5: cancelling rows whose lease lapsed are finalized as cancelled (found through
-- jobs_cancelling_idx); Q9: expired live rows, but not cancelling ones (a cancelled job
-- is never 'expired'), to dead ('expired'); both counted (D27) by one counter upsert;
-- then purge dead rows past retention (retention_s NULL: keep forever). The lapsed rows
-- are locked in id order, as settle_cancelled locks them (no deadlock). Rows moved to
-- dead by this statement are not visible to its purge, and could not qualify anyway
-- (they died now).
WITH lapsed AS MATERIALIZED (
    SELECT j.id FROM @schema@.jobs AS j
    WHERE j.queue = %(queue)s::text AND j.state = 'cancelling'
        AND j.claim_expires_at < @schema@.alk_now()
    ORDER BY j.id
    FOR UPDATE
),
{finalize_cancelled(doomed = lapsed)},
expired AS (
    DELETE FROM @schema@.jobs
    WHERE queue = %(queue)s::text AND expires_at < @schema@.alk_now()
        AND state <> 'cancelling'
    RETURNING *
),
dead AS (
    {dead_letter(moved = expired, last_error = 'expired')}
),
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM dead) AS m
            CROSS JOIN (SELECT count(*) AS n FROM finalized) AS c WHERE m.n + c.n > 0,
        dead_lettered = m.n, cancelled = c.n
    )}
),
purged AS (
    DELETE FROM @schema@.dead_jobs
    WHERE queue = %(queue)s::text AND %(retention_s)s::float8 IS NOT NULL
        AND died_at < @schema@.alk_now() - %(retention_s)s::float8 * interval '1 second'
    RETURNING 1
),
closed AS (
    -- Q15: forget the queue's closed unique_for_s windows (they refuse nothing).
    DELETE FROM @schema@.unique_windows
    WHERE queue = %(queue)s::text AND expires_at <= @schema@.alk_now()
)
SELECT (SELECT count(*) FROM dead), (SELECT count(*) FROM purged), (SELECT count(*) FROM finalized);

-- name: reschedule
-- Q16: this queue's pending row gets its new run_at (now + delay_s, or run_at, or kept)
-- and priority (or kept); the queue is woken with the new due time (R11: the seconds
-- from now, '' when it is due already). The count changed (0 or 1) and of wakes sent.
-- The row is found by primary key (`IS TRUE`: see the top of this file).
WITH moved AS (
    UPDATE @schema@.jobs SET
        run_at = CASE
            WHEN %(delay_s)s::float8 IS NOT NULL
                THEN @schema@.alk_now() + %(delay_s)s::float8 * interval '1 second'
            ELSE coalesce(%(run_at)s::timestamptz, run_at)
        END,
        priority = coalesce(%(priority)s::integer, priority)
    WHERE id = %(id)s::bigint AND queue = %(queue)s::text AND (state = 'pending') IS TRUE
    RETURNING run_at
),
woken AS (
    SELECT pg_catalog.pg_notify(%(channel)s::text, coalesce((
        SELECT pg_catalog.date_part('epoch', m.run_at - @schema@.alk_now())::text
        WHERE m.run_at > @schema@.alk_now()
    ), ''))
    FROM moved AS m
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM woken);

-- name: next_due
-- Q16 (next_due_in_s): the seconds from now until the earliest run_at later than now of
-- this queue's pending rows (NULL: none). A loose scan of the claim index: one probe per
-- distinct priority of the queue's pending rows, then, per priority, one probe for its
-- first run_at after now; never a walk of the queue's rows. Q18.9: then, for a limited
-- queue with a ready job (one probe of the claim index), the seconds until its bucket
-- holds a whole token (NULL: it does, or no rate) and, when every slot of max_running is
-- taken, until its earliest live lease lapses (NULL: a slot is free, or no max_running);
-- Q18.8: with max_running_per_key, when no ready job is keyless and every key with a
-- ready job is full, until the earliest live lease of those keys lapses (per key with
-- pending rows: a loose scan of the per-key index, then a few probes); the engine waits
-- for all of them. A queue without a control row reads nothing more.
WITH RECURSIVE priorities (priority) AS (
    (SELECT j.priority FROM @schema@.jobs AS j
     WHERE j.queue = %(queue)s::text AND j.state = 'pending'
     ORDER BY j.priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT j.priority FROM @schema@.jobs AS j
            WHERE j.queue = %(queue)s::text AND j.state = 'pending'
                AND j.priority < p.priority
            ORDER BY j.priority DESC LIMIT 1)
    FROM priorities AS p WHERE p.priority IS NOT NULL
),
delayed AS (
    SELECT pg_catalog.date_part('epoch', min(n.run_at) - @schema@.alk_now()) AS s
    FROM priorities AS p
    CROSS JOIN LATERAL (
        SELECT j.run_at FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.state = 'pending' AND j.priority = p.priority
            AND j.run_at > @schema@.alk_now()
        ORDER BY j.run_at LIMIT 1
    ) AS n
),
control AS MATERIALIZED (
    {limit_state}
),
pending_keys (k) AS (
    {key_loose_scan(state = 'pending', self = pending_keys)}
),
ready_keys AS (
    SELECT p.k, (
        SELECT count(*) FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.concurrency_key = p.k
            AND j.state = 'processing' AND j.claim_expires_at >= @schema@.alk_now()
    ) + (
        SELECT count(*) FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.state = 'cancelling'
            AND j.claim_expires_at >= @schema@.alk_now() AND j.concurrency_key = p.k
    ) AS live, least((
        SELECT min(j.claim_expires_at) FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.concurrency_key = p.k
            AND j.state = 'processing' AND j.claim_expires_at >= @schema@.alk_now()
    ), (
        SELECT min(j.claim_expires_at) FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.state = 'cancelling'
            AND j.claim_expires_at >= @schema@.alk_now() AND j.concurrency_key = p.k
    )) AS lapse
    FROM pending_keys AS p
    WHERE p.k IS NOT NULL AND (
        SELECT true FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.concurrency_key = p.k AND j.state = 'pending'
            AND j.run_at <= @schema@.alk_now()
            AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
        ORDER BY {claim_order(alias = j)}
        LIMIT 1
    )
),
waits AS (
    SELECT
        CASE WHEN c.tokens < 1 THEN (1 - c.tokens) / c.rate_per_s END AS token_s,
        CASE WHEN c.live >= c.max_running THEN (
            -- a cancelling lease holds a slot too (Q19.5): one probe of each partial index
            SELECT pg_catalog.date_part('epoch', least((
                SELECT min(j.claim_expires_at) FROM @schema@.jobs AS j
                WHERE j.queue = %(queue)s::text AND j.state = 'processing'
                    AND j.claim_expires_at >= @schema@.alk_now()
            ), (
                SELECT min(j.claim_expires_at) FROM @schema@.jobs AS j
                WHERE j.queue = %(queue)s::text AND j.state = 'cancelling'
                    AND j.claim_expires_at >= @schema@.alk_now()
            )) - @schema@.alk_now())
        ) END AS lease_s,
        CASE WHEN c.max_running_per_key IS NOT NULL AND NOT coalesce((
            SELECT true FROM @schema@.jobs AS j
            WHERE j.queue = %(queue)s::text AND j.state = 'pending'
                AND j.concurrency_key IS NULL AND j.run_at <= @schema@.alk_now()
                AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
            ORDER BY {claim_order(alias = j)}
            LIMIT 1
        ), false) THEN (
            SELECT pg_catalog.date_part('epoch', min(r.lapse) - @schema@.alk_now())
            FROM ready_keys AS r
            HAVING pg_catalog.bool_and(r.live >= c.max_running_per_key)
        ) END AS key_s
    FROM control AS c
    WHERE (
        c.max_running IS NOT NULL OR c.rate_per_s IS NOT NULL
        OR c.max_running_per_key IS NOT NULL
    ) AND (
        -- The first ready job in claim order: a probe of the claim index (not EXISTS,
        -- which would drop the order and let the planner scan for any ready row).
        SELECT true FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.state = 'pending'
            AND j.run_at <= @schema@.alk_now()
            AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
        ORDER BY {claim_order(alias = j)}
        LIMIT 1
    )
)
SELECT d.s, w.token_s, w.lease_s, w.key_s FROM delayed AS d LEFT JOIN waits AS w ON true;

-- name: schema_version
SELECT version FROM @schema@.alk_schema_version;

-- name: find_job
-- D26: the row with this id, live, dead or kept, of any queue (primary-key lookups; a
-- large payload or result apart, as in get_job).
SELECT
    {job_fields(state = j.state, died_at = NULL::timestamptz, payload = {inline_payload})},
    {read_tail}
FROM @schema@.jobs AS j WHERE id = %(id)s::bigint
UNION ALL
SELECT
    {job_fields(state = 'dead', died_at = j.died_at, payload = {inline_payload})},
    {read_tail}
FROM @schema@.dead_jobs AS j WHERE id = %(id)s::bigint
UNION ALL
SELECT
    {job_fields(state = j.state, died_at = NULL::timestamptz, payload = {inline_payload})},
    {read_tail(
        completed_at = j.completed_at,
        result = {inline_result},
        result_size = pg_catalog.octet_length(j.result)
    )}
FROM @schema@.completed_jobs AS j WHERE id = %(id)s::bigint;

-- name: list_live
-- D26: a page of this queue's live rows in one state, by id (a primary-key walk that
-- stops after limit rows).
SELECT
    {job_fields(state = j.state, died_at = NULL::timestamptz)},
    NULL::timestamptz, NULL::bytea, j.progress
FROM @schema@.jobs AS j
WHERE queue = %(queue)s::text AND state = %(state)s::text AND id > %(after_id)s::bigint
ORDER BY id
LIMIT %(limit)s::bigint;

-- name: list_dead
-- D26: a page of this queue's dead rows, by id.
SELECT
    {job_fields(state = 'dead', died_at = j.died_at)},
    NULL::timestamptz, NULL::bytea, j.progress
FROM @schema@.dead_jobs AS j
WHERE queue = %(queue)s::text AND id > %(after_id)s::bigint
ORDER BY id
LIMIT %(limit)s::bigint;

-- name: list_completed
-- D26/Q19.2: a page of this queue's kept rows in one state ('completed', or Q19.5's
-- 'cancelled'), by id (the list index), with completed_at and the result.
SELECT
    {job_fields(state = j.state, died_at = NULL::timestamptz)},
    j.completed_at, j.result, j.progress
FROM @schema@.completed_jobs AS j
WHERE queue = %(queue)s::text AND state = %(state)s::text AND id > %(after_id)s::bigint
ORDER BY id
LIMIT %(limit)s::bigint;

-- D26.1: the filtered listings, by key and by header. Each statement returns the page's
-- jobs (the first %(limit)s matches among the rows it examined, by id) with, on every
-- row, how many rows it examined and the last id examined; when nothing matched, one
-- row of NULL job fields carries those two. The examined rows are at most %(window)s:
-- %(limit)s for a key alone (every examined row matches), HEADER_SCAN_ROWS with a
-- header (the bound of the rule). A header is compared exactly (`->>` and `=` on text,
-- bound parameters: no pattern, no LIKE); %(name)s NULL means no header filter.
-- fragment: filtered_page(rows, state, died_at, completed_at, result)
hits AS MATERIALIZED (
    SELECT e.id FROM examined AS e
    WHERE %(name)s::text IS NULL OR e.headers ->> %(name)s::text = %(value)s::text
    ORDER BY e.id
    LIMIT %(limit)s::bigint
)
SELECT
    {job_fields(state = {state}, died_at = {died_at})},
    {completed_at}, {result}, j.progress, w.examined, w.last_id
FROM (SELECT count(*) AS examined, pg_catalog.max(e.id) AS last_id FROM examined AS e) AS w
LEFT JOIN (hits AS h JOIN {rows} AS j ON j.id = h.id) ON true
ORDER BY j.id

-- fragment: key_arm(rows, column, in_state)
-- D26.1: the first %(window)s ids (ascending) of the queue's rows above after_id whose
-- `column` equals the key, in the state (`in_state`), walked on an index of that key.
(
    SELECT k.id FROM {rows} AS k
    WHERE k.queue = %(queue)s::text AND k.{column} = %(key)s::text AND {in_state}
        AND k.id > %(after_id)s::bigint
    ORDER BY k.id
    LIMIT %(window)s::bigint
)

-- name: list_live_by_key
-- D26.1: live rows whose unique or concurrency key is the key. The unique key is one
-- lookup (jobs_unique_key_idx); the concurrency key's rows in the state are a range of
-- jobs_key_list_idx in id order (migration 16), read up to the window whatever the
-- key's backlog.
WITH examined AS MATERIALIZED (
    SELECT c.id, c.headers FROM @schema@.jobs AS c
    WHERE c.id IN (
        {key_arm(rows = @schema@.jobs, column = unique_key, in_state = k.state = %(state)s::text)}
        UNION ALL
        {key_arm(rows = @schema@.jobs, column = concurrency_key, in_state = k.state = %(state)s::text)}
    )
    ORDER BY c.id
    LIMIT %(window)s::bigint
),
{filtered_page(rows = @schema@.jobs, state = j.state, died_at = NULL::timestamptz, completed_at = NULL::timestamptz, result = NULL::bytea)};

-- name: list_live_by_header
-- D26.1: the queue's live rows in the state, by id (list_live's walk), at most
-- %(window)s of them examined.
WITH examined AS MATERIALIZED (
    SELECT c.id, c.headers FROM @schema@.jobs AS c
    WHERE c.queue = %(queue)s::text AND c.state = %(state)s::text
        AND c.id > %(after_id)s::bigint
    ORDER BY c.id
    LIMIT %(window)s::bigint
),
{filtered_page(rows = @schema@.jobs, state = j.state, died_at = NULL::timestamptz, completed_at = NULL::timestamptz, result = NULL::bytea)};

-- name: list_dead_by_key
-- D26.1: dead rows whose unique or concurrency key is the key (the key indexes of
-- migration 16).
WITH examined AS MATERIALIZED (
    SELECT c.id, c.headers FROM @schema@.dead_jobs AS c
    WHERE c.id IN (
        {key_arm(rows = @schema@.dead_jobs, column = unique_key, in_state = true)}
        UNION ALL
        {key_arm(rows = @schema@.dead_jobs, column = concurrency_key, in_state = true)}
    )
    ORDER BY c.id
    LIMIT %(window)s::bigint
),
{filtered_page(rows = @schema@.dead_jobs, state = 'dead', died_at = j.died_at, completed_at = NULL::timestamptz, result = NULL::bytea)};

-- name: list_dead_by_header
-- D26.1: the queue's dead rows, by id (list_dead's walk), at most %(window)s examined.
WITH examined AS MATERIALIZED (
    SELECT c.id, c.headers FROM @schema@.dead_jobs AS c
    WHERE c.queue = %(queue)s::text AND c.id > %(after_id)s::bigint
    ORDER BY c.id
    LIMIT %(window)s::bigint
),
{filtered_page(rows = @schema@.dead_jobs, state = 'dead', died_at = j.died_at, completed_at = NULL::timestamptz, result = NULL::bytea)};

-- name: list_completed_by_key
-- D26.1: kept rows in the state whose unique or concurrency key is the key (the key
-- indexes of migration 16), with completed_at and the result.
WITH examined AS MATERIALIZED (
    SELECT c.id, c.headers FROM @schema@.completed_jobs AS c
    WHERE c.id IN (
        {key_arm(rows = @schema@.completed_jobs, column = unique_key, in_state = k.state = %(state)s::text)}
        UNION ALL
        {key_arm(rows = @schema@.completed_jobs, column = concurrency_key, in_state = k.state = %(state)s::text)}
    )
    ORDER BY c.id
    LIMIT %(window)s::bigint
),
{filtered_page(rows = @schema@.completed_jobs, state = j.state, died_at = NULL::timestamptz, completed_at = j.completed_at, result = j.result)};

-- name: list_completed_by_header
-- D26.1: the queue's kept rows in the state, by id (the list index), at most %(window)s
-- examined.
WITH examined AS MATERIALIZED (
    SELECT c.id, c.headers FROM @schema@.completed_jobs AS c
    WHERE c.queue = %(queue)s::text AND c.state = %(state)s::text
        AND c.id > %(after_id)s::bigint
    ORDER BY c.id
    LIMIT %(window)s::bigint
),
{filtered_page(rows = @schema@.completed_jobs, state = j.state, died_at = NULL::timestamptz, completed_at = j.completed_at, result = j.result)};

-- name: purge_completed
-- Q19.3: delete up to `batch` of this queue's kept rows past purge_at, oldest first
-- (the purge index); the count. The engine repeats it, each in a transaction of its
-- own, while a batch comes back full (and for a bounded time). SKIP LOCKED: two
-- sweepers of one queue share the rows instead of waiting for each other.
WITH doomed AS MATERIALIZED (
    SELECT id FROM @schema@.completed_jobs
    WHERE queue = %(queue)s::text AND purge_at < @schema@.alk_now()
    ORDER BY purge_at
    LIMIT %(batch)s::bigint
    FOR UPDATE SKIP LOCKED
),
purged AS (
    -- By primary key (a join with the CTE would hash the whole table).
    DELETE FROM @schema@.completed_jobs AS c
    WHERE c.id = ANY(ARRAY(SELECT d.id FROM doomed AS d))
    RETURNING 1
)
SELECT count(*) FROM purged;

-- name: stats
-- D22: per queue, at one clock read: ready and delayed pending rows and the oldest ready
-- run_at, processing rows and the lapsed ones, dead rows, and the queue's counters
-- summed over their shards (D27); plus the ids issued so far (the identity sequence;
-- D23). With queue NULL, the queues are found by three skip scans (one index probe per
-- distinct queue of the claim, lease and retention indexes: no walk of every row) and
-- in the small counter table, plus every paused or limited queue (Q18); with a queue,
-- only that one (listed even when empty). Q18.10: each queue's controls come along.
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
    -- Q19.5: queues with cancelling rows (jobs_cancelling_idx, empty in the usual case).
    UNION SELECT j.queue FROM @schema@.jobs AS j
    WHERE j.state = 'cancelling' AND %(queue)s::text IS NULL
    UNION SELECT f.queue FROM @schema@.queue_counters AS f WHERE %(queue)s::text IS NULL
    -- Q18: every paused or limited queue is listed.
    UNION SELECT k.queue FROM @schema@.queue_controls AS k
    WHERE (k.paused OR k.limited) AND %(queue)s::text IS NULL
),
clock AS MATERIALIZED (
    SELECT
        @schema@.alk_now() AS now,
        (SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END
         FROM @schema@.jobs_id_seq AS s) AS issued
)
SELECT c.now, c.issued, x.queue, x.ready, x.delayed, x.oldest_ready, x.processing,
    x.reclaimable, x.dead, x.acked, x.dead_lettered, x.cancelled, x.paused,
    x.max_running, x.rate_per_s, x.burst, x.throttled_running, x.throttled_rate, x.limited,
    x.max_running_per_key, x.throttled_per_key, x.cancelling
FROM clock AS c
LEFT JOIN LATERAL (
    SELECT q.queue, p.ready, p.delayed, p.oldest_ready, l.processing, l.reclaimable,
        d.dead, f.acked, f.dead_lettered, f.cancelled, coalesce(k.paused, false) AS paused,
        k.max_running, k.rate_per_s, k.burst, coalesce(k.throttled_running, 0) AS throttled_running,
        coalesce(k.throttled_rate, 0) AS throttled_rate, coalesce(k.limited, false) AS limited,
        k.max_running_per_key, coalesce(k.throttled_per_key, 0) AS throttled_per_key,
        (SELECT count(*) FROM @schema@.jobs AS j
         WHERE j.queue = q.queue AND j.state = 'cancelling') AS cancelling
    FROM queues AS q
    LEFT JOIN @schema@.queue_controls AS k ON k.queue = q.queue
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
-- D24: redrive the listed dead rows of this queue (see the redrive fragment). Ids that
-- are not dead rows of this queue match nothing. The dead rows are found by primary key.
WITH candidates AS MATERIALIZED (
    SELECT * FROM @schema@.dead_jobs
    WHERE id = ANY(%(ids)s::bigint[]) AND queue = %(queue)s::text
    FOR UPDATE
),
{redrive};

-- name: requeue_dead_all
-- D24: requeue_dead for every dead row of this queue (a walk of the queue's entries in
-- the retention index).
WITH candidates AS MATERIALIZED (
    SELECT * FROM @schema@.dead_jobs
    WHERE queue = %(queue)s::text
    FOR UPDATE
),
{redrive};

-- fragment: died_before_bound
-- D25, D29, D25.1: a dead row older than older_than_s (died_at + older_than_s < now), or
-- every dead row when older_than_s is NULL (the bound is then +infinity).
died_at < coalesce(
    @schema@.alk_now() - %(older_than_s)s::float8 * interval '1 second',
    'infinity'::timestamptz
)

-- name: purge_dead
-- D25: delete this queue's dead rows with died_at + older_than_s < now, or every one
-- when older_than_s is NULL (the bound is then +infinity); the count.
WITH purged AS (
    DELETE FROM @schema@.dead_jobs
    WHERE queue = %(queue)s::text
        AND {died_before_bound}
    RETURNING 1
)
SELECT count(*) FROM purged;

-- name: count_dead
-- D29: purge_dead's dry run: how many rows purge_dead would delete now (same predicate,
-- same retention-index walk), deleting nothing.
SELECT count(*) FROM @schema@.dead_jobs
WHERE queue = %(queue)s::text
    AND {died_before_bound};

-- name: purge_dead_ids
-- D25.1: purge_dead restricted to these ids (found by the primary key); the count.
WITH purged AS (
    DELETE FROM @schema@.dead_jobs
    WHERE id = ANY(%(ids)s::bigint[])
        AND queue = %(queue)s::text
        AND {died_before_bound}
    RETURNING 1
)
SELECT count(*) FROM purged;

-- name: count_dead_ids
-- D25.1 with D29: how many rows purge_dead_ids would delete now, deleting nothing.
SELECT count(*) FROM @schema@.dead_jobs
WHERE id = ANY(%(ids)s::bigint[])
    AND queue = %(queue)s::text
    AND {died_before_bound};

-- Q17 periodic jobs. fire_periodic is one transaction (with its lock_timeout and
-- idle_in_transaction_session_timeout set for it, Q17.9): sync_periodic, then one
-- enqueue_one per fire time owed (the cron arithmetic runs in the client, on the clock
-- value sync_periodic returned), then advance_periodic over the rows it holds.

-- name: sync_periodic
-- Q17.3/Q17.9: make the declared schedules' missing rows, and lock the existing ones
-- that no other transaction holds (SKIP LOCKED: a held row is being fired by its
-- holder). Every row returned is locked by this transaction until it ends, so only it
-- plans and advances them: each fire time is enqueued at most once (Q17.2). The new
-- rows come from the insert (the locking read's snapshot cannot see them); a row that
-- another transaction committed after this statement's snapshot is skipped like a held
-- one. Each row's definition and next_fire_at as kept, and the clock read; with no row
-- locked, one row of NULLs and the clock. Rows are inserted in name order (the client
-- sorts them), so two first declarations of overlapping sets never deadlock.
WITH t AS (SELECT @schema@.alk_now() AS now),
made AS (
    INSERT INTO @schema@.periodic AS p (name, queue, expression, tz, next_fire_at, last_seen_at)
    SELECT c.name, c.queue, c.expression, c.tz, NULL, t.now
    FROM t,
        unnest(%(names)s::text[], %(queues)s::text[], %(expressions)s::text[], %(tzs)s::text[])
            WITH ORDINALITY AS c (name, queue, expression, tz, ord)
    ORDER BY c.ord
    ON CONFLICT (name) DO NOTHING
    RETURNING p.name, p.expression, p.tz, p.next_fire_at
),
held AS (
    SELECT p.name, p.expression, p.tz, p.next_fire_at
    FROM @schema@.periodic AS p
    WHERE p.name = ANY (%(names)s::text[])
    ORDER BY p.name
    FOR UPDATE OF p SKIP LOCKED
)
SELECT r.name, r.expression, r.tz, r.next_fire_at, t.now
FROM t LEFT JOIN (SELECT * FROM made UNION ALL SELECT * FROM held) AS r ON true;

-- name: advance_periodic
-- Q17.2/Q17.3: the held rows adopt the declared definition, their next fire times, the
-- latest fire time that got a job (NULL: none this time, the old value stays) and
-- last_seen_at = the clock read of sync_periodic.
UPDATE @schema@.periodic AS p
SET queue = c.queue,
    expression = c.expression,
    tz = c.tz,
    next_fire_at = c.next_fire_at,
    last_fire_at = coalesce(c.last_fire_at, p.last_fire_at),
    last_seen_at = %(now)s::timestamptz
FROM unnest(
    %(names)s::text[], %(queues)s::text[], %(expressions)s::text[], %(tzs)s::text[],
    %(nexts)s::timestamptz[], %(lasts)s::timestamptz[]
) AS c (name, queue, expression, tz, next_fire_at, last_fire_at)
WHERE p.name = c.name;

-- name: delete_periodic
-- Q17.10: delete one schedule's row (waiting for a fire that holds it). The number of
-- rows deleted: 0 or 1.
WITH gone AS (DELETE FROM @schema@.periodic WHERE name = %(name)s::text RETURNING 1)
SELECT count(*) FROM gone;

-- name: list_periodic
-- Q17.6: every schedule's row by name; stale when unseen for more than stale_after_s.
SELECT name, queue, expression, tz, next_fire_at, last_fire_at, last_seen_at,
    last_seen_at < @schema@.alk_now() - %(stale_after_s)s::float8 * interval '1 second'
FROM @schema@.periodic
ORDER BY name;

-- name: set_paused
-- Q18: pause or resume a queue: its control row's flag. A resume wakes the queue (NOTIFY,
-- at commit). A pause runs in a transaction that first takes the jobs table in SHARE mode
-- (_backend's PAUSE_BARRIER_SQL): that waits for every statement in flight that writes
-- jobs (claims among them), and every claim that comes later waits for the commit. A
-- statement takes its table locks before its snapshot, so such a claim's snapshot sees
-- the flag: once a pause returns, no claim of the queue hands out a job.
WITH control AS (
    INSERT INTO @schema@.queue_controls AS c (queue, paused, updated_at)
    VALUES (%(queue)s::text, %(paused)s::boolean, @schema@.alk_now())
    ON CONFLICT (queue) DO UPDATE SET paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at
    RETURNING c.paused
)
SELECT pg_catalog.pg_notify(%(channel)s::text, '') FROM control WHERE NOT control.paused;

-- Q18.7-Q18.11 queue limits. A limited queue's claims run as one transaction of their own
-- (the engine's _limited.py): its barrier (the jobs table in ROW EXCLUSIVE mode), lock_limits, ack_claims when the claim
-- acks first, then claim_limited. READ COMMITTED gives each statement a snapshot of its
-- own, taken when it starts: a statement that waited for the control row's lock would
-- still count the leases as they were before it waited, so the lock is taken by one
-- statement and the leases are counted by the next, which sees every claim that held
-- the lock before (they committed before releasing it). Claims of unlimited queues never
-- take the lock.

-- name: lock_limits
-- Q18.7: lock the queue's control row until the claim commits (the limited claims of
-- one queue take turns); whether the queue is still limited (no row: not), and whether
-- it has a per-key limit (Q18.8: then the claim is claim_per_key).
SELECT k.limited, k.max_running_per_key IS NOT NULL
FROM @schema@.queue_controls AS k WHERE k.queue = %(queue)s::text FOR UPDATE;

-- fragment: limit_state
-- Q18.7/Q18.9: the queue's control row at alk_now() (no row: no controls): paused,
-- max_running, rate_per_s, max_running_per_key (Q18.8), the bucket's tokens refilled to now (Q18.9: rate_per_s a
-- second since refilled_at, up to burst; NULL without a rate), and `live`: the queue's
-- processing and cancelling rows under unexpired leases (a cancelled handler holds its
-- slot until it stopped: Q19.5; walks of the lease index's and the cancelling index's
-- live entries).
SELECT
    k.paused, k.max_running, k.rate_per_s, k.max_running_per_key,
    CASE WHEN k.rate_per_s IS NOT NULL THEN least(
        k.burst::float8,
        k.tokens + k.rate_per_s * greatest(
            0, pg_catalog.date_part('epoch', @schema@.alk_now() - k.refilled_at)
        )
    ) END AS tokens,
    (SELECT count(*) FROM @schema@.jobs AS j
     WHERE j.queue = %(queue)s::text AND j.state = 'processing'
        AND j.claim_expires_at >= @schema@.alk_now())
    + (SELECT count(*) FROM @schema@.jobs AS j
       WHERE j.queue = %(queue)s::text AND j.state = 'cancelling'
          AND j.claim_expires_at >= @schema@.alk_now()) AS live
FROM @schema@.queue_controls AS k WHERE k.queue = %(queue)s::text

-- fragment: limit_allowance
-- Q18.7-Q18.9, as CTEs of a limited claim: the control row (`control`, limit_state), and
-- `allowance`: paused, max_running, the tokens, `live`, the per-key cap (Q18.8) and
-- `allowed`, the claims the limits let out of n (n, less the slots max_running leaves,
-- less the whole tokens; without a control row, n); `gate` for claim_walks.
control AS MATERIALIZED (
    {limit_state}
),
allowance AS MATERIALIZED (
    SELECT
        coalesce(c.paused, false) AS paused, c.max_running, c.tokens, c.live,
        c.max_running_per_key AS cap,
        greatest(0, least(
            %(n)s::bigint,
            coalesce(c.max_running - c.live, %(n)s::bigint),
            coalesce(pg_catalog.floor(c.tokens)::bigint, %(n)s::bigint)
        )) AS allowed
    FROM (SELECT) AS one LEFT JOIN control AS c ON true
),
gate AS MATERIALIZED (
    SELECT NOT a.paused AS open FROM allowance AS a
)

-- name: claim_limited
-- Q3 under Q18.7/Q18.9, after lock_limits: the pre-claim sweep (counted: D27) and up to
-- `allowed` claims: n, less the slots max_running leaves (max_running - live), less the
-- whole tokens of the bucket; a paused queue hands out nothing. The walks take one row
-- more than allowed, to tell whether a limit held the claim back (Q18.10): then each
-- limit whose own allowance was the claim's counts one throttle. The bucket gives one
-- token per job handed out. Without a control row (the limits were cleared), n.
WITH {limit_allowance},
{claim_candidates(
    walk = (SELECT least(%(n)s::bigint, a.allowed + 1) FROM allowance AS a),
    take = (SELECT a.allowed FROM allowance AS a)
)},
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM swept) AS m WHERE m.n > 0, dead_lettered = m.n
    )}
),
claimed AS (
    {claim_update}
),
held AS MATERIALIZED (
    SELECT a.*, a.allowed < least(
        %(n)s::bigint, (SELECT count(*) FROM ready) + (SELECT count(*) FROM lapsed)
    ) AS throttled
    FROM allowance AS a
),
bucket AS (
    UPDATE @schema@.queue_controls AS k SET
        tokens = coalesce(h.tokens - (SELECT count(*) FROM picked), k.tokens),
        refilled_at = CASE WHEN h.tokens IS NULL THEN k.refilled_at ELSE @schema@.alk_now() END,
        throttled_running = k.throttled_running + (
            h.throttled AND h.max_running IS NOT NULL
            AND greatest(0, h.max_running - h.live) = h.allowed
        )::integer,
        throttled_rate = k.throttled_rate + (
            h.throttled AND h.tokens IS NOT NULL AND pg_catalog.floor(h.tokens) = h.allowed
        )::integer
    FROM held AS h
    WHERE k.queue = %(queue)s::text
)
SELECT * FROM claimed;

-- fragment: key_loose_scan(state, self)
-- Q18.8: the distinct concurrency keys of the queue's rows in `state` (`k`), one probe
-- of a per-key index each (a loose index scan: never a walk of one key's rows), in the
-- recursive CTE `self` (of a WITH RECURSIVE clause).
(SELECT j.concurrency_key FROM @schema@.jobs AS j
 WHERE j.queue = %(queue)s::text AND j.state = {state} AND j.concurrency_key IS NOT NULL
 ORDER BY j.concurrency_key LIMIT 1)
UNION ALL
SELECT (SELECT j.concurrency_key FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.state = {state}
            AND j.concurrency_key > r.k
        ORDER BY j.concurrency_key LIMIT 1)
FROM {self} AS r WHERE r.k IS NOT NULL

-- name: claim_per_key
-- Q3 under Q18.8 (and Q18.7/Q18.9), after lock_limits: claim_limited's allowance, sweep
-- and throttle counts, with the candidates found per key. Keyless rows come from the
-- usual two walks (narrowed to keyless rows). Keyed rows: the distinct keys with
-- pending or processing rows (two loose scans of the per-key indexes), and per key its
-- live leases, so its free slots (max_running_per_key - live, at least 0), and its best
-- free + 1 candidates in claim order (ready pending rows and lapsed leases, each a probe
-- of a per-key index, SKIP LOCKED); the best `free` of them are the key's candidates, and
-- one more means a job was held back by the key. The claim takes the best `allowed` of
-- all candidates. Its cost is O(keys with pending or processing rows), whatever their
-- backlogs. Throttles: max_running and the rate as claim_limited counts them over these
-- candidates; the per-key limit when a key held a job back and fewer than `allowed`
-- candidates were left.
WITH RECURSIVE {limit_allowance},
{claim_walks(
    walk = (SELECT least(%(n)s::bigint, a.allowed + 1) FROM allowance AS a),
    only = j.concurrency_key IS NULL
)},
pending_keys (k) AS (
    {key_loose_scan(state = 'pending', self = pending_keys)}
),
leased_keys (k) AS (
    {key_loose_scan(state = 'processing', self = leased_keys)}
),
slots AS MATERIALIZED (
    SELECT u.k, greatest(0, a.cap - (
        SELECT count(*) FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.concurrency_key = u.k
            AND j.state = 'processing' AND j.claim_expires_at >= @schema@.alk_now()
    ) - (
        -- Q19.5: a cancelled handler holds its key's slot until it stopped
        SELECT count(*) FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.state = 'cancelling'
            AND j.claim_expires_at >= @schema@.alk_now() AND j.concurrency_key = u.k
    )) AS free
    FROM (
        SELECT k FROM pending_keys WHERE k IS NOT NULL
        UNION SELECT k FROM leased_keys WHERE k IS NOT NULL
    ) AS u, allowance AS a
    WHERE a.cap IS NOT NULL AND (SELECT g.open FROM gate AS g)
),
keyed_rows AS MATERIALIZED (
    SELECT s.k, s.free, r.* FROM slots AS s CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.concurrency_key = s.k
            AND j.state = 'pending' AND j.run_at <= @schema@.alk_now()
            AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
        ORDER BY {claim_order(alias = j)}
        LIMIT s.free + 1
        FOR UPDATE OF j SKIP LOCKED
    ) AS r
    UNION ALL
    SELECT s.k, s.free, r.* FROM slots AS s CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.run_at FROM @schema@.jobs AS j
        WHERE j.queue = %(queue)s::text AND j.concurrency_key = s.k
            AND j.state = 'processing' AND j.claim_expires_at < @schema@.alk_now()
            AND j.attempts < j.max_attempts
            AND (j.expires_at IS NULL OR j.expires_at >= @schema@.alk_now())
        ORDER BY {claim_order(alias = j)}
        LIMIT s.free + 1
        FOR UPDATE OF j SKIP LOCKED
    ) AS r
),
keyed AS MATERIALIZED (
    SELECT c.id, c.priority, c.run_at, c.free, pg_catalog.row_number() OVER (
        PARTITION BY c.k ORDER BY {claim_order(alias = c)}
    ) AS rank
    FROM keyed_rows AS c
),
candidates AS MATERIALIZED (
    SELECT id, priority, run_at FROM ready
    UNION ALL SELECT id, priority, run_at FROM lapsed
    UNION ALL SELECT id, priority, run_at FROM keyed WHERE rank <= free
),
picked AS MATERIALIZED (
    SELECT c.id FROM candidates AS c
    ORDER BY {claim_order(alias = c)}
    LIMIT (SELECT a.allowed FROM allowance AS a)
),
counted AS (
    {count_moves(
        moves = (SELECT count(*) AS n FROM swept) AS m WHERE m.n > 0, dead_lettered = m.n
    )}
),
claimed AS (
    {claim_update}
),
held AS MATERIALIZED (
    SELECT a.*, f.found, a.allowed < least(%(n)s::bigint, f.found) AS throttled,
        f.found < a.allowed AND EXISTS (SELECT 1 FROM keyed WHERE rank > free) AS by_key
    FROM allowance AS a, (SELECT count(*) AS found FROM candidates) AS f
),
bucket AS (
    UPDATE @schema@.queue_controls AS k SET
        tokens = coalesce(h.tokens - (SELECT count(*) FROM picked), k.tokens),
        refilled_at = CASE WHEN h.tokens IS NULL THEN k.refilled_at ELSE @schema@.alk_now() END,
        throttled_running = k.throttled_running + (
            h.throttled AND h.max_running IS NOT NULL
            AND greatest(0, h.max_running - h.live) = h.allowed
        )::integer,
        throttled_rate = k.throttled_rate + (
            h.throttled AND h.tokens IS NOT NULL AND pg_catalog.floor(h.tokens) = h.allowed
        )::integer,
        throttled_per_key = k.throttled_per_key + h.by_key::integer
    FROM held AS h
    WHERE k.queue = %(queue)s::text
)
SELECT * FROM claimed;

-- name: set_limits
-- Q18.11: the queue's limits (NULL: none), in the pause's transaction (set_paused: the
-- jobs table in SHARE mode first, so every claim after it sees the new limits). With
-- `refill`, or when the queue had no rate, the bucket starts full (tokens = burst);
-- else it keeps its tokens, refilled to now at the old rate. The queue is woken (NOTIFY,
-- at commit): looser limits may let its idle workers claim.
WITH control AS (
    INSERT INTO @schema@.queue_controls AS c (
        queue, updated_at, max_running, rate_per_s, burst, tokens, refilled_at,
        max_running_per_key
    )
    VALUES (
        %(queue)s::text, @schema@.alk_now(), %(max_running)s::integer,
        %(rate_per_s)s::float8, %(burst)s::integer, coalesce(%(burst)s::float8, 0),
        @schema@.alk_now(), %(max_running_per_key)s::integer
    )
    ON CONFLICT (queue) DO UPDATE SET
        updated_at = EXCLUDED.updated_at,
        max_running = EXCLUDED.max_running,
        max_running_per_key = EXCLUDED.max_running_per_key,
        rate_per_s = EXCLUDED.rate_per_s,
        burst = EXCLUDED.burst,
        tokens = CASE
            WHEN %(refill)s::boolean OR c.rate_per_s IS NULL OR EXCLUDED.rate_per_s IS NULL
                THEN EXCLUDED.tokens
            ELSE least(
                EXCLUDED.burst::float8,
                c.tokens + c.rate_per_s * greatest(
                    0, pg_catalog.date_part('epoch', EXCLUDED.refilled_at - c.refilled_at)
                )
            )
        END,
        refilled_at = EXCLUDED.refilled_at
    RETURNING 1
)
SELECT pg_catalog.pg_notify(%(channel)s::text, '') FROM control;

-- name: wake
-- Q18.7: wake the queue (NOTIFY): settling a limited queue's jobs freed slots. The
-- payload '0' is R11's "due now": a worker that waited for a later time (the lease lapse
-- of Q18.9) looks the queue's next due time up again after a short claim.
SELECT pg_catalog.pg_notify(%(channel)s::text, '0');

-- Q21 the worker registry: one statement per beat of a worker, never per job.

-- name: beat_worker
-- Q21.2/Q21.4: a start (start = true) or a beat writes the worker's row (a start afresh;
-- a beat keeps started_at, and makes a purged row again), and deletes up to purge_batch
-- other rows unheard of for purge_after_s, the oldest first (SKIP LOCKED: two workers
-- purging at once take different rows). Both parts see one snapshot and one clock read.
WITH t AS (SELECT @schema@.alk_now() AS now),
purged AS (
    DELETE FROM @schema@.workers AS w
    WHERE w.worker_id IN (
        SELECT o.worker_id
        FROM @schema@.workers AS o, t
        WHERE o.heartbeat_at < t.now - %(purge_after_s)s::float8 * interval '1 second'
            AND o.worker_id <> %(worker_id)s::text
        ORDER BY o.heartbeat_at
        LIMIT %(purge_batch)s::integer
        FOR UPDATE OF o SKIP LOCKED
    )
    RETURNING 1
)
INSERT INTO @schema@.workers AS c (
    worker_id, host, pid, queues, concurrency, version, started_at, heartbeat_at, stopped_at
)
SELECT
    %(worker_id)s::text, %(host)s::text, %(pid)s::integer, %(queues)s::text[],
    %(concurrency)s::integer, %(version)s::text, t.now, t.now, NULL
FROM t, (SELECT count(*) FROM purged) AS p
ON CONFLICT (worker_id) DO UPDATE SET
    host = EXCLUDED.host,
    pid = EXCLUDED.pid,
    queues = EXCLUDED.queues,
    concurrency = EXCLUDED.concurrency,
    version = EXCLUDED.version,
    started_at = CASE WHEN %(start)s::boolean THEN EXCLUDED.started_at ELSE c.started_at END,
    heartbeat_at = EXCLUDED.heartbeat_at,
    stopped_at = NULL;

-- name: stop_worker
-- Q21.2: a graceful stop: the row beats and is stopped now (a missing row stays missing).
UPDATE @schema@.workers
SET heartbeat_at = @schema@.alk_now(), stopped_at = @schema@.alk_now()
WHERE worker_id = %(worker_id)s::text;

-- name: list_workers
-- Q21.4: up to limit rows, the latest beat first (ties by worker_id, code point order as
-- the in-memory engine's), each with the clock read.
SELECT worker_id, host, pid, queues, concurrency, version, started_at, heartbeat_at,
    stopped_at, @schema@.alk_now()
FROM @schema@.workers
ORDER BY heartbeat_at DESC, worker_id COLLATE "C"
LIMIT %(limit)s::integer;
