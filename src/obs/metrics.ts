import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { ScrapeCollectors } from './scrape-collectors.js';

/**
 * Buckets of the times measured from a run's admission: interactive runs in seconds, batch runs
 * up to the longest deadline (24 h).
 */
const SINCE_ADMISSION_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400];

/**
 * Every metric Sluice exports, in one registry per process. Names follow Prometheus conventions
 * (`_total` counters, `_seconds` durations); label values are bounded sets (tenants, workflows and
 * dependencies come from config, never from request data).
 */
export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'sluice_process_' });
  // Gauges named like counters (promtool check metrics refuses them); the same counts by type
  // stay, as `sluice_process_nodejs_active_{handles,requests,resources}`.
  for (const kind of ['handles', 'requests', 'resources']) registry.removeSingleMetric(`sluice_process_nodejs_active_${kind}_total`);
  const r = [registry];
  const scrapeErrors = new Counter({ name: 'sluice_scrape_errors_total', help: 'Scrape-time reads that failed or timed out; their gauges were left out of that scrape', labelNames: ['collector'], registers: r });
  return {
    registry,
    httpRequests: new Counter({ name: 'sluice_http_requests_total', help: 'HTTP requests answered by the submit adapter, by outcome class (see sluice_http_request_duration_seconds)', labelNames: ['route', 'method', 'status', 'outcome'], registers: r }),
    httpDuration: new Histogram({
      name: 'sluice_http_request_duration_seconds',
      help: 'Time to answer an HTTP request; outcome: admitted, queued, deferred, rejected (a submission\'s admission answer), error (a submission answered otherwise), other (reads, idempotent replays, health, admin, metrics)',
      labelNames: ['route', 'method', 'outcome'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: r,
    }),
    sseStreams: new Gauge({ name: 'sluice_sse_streams_open', help: 'Run status event streams (SSE) open on this instance', registers: r }),
    runsSubmitted: new Counter({ name: 'sluice_runs_submitted_total', help: 'Runs acknowledged by Kafka and accepted: answered with 202, or queued by the ingress', labelNames: ['tenant', 'workflow', 'class'], registers: r }),
    submitFailures: new Counter({ name: 'sluice_submit_failures_total', help: 'Submissions refused because Kafka did not acknowledge in time', labelNames: ['reason'], registers: r }),
    admissionRecordFailures: new Counter({ name: 'sluice_admission_record_failures_total', help: 'Admitted runs whose read-model row could not be written at once (the status sink repairs it)', registers: r }),
    admissionRowsPending: new Gauge({ name: 'sluice_admission_rows_pending', help: 'Admitted runs whose read-model row is queued or being written (write-behind; reads answer them from the queue)', registers: r }),
    admissionRowsBatchSize: new Histogram({ name: 'sluice_admission_rows_batch_size', help: 'Rows per write of admitted runs\' read-model rows', buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000], registers: r }),
    admissionRowsWriteSeconds: new Histogram({
      name: 'sluice_admission_rows_write_seconds',
      help: 'Time to write one batch of admitted runs\' read-model rows, retries included',
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30],
      registers: r,
    }),
    admissionRowsWriteFailures: new Counter({ name: 'sluice_admission_rows_write_failures_total', help: 'Failed tries to write a batch of admitted runs\' read-model rows (each is retried with backoff)', registers: r }),
    bucketRefusalsFromMemory: new Counter({
      name: 'sluice_admission_bucket_refusals_from_memory_total',
      help: 'Token-bucket refusals (submit and read buckets) answered from this instance\'s memory of an earlier refusal, without a Redis round trip',
      labelNames: ['bucket'],
      registers: r,
    }),
    admissions: new Counter({ name: 'sluice_admission_total', help: 'Admission decisions at the submit adapter', labelNames: ['tenant', 'class', 'outcome', 'reason'], registers: r }),
    admissionObserved: new Counter({
      name: 'sluice_admission_observed_total',
      help: 'Refusals computed for tenants in observe-only mode (the run was admitted anyway)',
      labelNames: ['tenant', 'class', 'outcome', 'reason'],
      registers: r,
    }),
    ingressEvents: new Counter({
      name: 'sluice_ingress_events_total',
      help: 'Records of the ingress topic handled, by outcome: admitted, queued, deferred, rejected (admission\'s answer), duplicate (answered from the idempotency key), dead_lettered (bad signature, unknown tenant, undecodable or invalid)',
      labelNames: ['outcome'],
      registers: r,
    }),
    ingressStaleRecords: new Counter({
      name: 'sluice_ingress_stale_records_total',
      help: 'Ingress requests rejected deadline_unreachable because their record was older than ingress.maxRecordAgeMs when first read (an ingress outage or a lagging ingress group)',
      labelNames: ['tenant'],
      registers: r,
    }),
    ingressSeconds: new Histogram({
      name: 'sluice_ingress_record_seconds',
      help: 'Time from reading an ingress record to its outcome published (status event or dead letter), by outcome; a record tried again after an outage counts its last try',
      labelNames: ['outcome'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15],
      registers: r,
    }),
    idempotentReplays: new Counter({ name: 'sluice_idempotent_replays_total', help: 'Requests answered from an Idempotency-Key record instead of running again', labelNames: ['tenant'], registers: r }),
    runsStarted: new Counter({ name: 'sluice_runs_started_total', help: 'Run attempts started by processors', labelNames: ['tenant', 'workflow', 'class'], registers: r }),
    runsFinished: new Counter({ name: 'sluice_runs_finished_total', help: 'Run attempts that reached an outcome', labelNames: ['tenant', 'workflow', 'class', 'status'], registers: r }),
    runsOnTime: new Counter({
      name: 'sluice_runs_on_time_total',
      help: 'Runs completed with a real answer (not a fallback stand-in) by their deadline, once per run over all its attempts and processors: goodput',
      labelNames: ['tenant', 'workflow', 'class'],
      registers: r,
    }),
    runsDegraded: new Counter({
      name: 'sluice_runs_degraded_total',
      help: 'Runs completed with a fallback stand-in answer (result.degraded true), once per run; sluice_fallbacks_total counts each stand-in',
      labelNames: ['tenant', 'workflow', 'class'],
      registers: r,
    }),
    providerCallsWasted: new Counter({
      name: 'sluice_provider_calls_wasted_total',
      help: 'Calls to LLM and rate-limited dependencies, over all attempts, of runs that ended without a real answer, by how they ended: failed, dead_lettered, expired, cancelled, degraded',
      labelNames: ['dependency', 'reason'],
      registers: r,
    }),
    runDuration: new Histogram({
      name: 'sluice_run_execution_seconds',
      help: 'Time from a run attempt starting to its outcome',
      labelNames: ['workflow', 'status'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
      registers: r,
    }),
    stepCalls: new Counter({ name: 'sluice_step_calls_total', help: 'Outbound LLM and tool calls', labelNames: ['dependency', 'outcome'], registers: r }),
    retryBudgetExhausted: new Counter({ name: 'sluice_retry_budget_exhausted_total', help: 'Retryable step failures not retried because the dependency\'s retry budget was spent', labelNames: ['dependency'], registers: r }),
    retryBudgetLocalDecisions: new Counter({ name: 'sluice_retry_budget_local_decisions_total', help: 'Retries decided by this process\'s own budget because the shared retry budget in Redis did not answer', labelNames: ['dependency'], registers: r }),
    stepRetries: new Counter({ name: 'sluice_step_retries_total', help: 'Step calls retried after a retryable failure (the only retry layer)', labelNames: ['dependency'], registers: r }),
    stepDuration: new Histogram({
      name: 'sluice_step_call_seconds',
      help: 'Duration of outbound LLM and tool calls',
      labelNames: ['dependency', 'outcome'],
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: r,
    }),
    queueWait: new Histogram({
      name: 'sluice_run_queue_wait_seconds',
      help: 'Time a run waited inside a processor, from being read off Kafka to getting its permits (or being dropped as expired); the time since admission, Kafka included, is sluice_run_wait_since_admission_seconds',
      labelNames: ['class'],
      buckets: [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers: r,
    }),
    queueDepth: new Gauge({ name: 'sluice_processor_queue_depth', help: 'Runs waiting in this processor for permits', labelNames: ['class'], registers: r }),
    queueOldestAge: new Gauge({ name: 'sluice_processor_queue_oldest_age_seconds', help: 'Age of the longest-waiting run in this processor', labelNames: ['class'], registers: r }),
    permitLeasesLost: new Counter({ name: 'sluice_permit_leases_lost_total', help: 'Permit leases that expired while their holder still ran (caps may have been exceeded)', registers: r }),
    runsInFlight: new Gauge({ name: 'sluice_processor_runs_in_flight', help: 'Runs executing in this processor instance', registers: r }),
    bufferedRecords: new Gauge({ name: 'sluice_processor_buffered_records', help: 'Records read ahead and not yet finished, per partition', labelNames: ['topic', 'partition'], registers: r }),
    pausedPartitions: new Gauge({ name: 'sluice_processor_paused_partitions', help: 'Partitions paused because their read-ahead buffer is full or all their buffered work waits for an open dependency', labelNames: ['reason'], registers: r }),
    breakerState: new Gauge({ name: 'sluice_breaker_state', help: 'Breaker state of a dependency as this instance sees it: 0 closed, 1 half-open, 2 open', labelNames: ['dependency'], registers: r }),
    breakerTransitions: new Counter({ name: 'sluice_breaker_transitions_total', help: 'Breaker transitions announced, as seen by this instance (every instance sees each one: aggregate with max, not sum)', labelNames: ['dependency', 'from', 'to'], registers: r }),
    breakerRefusals: new Counter({ name: 'sluice_breaker_refusals_total', help: 'Calls not made because the dependency\'s breaker refused them', labelNames: ['dependency'], registers: r }),
    pacingWait: new Histogram({
      name: 'sluice_pacing_wait_seconds',
      help: 'Time a dependency call waited in the processor for its turn under the dependency\'s rate limits (0 when it went at once)',
      labelNames: ['dependency'],
      buckets: [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers: r,
    }),
    pacingDeferred: new Counter({ name: 'sluice_pacing_deferred_total', help: 'Dependency calls not made because their turn under the rate limits was further away than a processor waits; their runs went to the retry topic or their fallback', labelNames: ['dependency', 'class'], registers: r }),
    pacingTurns: new Counter({ name: 'sluice_pacing_turns_total', help: 'Provider turns booked for calls to a rate-limited dependency, per tenant', labelNames: ['dependency', 'tenant'], registers: r }),
    dependencyRateLimit: new Gauge({
      name: 'sluice_dependency_rate_limit',
      help: 'Per-minute limit a dependency\'s calls are paced at, by bucket (requests_per_second is shown per minute too), lowered while it ramps up after its breaker closed; source: config, or observed when the provider reported a lower one',
      labelNames: ['dependency', 'bucket', 'source'],
      registers: r,
    }),
    runsHeld: new Gauge({ name: 'sluice_processor_runs_held', help: 'Runs held in this processor because a dependency they need is open (sum across processors for the cluster)', labelNames: ['dependency', 'tenant', 'class'], registers: r }),
    agentTurns: new Counter({ name: 'sluice_agent_turns_total', help: 'Model turns of agent steps answered (journaled turns a resumed run reuses are not counted again)', labelNames: ['workflow'], registers: r }),
    agentToolCalls: new Counter({ name: 'sluice_agent_tool_calls_total', help: 'Tool calls agent steps made, by whether the model got a result or an is_error result', labelNames: ['dependency', 'outcome'], registers: r }),
    agentStops: new Counter({ name: 'sluice_agent_stops_total', help: 'Agent steps ended by a bound (the field named in the label) before the model answered', labelNames: ['bound'], registers: r }),
    fallbacks: new Counter({ name: 'sluice_fallbacks_total', help: 'Runs or steps answered by the tenant\'s fallback policy because a dependency was unavailable', labelNames: ['tenant', 'dependency', 'policy'], registers: r }),
    runRetries: new Counter({ name: 'sluice_run_retries_total', help: 'Runs re-enqueued on the retry topic', labelNames: ['reason'], registers: r }),
    deadLettered: new Counter({ name: 'sluice_dead_letters_total', help: 'Records sent to the DLQ topic', labelNames: ['topic', 'reason'], registers: r }),
    processorInfraFailures: new Counter({
      name: 'sluice_processor_infra_failures_total',
      help: 'Run attempts that failed on the infrastructure (Redis, Kafka), by operation, and whether the run was tried again or dead-lettered',
      labelNames: ['operation', 'decision'],
      registers: r,
    }),
    dlqArchived: new Counter({ name: 'sluice_dlq_archived_total', help: 'Dead letters archived in Postgres by the DLQ sink', labelNames: ['tenant', 'reason'], registers: r }),
    dlqArchiveLag: new Histogram({
      name: 'sluice_dlq_archive_lag_seconds',
      help: 'Time from a record\'s last failure to its archive row',
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600],
      registers: r,
    }),
    dlqArchiveFailures: new Counter({ name: 'sluice_dlq_archive_failures_total', help: 'Archive batches that failed and were retried (Postgres unavailable)', registers: r }),
    dlqRows: new Gauge({ name: 'sluice_dlq_rows', help: 'DLQ archive rows by status (pending, replayed, discarded), as the DLQ sink last counted', labelNames: ['status'], registers: r }),
    statusEventsApplied: new Counter({ name: 'sluice_status_events_applied_total', help: 'Status events written to Postgres by the status sink', registers: r }),
    statusSinkBatchSeconds: new Histogram({
      name: 'sluice_status_sink_batch_seconds',
      help: 'Time to write one batch of status events to Postgres',
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5],
      registers: r,
    }),
    sinkPoison: new Counter({
      name: 'sluice_sink_poison_total',
      help: 'Records Postgres refused for good, set aside so their partition flows: status events dead-lettered (postgres_rejected), dead letters archived in minimal form (unarchivable) or not at all (not_archived)',
      labelNames: ['sink', 'reason'],
      registers: r,
    }),
    sinkWriteRetries: new Counter({
      name: 'sluice_sink_write_retries_total',
      help: 'Sink writes to Postgres retried: transient (Postgres unavailable) or systemic (every record refused, not for its data: the schema or the deploy)',
      labelNames: ['sink', 'cause'],
      registers: r,
    }),
    readRefusals: new Counter({ name: 'sluice_read_refusals_total', help: 'Reads of runs (GET, event-stream connect, DELETE) answered 429: over the read bucket (rate_limited) or the tenant\'s event streams on this instance (streams_full)', labelNames: ['tenant', 'reason'], registers: r }),
    readLimitFallbacks: new Counter({ name: 'sluice_read_limit_fallbacks_total', help: 'Read-limit checks decided by this instance\'s own bucket because the read bucket in Redis did not answer in time', labelNames: ['tenant'], registers: r }),
    scrapeErrors,
    /** Reads behind gauges kept in a dependency, run before each render (see ScrapeCollectors). */
    scrapeCollectors: new ScrapeCollectors(scrapeErrors),
    admissionOutageDecisions: new Counter({
      name: 'sluice_admission_outage_decisions_total',
      help: 'Submissions decided by the outage policy because a dependency of the submit path (redis, postgres, kafka) failed',
      labelNames: ['dependency', 'policy', 'outcome'],
      registers: r,
    }),
    backlogLimit: new Gauge({
      name: 'sluice_admission_backlog_limit',
      help: 'Admitted-but-unfinished runs a tenant may have (tenants.<id>.admission.maxBacklog); beyond it submissions get 429 tenant_backlog_full',
      labelNames: ['tenant'],
      registers: r,
    }),
    globalBacklogLimit: new Gauge({
      name: 'sluice_admission_backlog_global_limit',
      help: 'Admitted-but-unfinished runs over all tenants (admission.maxBacklog); beyond it submissions get 503 overloaded',
      registers: r,
    }),
    submitCleanupFailures: new Counter({
      name: 'sluice_submit_cleanup_failures_total',
      help: 'Submissions whose backlog entry, Idempotency-Key claim or answer marks (pending, answered, not acknowledged) could not be written or settled',
      labelNames: ['step'],
      registers: r,
    }),
    runWaitSinceAdmission: new Histogram({
      name: 'sluice_run_wait_since_admission_seconds',
      help: 'Time from a run\'s admission to its attempt starting in a processor, time in Kafka included; observed for attempts that start from an admission (the first, or a DLQ replay), not for run-level retries',
      labelNames: ['class'],
      buckets: SINCE_ADMISSION_BUCKETS,
      registers: r,
    }),
    runFirstOutput: new Histogram({
      name: 'sluice_run_first_output_seconds',
      help: 'Time from a run\'s admission to its first step answered by its dependency, once per run (never for a step taken from the journal)',
      labelNames: ['class'],
      buckets: SINCE_ADMISSION_BUCKETS,
      registers: r,
    }),
    runEndToEnd: new Histogram({
      name: 'sluice_run_end_to_end_seconds',
      help: 'Time from a run\'s admission to its terminal status (completed, failed, expired, cancelled), observed by the processor that publishes it',
      labelNames: ['class', 'status'],
      buckets: SINCE_ADMISSION_BUCKETS,
      registers: r,
    }),
    llmTokens: new Counter({
      name: 'sluice_llm_tokens_total',
      help: 'Tokens of LLM responses by kind (input, output, cache_read, cache_creation), as the responses\' usage reports them (an implausible output count replaced: sluice_llm_implausible_usage_total); model: the configured model the response names, else its dependency\'s',
      labelNames: ['tenant', 'workflow', 'model', 'kind'],
      registers: r,
    }),
    llmCost: new Counter({
      name: 'sluice_llm_cost_usd_total',
      help: 'US dollars of LLM responses, from their usage and the pricing config; model as in sluice_llm_tokens_total (responses of an unpriced model count in sluice_llm_unpriced_tokens_total instead)',
      labelNames: ['tenant', 'workflow', 'model'],
      registers: r,
    }),
    llmImplausibleUsage: new Counter({
      name: 'sluice_llm_implausible_usage_total',
      help: 'LLM answers whose usage reported fewer output tokens than their bytes can be (at 16 bytes a token); their output is counted at 4 bytes a token instead',
      labelNames: ['dependency'],
      registers: r,
    }),
    llmUnpricedTokens: new Counter({
      name: 'sluice_llm_unpriced_tokens_total',
      help: 'Tokens (all four kinds) of LLM responses whose model no pricing entry matches: their cost is unknown, not zero',
      labelNames: ['tenant', 'workflow', 'model'],
      registers: r,
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
