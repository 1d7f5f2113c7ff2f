-- A record the ingress refused is a producer's bytes, never a run: the DLQ sink no longer decodes
-- one as a run (a producer could write a RunRequested naming any tenant's run). Rows archived
-- before that keep the bytes but lose the decoded run, so no view or replay takes it for one.
UPDATE dead_letter_events SET payload_json = NULL
 WHERE payload_json IS NOT NULL AND original_topic = namespace || 'sluice.runs.requests';
