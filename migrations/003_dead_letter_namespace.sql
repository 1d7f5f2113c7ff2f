-- Environments that share one database (SLUICE_NAMESPACE) each see only their own dead letters.
ALTER TABLE dead_letter_events ADD COLUMN IF NOT EXISTS namespace text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS dead_letter_events_namespace_status ON dead_letter_events (namespace, status, failed_at DESC);
