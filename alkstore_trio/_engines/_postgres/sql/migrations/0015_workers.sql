-- Migration 15: the worker registry (Q21). The schema placeholder is replaced by the
-- quoted schema name.

-- One row per worker id, written only by that worker (start, a beat every 15 s, stop)
-- and deleted by any worker's beat a day after its last beat. Times are the database's
-- clock (alk_now()). A new table only: no lock on jobs or dead_jobs, no rewrite; workers
-- of version 14 keep working (they never touch it, and simply do not register).
CREATE TABLE @schema@.workers (
    worker_id text PRIMARY KEY,
    host text NOT NULL,
    pid integer NOT NULL,
    -- The queues it serves (empty: a scheduler-only worker) and its total slots.
    queues text[] NOT NULL,
    concurrency integer NOT NULL,
    -- The library version it runs ('' when unknown).
    version text NOT NULL,
    started_at timestamptz NOT NULL,
    -- Its last beat (for a stopped worker: its stop).
    heartbeat_at timestamptz NOT NULL,
    -- Set by a graceful stop; NULL while it runs (or after it crashed).
    stopped_at timestamptz
);
-- The listing (latest beat first) and the purge (oldest first, a batch at a time).
CREATE INDEX workers_heartbeat_idx ON @schema@.workers (heartbeat_at);
