-- Migration 4: queue controls (Q18). The schema placeholder is replaced by the quoted
-- schema name.

-- Per queue, its controls: paused or not. A queue without a row is not paused; pause()
-- writes the row and resume() keeps it (paused = false). Later controls of a queue (a
-- concurrency limit, a rate) are more columns of this row, read by the same gate.
CREATE TABLE @schema@.queue_controls (
    queue text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL
);

-- Q18: the advisory lock key of one queue of this schema (claims take it shared, pause
-- exclusive). Two queues whose keys collide only wait for each other's pauses.
CREATE FUNCTION @schema@.alk_queue_lock_key(q text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $alk$SELECT pg_catalog.hashtextextended('alkstore_trio:queue:@schema@.' || q, 0)$alk$;

-- Q18: the pause barrier of one claim, called once by every claim statement. A claim's
-- statement reads the rows in the snapshot of its start, which may predate a pause that
-- commits while it runs; so the paused flag is not read there. This function first
-- takes the queue's advisory lock in shared mode (held to the claim's commit), then
-- reads the flag with a snapshot of its own, taken after the lock was granted (a
-- VOLATILE function's queries each take a fresh snapshot under READ COMMITTED). pause()
-- writes the flag and takes the same lock in exclusive mode in one transaction, so it
-- waits for every claim holding the lock (they saw the queue open and commit first),
-- and every later claim waits for pause() to commit and then sees the flag. Claims never
-- wait for each other (shared mode), write nothing, and take no row lock.
CREATE FUNCTION @schema@.alk_claim_gate(q text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $alk$
DECLARE
    open boolean;
BEGIN
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(@schema@.alk_queue_lock_key(q));
    SELECT NOT EXISTS (
        SELECT FROM @schema@.queue_controls AS c WHERE c.queue = q AND c.paused
    ) INTO open;
    RETURN open;
END
$alk$;
