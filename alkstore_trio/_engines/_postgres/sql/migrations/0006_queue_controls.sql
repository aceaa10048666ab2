-- Migration 6: queue controls (Q18). The schema placeholder is replaced by the quoted
-- schema name.

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
CREATE TABLE @schema@.queue_controls (
    queue text PRIMARY KEY,
    paused boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL
);
