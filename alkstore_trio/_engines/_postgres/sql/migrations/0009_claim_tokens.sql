-- Migration 9: claim tokens (Q19.8). The schema placeholder is replaced by the quoted
-- schema name.

-- Each claim's token, drawn by the claiming client (62 random bits XOR the job's id),
-- checked by every operation on the claim instead of the attempt count; NULL while
-- pending. Dead rows keep the last claim's token like the other claim fields (D1).
-- Nullable columns without a default: catalog-only changes, no table rewrite.
ALTER TABLE @schema@.jobs ADD COLUMN claim_token bigint;
ALTER TABLE @schema@.dead_jobs ADD COLUMN claim_token bigint;

-- The rows being processed get a token, so the constraint below holds for them. Their
-- holders (workers of version 8) still check the attempt count and finish them; nobody
-- holds these tokens, and the next claim of each row draws a new one.
UPDATE @schema@.jobs SET claim_token = (pg_catalog.random() * 4611686018427387903)::bigint
    WHERE state = 'processing';

-- A worker of version 8 claims without a token: its claim is refused by name ("violates
-- check constraint jobs_claim_needs_v9_workers") instead of handing out a claim that
-- this version's operations cannot fence (see docs/how-to/migrate.md, version 9).
-- NOT VALID, then VALIDATE: the check of the existing rows runs under SHARE UPDATE
-- EXCLUSIVE, not the ACCESS EXCLUSIVE lock of the ADD.
ALTER TABLE @schema@.jobs ADD CONSTRAINT jobs_claim_needs_v9_workers
    CHECK (state <> 'processing' OR claim_token IS NOT NULL) NOT VALID;
ALTER TABLE @schema@.jobs VALIDATE CONSTRAINT jobs_claim_needs_v9_workers;
