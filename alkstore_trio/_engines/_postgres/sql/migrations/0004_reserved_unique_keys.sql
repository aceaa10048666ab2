-- Migration 4 belongs to the unique-keys branch (0004_unique_keys.sql). This file only
-- keeps the periodic branch's migration numbers contiguous until that branch is merged:
-- it reads one table and changes nothing, and the merge replaces it with the real
-- migration 4.
SELECT 1 FROM @schema@.alk_schema_version LIMIT 0;
