-- Migration 2: per-queue counters of the jobs that left the live table (D27). The schema
-- placeholder is replaced by the quoted schema name.

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
