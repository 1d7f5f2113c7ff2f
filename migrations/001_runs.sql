-- Runs as callers see them, and every status transition (the SSE stream replays run_events).
CREATE TABLE IF NOT EXISTS runs (
  run_id          uuid PRIMARY KEY,
  tenant_id       text        NOT NULL,
  workflow        text        NOT NULL,
  class           text        NOT NULL CHECK (class IN ('interactive', 'batch')),
  status          text        NOT NULL,
  status_message  text        NOT NULL DEFAULT '',
  admitted_at     timestamptz NOT NULL,
  deadline        timestamptz NOT NULL,
  started_at      timestamptz,
  finished_at     timestamptz,
  attempts        integer     NOT NULL DEFAULT 0,
  result          jsonb,
  error           jsonb,
  last_sequence   bigint      NOT NULL,
  updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS runs_tenant_admitted ON runs (tenant_id, admitted_at DESC);
CREATE INDEX IF NOT EXISTS runs_open_status ON runs (status) WHERE status NOT IN ('completed', 'failed', 'expired', 'cancelled', 'dead_lettered');

CREATE TABLE IF NOT EXISTS run_events (
  run_id       uuid        NOT NULL,
  sequence     bigint      NOT NULL,
  status       text        NOT NULL,
  message      text        NOT NULL,
  step         text,
  attempt      integer     NOT NULL,
  occurred_at  timestamptz NOT NULL,
  result       jsonb,
  error        jsonb,
  PRIMARY KEY (run_id, sequence)
);
