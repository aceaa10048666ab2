-- Migration 15: a placeholder on the `filters` branch only. Migration 15 belongs to the
-- worker registry (branch `registry`), written at the same time; this file stands in for
-- it so that migration 16 can be numbered as it will be after the merge. It changes
-- nothing. At the merge, delete this file and keep the registry's migration 15.
SELECT 1 FROM @schema@.alk_schema_version LIMIT 0;
