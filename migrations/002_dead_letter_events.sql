-- The DLQ archive: every record that could not be processed, with its original bytes
-- and failure context, until an operator replays or discards it. One row per original record:
-- a record dead-lettered twice (its consumer died before committing) is archived once.
CREATE TABLE IF NOT EXISTS dead_letter_events (
  id                  bigserial   PRIMARY KEY,
  original_topic      text        NOT NULL,
  original_partition  integer     NOT NULL,
  original_offset     bigint      NOT NULL,
  original_key        bytea,
  consumer_group      text        NOT NULL,
  tenant_id           text,
  workflow            text,
  run_id              uuid,
  reason              text        NOT NULL,
  payload             bytea       NOT NULL,
  payload_json        jsonb,
  headers             jsonb       NOT NULL,
  error_class         text        NOT NULL,
  error_message       text        NOT NULL,
  error_stack         text,
  attempts            integer     NOT NULL,
  first_failed_at     timestamptz NOT NULL,
  failed_at           timestamptz NOT NULL,
  archived_at         timestamptz NOT NULL DEFAULT now(),
  status              text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'replayed', 'discarded')),
  replay_count        integer     NOT NULL DEFAULT 0,
  replayed_at         timestamptz,
  replayed_by         text,
  discarded_at        timestamptz,
  discarded_by        text,
  discard_reason      text,
  UNIQUE (original_topic, original_partition, original_offset)
);

CREATE INDEX IF NOT EXISTS dead_letter_events_status_failed ON dead_letter_events (status, failed_at DESC);
CREATE INDEX IF NOT EXISTS dead_letter_events_tenant_failed ON dead_letter_events (tenant_id, failed_at DESC);
CREATE INDEX IF NOT EXISTS dead_letter_events_run ON dead_letter_events (run_id);
