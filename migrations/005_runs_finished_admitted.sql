-- The console's Overview charts the runs finished in the last 15 minutes (a range of finished_at),
-- and its Runs page lists runs newest admission first: unfiltered, by status, by workflow or by
-- admission time (by tenant, runs_tenant_admitted serves it). Without these each read the whole
-- table. `runs` has no namespace column, so no index leads with one.
CREATE INDEX IF NOT EXISTS runs_finished ON runs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS runs_admitted ON runs (admitted_at DESC);
CREATE INDEX IF NOT EXISTS runs_status_admitted ON runs (status, admitted_at DESC);
