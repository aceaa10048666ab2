-- Migration 7: queue limits (Q18.7-Q18.11). The schema placeholder is replaced by the
-- quoted schema name.

-- A queue's limits are more columns of its control row: max_running (Q18.7), the rate
-- limit's token bucket (Q18.9: rate_per_s, burst, and the tokens it held at
-- refilled_at), and how many claims each limit throttled (Q18.10). `limited` says
-- whether any limit is set: the fast claim statements read it with `paused` (one probe
-- of the primary key they make anyway) and hand out nothing from a limited queue; the
-- engine then claims from it with the limited claim (claim_limited in queries.sql),
-- which serializes the queue's claims on this row's lock.
ALTER TABLE @schema@.queue_controls
    ADD COLUMN max_running integer CHECK (max_running >= 1),
    ADD COLUMN rate_per_s double precision CHECK (rate_per_s > 0),
    ADD COLUMN burst integer CHECK (burst >= 1),
    ADD COLUMN tokens double precision NOT NULL DEFAULT 0,
    ADD COLUMN refilled_at timestamptz,
    ADD COLUMN throttled_running bigint NOT NULL DEFAULT 0,
    ADD COLUMN throttled_rate bigint NOT NULL DEFAULT 0,
    ADD COLUMN limited boolean NOT NULL
        GENERATED ALWAYS AS (max_running IS NOT NULL OR rate_per_s IS NOT NULL) STORED,
    ADD CONSTRAINT queue_controls_burst_with_rate CHECK ((burst IS NULL) = (rate_per_s IS NULL));
