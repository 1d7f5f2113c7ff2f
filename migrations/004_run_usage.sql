-- Tokens and cost of each completed run's LLM calls, from the `usage` of its result (written by
-- the status sink with the run's terminal event; one row per run, the first write wins).
-- `sluice usage` sums it by tenant and workflow over a window of finished_at.
CREATE TABLE IF NOT EXISTS run_usage (
  run_id                       uuid        PRIMARY KEY,
  namespace                    text        NOT NULL DEFAULT '',
  tenant_id                    text        NOT NULL,
  workflow                     text        NOT NULL,
  class                        text        NOT NULL,
  finished_at                  timestamptz NOT NULL,
  llm_calls                    integer     NOT NULL CHECK (llm_calls >= 0),
  input_tokens                 bigint      NOT NULL CHECK (input_tokens >= 0),
  output_tokens                bigint      NOT NULL CHECK (output_tokens >= 0),
  cache_creation_input_tokens  bigint      NOT NULL CHECK (cache_creation_input_tokens >= 0),
  cache_read_input_tokens      bigint      NOT NULL CHECK (cache_read_input_tokens >= 0),
  -- NULL: some call's model had no price, so the run's cost is unknown (never counted as 0).
  cost_usd                     numeric     CHECK (cost_usd >= 0),
  by_model                     jsonb       NOT NULL
);

CREATE INDEX IF NOT EXISTS run_usage_namespace_finished ON run_usage (namespace, finished_at DESC);
