-- Migration 13: progress (Q19.7). The schema placeholder is replaced by the quoted
-- schema name.

-- The last progress text a running handler reported (a heartbeat carries it), NULL
-- until one was reported; copied into dead_jobs and completed_jobs by the moves, so
-- a dead or kept job shows how far it got. Nullable columns without a default:
-- catalog-only changes, no table rewrite (each takes its table's ACCESS EXCLUSIVE lock
-- for a moment).
ALTER TABLE @schema@.jobs ADD COLUMN progress text;
ALTER TABLE @schema@.dead_jobs ADD COLUMN progress text;
ALTER TABLE @schema@.completed_jobs ADD COLUMN progress text;
