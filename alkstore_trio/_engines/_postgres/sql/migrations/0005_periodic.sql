-- Migration 5: periodic jobs (Q17). The schema placeholder is replaced by the quoted
-- schema name.

-- One row per schedule name, written only by fire_periodic (workers) in the transaction
-- that enqueues the schedule's jobs: that transaction holds the row's lock, so each fire
-- time is enqueued at most once across every worker and host. Times are the database's
-- clock (alk_now()). A new table only: no lock on jobs or dead_jobs, no rewrite; workers
-- of version 4 keep working (they never touch it).
CREATE TABLE @schema@.periodic (
    name text PRIMARY KEY,
    -- The last declaring worker's definition (last writer wins, Q17.3).
    queue text NOT NULL,
    expression text NOT NULL,
    tz text NOT NULL,
    -- The next fire time; NULL only inside the transaction that (re)defines the row.
    next_fire_at timestamptz,
    -- The latest fire time that got a job.
    last_fire_at timestamptz,
    -- When a worker last declared the schedule: rows unseen for long list as stale.
    last_seen_at timestamptz NOT NULL
);
