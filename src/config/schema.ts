import { isIP } from 'node:net';
import { z } from 'zod';
import { MAX_RAMP_UP_MS, rampUpMs } from './ramp-up.js';
import { toolSchemaProblem } from './tool-input-schema.js';
import { dependencyOf } from './workflows.js';

/**
 * The whole of Sluice's configuration. Every field is validated at start-up so that a typo
 * fails fast with the field's path instead of surfacing as a wrong decision under load.
 */

/**
 * Kafka's default message.max.bytes is 1,048,588 per record batch (one partition of a request),
 * 61 of them the batch header; this leaves room for the estimate to be off by tens of kilobytes.
 */
export const DEFAULT_MAX_BATCH_BYTES = 1_000_000;

const ms = (min: number, max: number) => z.number().int().min(min).max(max);
const sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, 'must be a lowercase hex SHA-256 of the key');
const name = z.string().regex(/^[a-z0-9][a-z0-9._-]{0,62}$/, 'must be lowercase letters, digits, ".", "_" or "-"');

export const ROLES = ['api', 'ingress', 'processor', 'status-sink', 'dlq-sink', 'lag-monitor', 'provider-sim'] as const;
export type Role = (typeof ROLES)[number];

export const RUN_CLASSES = ['interactive', 'batch'] as const;

/** `production` (the default) refuses demo keys, the simulator and local infrastructure; `dev` allows them. */
export const PROFILES = ['production', 'dev'] as const;

/** Retries of one dependency's calls: attempts, full-jitter backoff, and a retry budget shared by the dependency's callers. */
const retryPolicy = z
  .object({
    maxAttempts: z.number().int().min(1).max(10).default(2),
    baseMs: ms(1, 60_000).default(500),
    capMs: ms(1, 600_000).default(2_000),
    /** SRE retry budget: retries at most this share of the dependency's calls over the window… */
    budgetRatio: z.number().min(0).max(1).default(0.1),
    budgetWindowMs: ms(1_000, 3_600_000).default(60_000),
    /** …but always this many per window, so a quiet dependency can retry an isolated failure. */
    budgetMinRetries: z.number().int().min(0).max(100_000).default(10),
  })
  .prefault({});

/**
 * A dependency's circuit breaker (state shared in Redis by every instance). It opens when, over
 * the sliding window and with at least `minimumCalls` calls in it, failures reach
 * `failureThreshold` (a count rule) or the failure rate or slow-call rate reaches its
 * threshold (resilience4j's rate rules). After `openMs` it lets `halfOpenProbes` concurrent probe
 * calls through; `halfOpenSuccesses` successful probes close it, any failed probe opens it again.
 */
const breakerPolicy = z
  .object({
    windowMs: ms(1_000, 3_600_000).default(30_000),
    minimumCalls: z.number().int().min(1).max(100_000).default(5),
    failureThreshold: z.number().int().min(1).max(100_000).default(5),
    failureRateThreshold: z.number().gt(0).max(1).default(0.5),
    slowCallMs: ms(1, 900_000).default(60_000),
    slowCallRateThreshold: z.number().gt(0).max(1).default(1),
    openMs: ms(100, 3_600_000).default(5_000),
    halfOpenProbes: z.number().int().min(1).max(1_000).default(2),
    halfOpenSuccesses: z.number().int().min(1).max(1_000).default(2),
    /** A probe whose caller vanished frees its slot after this long. */
    probeLeaseMs: ms(100, 900_000).default(60_000),
    /**
     * Slow start once the breaker closes again: the dependency's concurrency cap is first
     * `initialFraction` of the one in force (at least 1) and grows by `stepFraction` of it every
     * `intervalMs` until whole, so the runs held while it was open do not all reach a provider
     * that has only just recovered. Absent: the whole cap at once.
     */
    rampUp: z
      .object({
        initialFraction: z.number().gt(0).max(1).default(0.1),
        stepFraction: z.number().gt(0).max(1).default(0.1),
        intervalMs: ms(100, 600_000).default(1_000),
      })
      .refine((r) => rampUpMs(r) <= MAX_RAMP_UP_MS, { message: 'must reach the whole cap within an hour: (1 - initialFraction) / stepFraction × intervalMs ≤ 3,600,000', path: ['stepFraction'] })
      .optional(),
  })
  .prefault({});

/** A call's budgets, kept separate: connect, read (idle between bytes) and total. */
const callTimeouts = z
  .object({
    connectMs: ms(10, 60_000),
    readMs: ms(10, 600_000),
    totalMs: ms(10, 900_000),
  })
  .refine((t) => t.totalMs >= t.connectMs, { message: 'totalMs must be at least connectMs', path: ['totalMs'] });

/**
 * What a dependency's provider allows, paced across every processor (lua/pacing-reserve.lua) so
 * calls are spaced out instead of learning the limits from 429s. Token limits are an LLM's only
 * (input and output counted apart, as Anthropic does); a lower limit the provider reports in its
 * response headers wins over these while it keeps reporting it.
 */
const rate = z.number().positive().max(1e9);
const rateLimit = z
  .object({
    requestsPerSecond: rate.optional(),
    requestsPerMinute: rate.optional(),
    inputTokensPerMinute: rate.optional(),
    outputTokensPerMinute: rate.optional(),
    /** How much may go at once after idling, as seconds of each limit's rate (a call never needs more than its cost). */
    burstSeconds: z.number().positive().max(60).default(1),
  })
  .refine((r) => r.requestsPerSecond !== undefined || r.requestsPerMinute !== undefined || r.inputTokensPerMinute !== undefined || r.outputTokensPerMinute !== undefined, 'needs at least one limit');

/**
 * A dependency's concurrency cap adapting to how it copes (AIMD, lua/adaptive-limit-update.lua):
 * every call that shows congestion (a 429, 408, 503 or 529, a timeout, or a success slower than
 * `latencyTargetMs`) multiplies the figure by `decreaseFactor`, at most once per `cooldownMs` so
 * one overload burst cuts it once, never below `min`; every other success adds 1/figure, about one
 * permit per figure's worth of successes, up to `max` (default: `maxConcurrency`). The figure lives
 * in Redis, shared by every processor, and an idle dependency's figure is forgotten after
 * `idleResetMs`, so it starts again from `max`. The cap in force is the lower of this figure and
 * the permit limit (at its ramp-up share). Absent: the permit limit alone.
 */
const adaptiveConcurrency = z
  .object({
    min: z.number().int().min(1).max(100_000),
    max: z.number().int().min(1).max(100_000).optional(),
    decreaseFactor: z.number().gt(0).lt(1).default(0.7),
    latencyTargetMs: ms(1, 900_000).optional(),
    cooldownMs: ms(0, 600_000).default(1_000),
    idleResetMs: ms(1_000, 86_400_000).default(600_000),
  })
  .refine((a) => a.max === undefined || a.max >= a.min, { message: 'must be at least min', path: ['max'] });

/** Token limits in a tool's `rateLimit`: tools are paced by requests only. */
const TOKEN_LIMITS = ['inputTokensPerMinute', 'outputTokensPerMinute'] as const;

const llmDependency = z.object({
  kind: z.literal('llm'),
  model: z.string().min(1),
  maxTokens: z.number().int().min(1).max(64_000).default(512),
  /**
   * Retries the Anthropic SDK makes itself, inside one call: it waits out `retry-after` holding
   * the run's slot and permits, unseen by breakers and retry budgets. 0 (the default) leaves
   * retrying to Sluice's one retry layer; the SDK's own default is 2. Only for comparing Sluice
   * with an SDK-default client (`bench scenario`'s naive system).
   */
  sdkMaxRetries: z.number().int().min(0).max(10).default(0),
  timeouts: callTimeouts,
  maxConcurrency: z.number().int().min(1).max(100_000),
  /**
   * While other tenants wait for this dependency's permits, a tenant may hold only an even split
   * of its cap (all of it while nobody else waits), so one tenant's burst cannot keep the others'
   * calls waiting behind it. false: first come, first served.
   */
  tenantFairShare: z.boolean().default(true),
  retry: retryPolicy,
  breaker: breakerPolicy,
  rateLimit: rateLimit.optional(),
  adaptiveConcurrency: adaptiveConcurrency.optional(),
});

const toolDependency = z.object({
  kind: z.literal('tool'),
  /** Absolute http(s) URL, or a path starting with "/" that is served by the provider simulator. */
  url: z.string().refine((u) => u.startsWith('/') || /^https?:\/\//.test(u), 'must be an http(s) URL or a simulator path starting with "/"'),
  /** What the tool does, as an agent's model reads it when choosing tools. */
  description: z.string().min(1).max(4_000).optional(),
  /** JSON Schema of the tool's input (`"type": "object"`): required for a tool an agent may use; each input a model sends is checked against it. */
  inputSchema: z.record(z.string(), z.unknown()).optional(),
  timeouts: callTimeouts,
  maxConcurrency: z.number().int().min(1).max(100_000),
  /**
   * While other tenants wait for this dependency's permits, a tenant may hold only an even split
   * of its cap (all of it while nobody else waits), so one tenant's burst cannot keep the others'
   * calls waiting behind it. false: first come, first served.
   */
  tenantFairShare: z.boolean().default(true),
  retry: retryPolicy,
  breaker: breakerPolicy,
  rateLimit: rateLimit.optional(),
  adaptiveConcurrency: adaptiveConcurrency.optional(),
});

const dependency = z.discriminatedUnion('kind', [llmDependency, toolDependency]);

/** US dollars per million tokens; zod's number is finite, so only a non-negative check is left. */
const usdPerMillion = z.number().min(0, 'must be a non-negative number of US dollars per million tokens');

/**
 * What one model's tokens cost. Cache writes and reads default to Anthropic's multipliers of the
 * input price (1.25× for a 5-minute cache write, 0.1× for a read) when not given.
 */
const modelPrice = z.object({
  inputPerMillionTokens: usdPerMillion,
  outputPerMillionTokens: usdPerMillion,
  cacheWritePerMillionTokens: usdPerMillion.optional(),
  cacheReadPerMillionTokens: usdPerMillion.optional(),
});

/**
 * Prices of LLM tokens by model. A key is a model name or a prefix of one (`claude-sonnet-4`
 * prices `claude-sonnet-4-6`); the longest matching key wins. A model no key matches has no known
 * cost: its tokens count in `sluice_llm_unpriced_tokens_total`, not as free.
 */
const pricing = z
  .object({
    models: z.record(z.string().min(1).max(200), modelPrice).default({}),
  })
  .prefault({});

const llmStep = z.object({
  id: name,
  kind: z.literal('llm'),
  dependency: name.default('anthropic'),
  system: z.string().min(1),
});

const toolStep = z.object({
  id: name,
  kind: z.literal('tool'),
  tool: name,
});

/**
 * A model-driven tool-use loop: the model reads the task, asks for tools (several at once run in
 * parallel), reads their results and asks again until it answers. Its bounds end a model that
 * never stops: turns (model calls), tool calls and tokens per run, and the share of the time left
 * to the run's deadline when the step starts.
 */
const agentStep = z.object({
  id: name,
  kind: z.literal('agent'),
  /** The LLM dependency the model turns call (its cap, breaker and pacing apply to each turn). */
  dependency: name.default('anthropic'),
  system: z.string().min(1).max(100_000),
  /** Tool dependencies the model may ask for; each needs an `inputSchema`. */
  tools: z
    .array(name)
    .min(1)
    .max(64)
    .refine((t) => new Set(t).size === t.length, 'must not name a tool twice'),
  /** Overrides the dependency's model for this agent. */
  model: z.string().min(1).optional(),
  /** Overrides the dependency's `maxTokens` (the answer's allowance per turn) for this agent. */
  maxTokens: z.number().int().min(1).max(64_000).optional(),
  bounds: z
    .object({
      maxTurns: z.number().int().min(1).max(100).default(8),
      maxToolCalls: z.number().int().min(0).max(1_000).default(20),
      /** Input and output tokens of all the model's turns in one run. */
      maxTokens: z.number().int().min(1).max(100_000_000).default(100_000),
      /** Tool calls of one turn that run at once; the rest wait for a free place. */
      maxParallelTools: z.number().int().min(1).max(32).default(4),
      /** The share of the time left to the run's deadline at the step's start that the step may use. */
      deadlineShare: z.number().gt(0).max(1).default(1),
    })
    .prefault({}),
});

const workflow = z.object({
  description: z.string().default(''),
  defaultClass: z.enum(RUN_CLASSES).default('interactive'),
  /** Runs of this workflow executing at once across all processors (changeable at run time). */
  maxConcurrency: z.number().int().min(1).max(1_000_000).default(32),
  steps: z.array(z.discriminatedUnion('kind', [llmStep, toolStep, agentStep])).min(1).max(50),
  /**
   * The declared answer a `degrade` tenant gets when a dependency is unavailable, returned as
   * `result.text` with `result.degraded: true`. Without it, unavailability fails the run.
   */
  fallback: z.object({ text: z.string().min(1).max(10_000) }).optional(),
  /**
   * Input+output tokens one run is assumed to use until enough runs were measured (token budgets).
   * Default: twice the `maxTokens` of each LLM step's dependency plus each agent's `bounds.maxTokens`, summed (src/admission/token-budget.ts).
   */
  tokenPrior: z.number().int().min(1).max(100_000_000).optional(),
});

/** A token bucket's size and refill (0: it never refills); Redis keeps its state. */
const tokenBucket = (defaults: { capacity: number; refillPerSec: number }) =>
  z
    .object({
      capacity: z.number().int().min(1).max(1_000_000).default(defaults.capacity),
      refillPerSec: z.number().min(0).max(1_000_000).default(defaults.refillPerSec),
    })
    .prefault({});

/** A safe rollout: a new limit first runs in `observe` (decide and count, admit anyway). */
const tenantAdmission = z
  .object({
    mode: z.enum(['enforce', 'observe']).default('enforce'),
    /** The entry bucket: capacity 60, refilled at 10 per second by default. */
    bucket: tokenBucket({ capacity: 60, refillPerSec: 10 }),
    /** Admitted-but-unfinished runs of this tenant; more is deferred with 429 tenant_backlog_full. */
    maxBacklog: z.number().int().min(1).max(10_000_000).default(500),
    /**
     * Input+output LLM tokens the tenant's runs may use, shared by every instance. Admission takes a
     * run's estimated tokens; the processor settles them against what the run used. Absent: no budget.
     */
    tokenBudget: z
      .object({
        tokensPerMinute: z.number().positive().max(1_000_000_000),
        /** The most tokens the budget holds (default: one minute's worth). */
        burstTokens: z.number().positive().max(1_000_000_000).optional(),
      })
      .transform((b) => ({ tokensPerMinute: b.tokensPerMinute, burstTokens: b.burstTokens ?? b.tokensPerMinute }))
      .optional(),
  })
  .prefault({});

/**
 * Bounds on one tenant's reads of its runs, so one tenant cannot take every event stream of an
 * instance or turn its reads into a Postgres load the others pay for.
 */
const tenantReads = z
  .object({
    /** Every `GET /v1/runs/:id`, event-stream connect and `DELETE /v1/runs/:id` takes a token (shared by all API instances). */
    bucket: tokenBucket({ capacity: 200, refillPerSec: 100 }),
    /** Event streams the tenant may hold open on one API instance (an instance serves 1,000 in all). */
    maxStreams: z.number().int().min(1).max(1_000).default(100),
  })
  .prefault({});

/**
 * Where the tenant's ingress secret (the HMAC key of `sluice-signature`) is read from at start-up.
 * Unlike an API key it cannot be stored as a digest (a verifier needs the key itself), so it is
 * never written in the config: an environment variable's name, or a file's path (a mounted
 * secret), exactly one of them. Without it the tenant cannot submit through the ingress topic.
 */
const tenantIngress = z
  .object({
    secretEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name').optional(),
    secretFile: z.string().min(1).optional(),
  })
  .refine((i) => (i.secretEnv === undefined) !== (i.secretFile === undefined), { message: 'give exactly one of secretEnv and secretFile' });

const tenant = z.object({
  apiKeySha256: sha256Hex,
  ingress: tenantIngress.optional(),
  description: z.string().default(''),
  fallback: z.enum(['degrade', 'fail']).default('degrade'),
  /** Runs of this tenant executing at once across all processors (changeable at run time). */
  maxConcurrency: z.number().int().min(1).max(1_000_000).default(16),
  /**
   * The tenant's weight in the fair sharing of every rate-limited dependency's turns: tenants that
   * want more than their share get turns in proportion to their weights, and what a tenant does
   * not use goes to the others.
   */
  weight: z.number().positive().max(1_000).default(1),
  admission: tenantAdmission,
  reads: tenantReads,
});

export const configSchema = z
  .object({
    profile: z.enum(PROFILES).default('production'),
    instanceId: z.string().min(1).max(100).optional(),
    roles: z.array(z.enum(ROLES)).min(1).default([...ROLES]),
    /**
     * Serves /healthz, /readyz and /metrics without credentials, for any process, with the api role
     * or not (0 = off), on `api.host`: an internal port for probes and Prometheus, never to be
     * reachable where tenants are (the API port's /metrics needs a key).
     */
    opsPort: z.number().int().min(0).max(65_535).default(0),
    stateDir: z.string().min(1).default('.sluice'),
    /** Prepended to every topic, consumer group and Redis key, so environments (or test runs) can share infrastructure. */
    namespace: z.string().regex(/^[a-zA-Z0-9._-]*$/, 'letters, digits, ".", "_" or "-" only').default(''),
    /** `sluice start` brings up Kafka/Redis/Postgres on this machine unless their env vars are set. */
    localInfra: z.boolean().default(false),
    logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
    kafka: z
      .object({
        brokers: z.array(z.string().regex(/^[^\s:]+:\d{1,5}$/, 'must be host:port')).min(1).default(['127.0.0.1:9092']),
        clientId: z.string().min(1).default('sluice'),
        partitions: z
          .object({
            interactive: z.number().int().min(1).max(1000).default(6),
            batch: z.number().int().min(1).max(1000).default(6),
            retry: z.number().int().min(1).max(1000).default(3),
            status: z.number().int().min(1).max(1000).default(6),
            dlq: z.number().int().min(1).max(1000).default(3),
            requests: z.number().int().min(1).max(1000).default(6),
          })
          .prefault({}),
        /** Copies of each partition of the topics Sluice creates; default min(3, live brokers). */
        replicationFactor: z.number().int().min(1).max(7).optional(),
        /** Copies that must hold a record before acks=all succeeds (a topic config); default 2 with 3+ copies, else 1. */
        minInsyncReplicas: z.number().int().min(1).max(7).optional(),
        /** How long the submit adapter waits for acks=all before answering 503 instead of 202. */
        produceTimeoutMs: ms(100, 60_000).default(5_000),
        sessionTimeoutMs: ms(6_000, 300_000).default(30_000),
        heartbeatIntervalMs: ms(100, 60_000).default(3_000),
        /**
         * Bytes of records (keys, values, headers, framing) one produce request carries; a single
         * larger record is refused alone. At most the broker's message.max.bytes minus 61.
         */
        maxBatchBytes: z.number().int().min(1_024).max(100 * 1024 * 1024).default(DEFAULT_MAX_BATCH_BYTES),
      })
      .prefault({}),
    redis: z
      .object({
        url: z.string().regex(/^rediss?:\/\//, 'must be a redis:// URL').default('redis://127.0.0.1:6379'),
        /**
         * Seed nodes of a Redis Cluster (`host:port`); when given, Sluice connects to the cluster
         * (credentials and TLS from `url`) and `url`'s host is not used.
         */
        cluster: z.array(z.string().regex(/^[^\s:]+:\d{1,5}$/, 'must be host:port')).min(1, 'name at least one node, or leave cluster out').optional(),
      })
      .prefault({}),
    postgres: z
      .object({
        url: z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgresql:// URL').default('postgresql://postgres@127.0.0.1:5432/sluice'),
        poolSize: z.number().int().min(1).max(200).default(10),
        statementTimeoutMs: ms(100, 600_000).default(5_000),
      })
      .prefault({}),
    schemaRegistry: z
      .object({
        /** A Confluent-compatible registry; when absent the file-backed registry in `dir` is used. */
        url: z.url().optional(),
        /** Defaults to `<stateDir>/schema-registry`; processes sharing it agree on ids. */
        dir: z.string().min(1).optional(),
        timeoutMs: ms(100, 60_000).default(5_000),
      })
      .prefault({}),
    api: z
      .object({
        host: z.string().default('127.0.0.1'),
        port: z.number().int().min(0).max(65_535).default(8080),
        publicUrl: z.url().optional(),
        /**
         * Which proxies in front of the API to believe: their X-Forwarded-For gives the client's
         * address (the failed-authentication throttle, logs) and X-Forwarded-Proto whether it came over
         * https (the console cookie's `Secure`). false (default): none, the headers are ignored;
         * true: any; a list: those addresses or CIDR ranges.
         */
        trustProxy: z
          .union([
            z.boolean(),
            z.array(z.string().refine(isAddressOrRange, 'must be an IP address or a CIDR range (10.0.0.0/8)')).min(1, 'name at least one proxy, or use false'),
          ])
          .default(false),
        bodyLimitBytes: z.number().int().min(1_024).max(64 * 1024 * 1024).default(256 * 1024),
        deadlineMs: z
          .object({
            defaultInteractive: ms(100, 86_400_000).default(30_000),
            defaultBatch: ms(100, 86_400_000).default(3_600_000),
            min: ms(100, 86_400_000).default(1_000),
            max: ms(100, 7 * 86_400_000).default(86_400_000),
          })
          .prefault({}),
        adminKeySha256: sha256Hex,
        /** A key that opens the API port's `/metrics` and nothing else (a scraper's), besides the admin key. */
        metricsKeySha256: sha256Hex.optional(),
        /**
         * The operations console at `/console`: the admin key, given once at the login form, is
         * exchanged for a session cookie that lasts `sessionTtlSec` (sessions live in Redis, so
         * any API instance accepts them). `sampleMs`: how often the Overview's charts take a point
         * (this process's admissions), the width of its finished-run buckets read from Postgres, and
         * the longest that read may take.
         */
        console: z
          .object({
            enable: z.boolean().default(true),
            sessionTtlSec: z.number().int().min(60).max(7 * 86_400).default(8 * 3_600),
            sampleMs: ms(1_000, 60_000).default(5_000),
            loginRateLimit: z.never({ error: 'moved to api.authFailureLimit, which counts the failed logins and every failed Bearer authentication' }).optional(),
          })
          .prefault({}),
        /**
         * Failed authentications one client address may make (an unknown Bearer key on any route,
         * an unknown key at the console's login): `attempts` at once, refilled over `perSec`; past
         * them every such request from it gets 429 until an attempt refills, its valid keys too.
         * Counted per API instance, in memory (`maxAddresses` remembered at most).
         */
        authFailureLimit: z
          .object({
            attempts: z.number().int().min(1).max(1_000).default(10),
            perSec: z.number().int().min(1).max(86_400).default(60),
            maxAddresses: z.number().int().min(100).max(1_000_000).default(10_000),
          })
          .prefault({}),
        /**
         * Bounds on a run's `input`, checked before anything is taken (Idempotency-Key, token,
         * backlog). Depth: nesting of arrays and objects; beyond a few thousand levels serializing
         * it overflows the stack (1,000 keeps well clear). Bytes: the input as JSON text, which is
         * what the run event carries. It can exceed the body (invalid UTF-8 decodes to U+FFFD, three
         * bytes per input byte), so it is bounded on its own, below Kafka's default 1 MiB record
         * limit; the default equals the default body limit, so an input that arrived within the body
         * limit is refused only if it grew. Raise it with `bodyLimitBytes`.
         */
        input: z
          .object({
            maxDepth: z.number().int().min(1).max(1_000).default(64),
            maxBytes: z.number().int().min(1_024).max(900 * 1024).default(256 * 1024),
          })
          .prefault({}),
        /**
         * How long a 202 waits for the run's read-model row after Kafka acknowledged the run. The row
         * is a convenience (read-your-writes), the status sink writes it anyway: a slow or dead
         * Postgres must not hold every submission for its connect and statement timeouts.
         */
        recordAdmissionTimeoutMs: ms(10, 60_000).default(1_000),
        /**
         * The admitted run's read-model row is written behind the 202 (write-behind), many rows per
         * INSERT; reads answer a run whose row is still queued from the queue. `writeBehind: false`
         * writes each row before its 202, as a single INSERT. A 202 waits for room in a full queue
         * (`maxPending`) for at most `recordAdmissionTimeoutMs`; rows still queued at shutdown are
         * written for at most `drainMs`.
         */
        admissionRows: z
          .object({
            writeBehind: z.boolean().default(true),
            batchSize: z.number().int().min(1).max(5_000).default(500),
            maxWaitMs: ms(0, 1_000).default(5),
            maxPending: z.number().int().min(1).max(1_000_000).default(20_000),
            drainMs: ms(0, 60_000).default(5_000),
          })
          .prefault({})
          .refine((rows) => rows.maxPending >= rows.batchSize, { message: 'maxPending must be at least batchSize', path: ['maxPending'] }),
      }),
    limits: z
      .object({
        /** Runs executing at once across all processors; admission estimates waits from it. */
        global: z.number().int().min(1).max(1_000_000).default(64),
        /** Share of the global cap batch work may use, so interactive work keeps a reserve. */
        batchShare: z.number().min(0).max(1).default(0.8),
      })
      .prefault({}),
    admission: z
      .object({
        /** Admitted-but-unfinished runs over all tenants; more is refused with 503 overloaded. */
        maxBacklog: z.number().int().min(1).max(100_000_000).default(5_000),
        /** While a dependency a workflow needs is open, its tenants' refill is multiplied by this (emergency throttle). */
        emergencyRefillFactor: z.number().min(0).max(1).default(0.5),
        /** A backlog entry lives until the run's deadline plus this, so a lost release cannot leak capacity. */
        leaseGraceMs: ms(0, 3_600_000).default(60_000),
        idempotencyTtlSec: z.number().int().min(60).max(7 * 86_400).default(86_400),
        /** How long a request holding an Idempotency-Key may take before a duplicate may try again. */
        idempotencyPendingMs: ms(1_000, 600_000).default(30_000),
        /** How often each API instance refreshes measured service rates and breaker states. */
        stateRefreshMs: ms(50, 60_000).default(500),
        /** Window over which the service rate (runs finished per second) is measured. */
        rateWindowSec: z.number().int().min(10).max(3_600).default(60),
        /**
         * The most of its time to the deadline an interactive run may spend waiting (a bound on
         * queue time, as CoDel keeps one): at the door for the provider turns its calls need (a run
         * whose turns come later is refused now), and for a run-level retry (one due later is not
         * made: its fallback applies now), so interactive runs answer fast or are told fast.
         * Batch runs may wait all their time but what their calls take.
         */
        interactiveWaitShare: z.number().gt(0).max(1).default(0.5),
        /**
         * What submissions get while Redis (token buckets, backlog, Idempotency-Keys) is unreachable.
         * `fail-closed`: 503 overloaded with Retry-After. `fail-open`: each API instance admits per a
         * local token bucket per tenant, at most `maxAdmittedPerOutage` runs per outage, recorded
         * nowhere in Redis; requests with an Idempotency-Key are refused either way.
         */
        redisOutage: z
          .object({
            policy: z.enum(['fail-closed', 'fail-open']).default('fail-closed'),
            localBucket: z
              .object({
                capacity: z.number().int().min(1).max(1_000_000).default(20),
                refillPerSec: z.number().min(0).max(1_000_000).default(2),
              })
              .prefault({}),
            maxAdmittedPerOutage: z.number().int().min(1).max(10_000_000).default(500),
          })
          .prefault({}),
      })
      .prefault({}),
    processor: z
      .object({
        /** Runs executing at once in one instance (bounds one process's memory and sockets). */
        maxInFlight: z.number().int().min(1).max(10_000).default(30),
        /**
         * A tenant's line of interactive runs waiting for permits in one processor is served
         * newest first once its oldest run has waited this long (adaptive LIFO): a standing line
         * is not being served in time, and the newest run has the most time left to meet its
         * deadline. Below it, and for batch, runs go oldest first.
         */
        interactiveLifoAfterMs: ms(1, 3_600_000).default(500),
        /** Records read ahead per partition before the partition is paused. */
        partitionBuffer: z.number().int().min(1).max(100_000).default(100),
        shutdownGraceMs: ms(0, 600_000).default(20_000),
        /** Upper bound for producing an outcome event before the run is handed back (not committed). */
        produceTimeoutMs: ms(100, 60_000).default(10_000),
        /** Permits are leases renewed while held: a crashed holder's permits come back after this. */
        permitLeaseMs: ms(1_000, 600_000).default(15_000),
        /**
         * Take run and dependency permits from Redis (the concurrency caps). `false` grants every
         * permit at once with no Redis call: caps are NOT enforced. For benchmarks and emergencies only.
         */
        enforceCaps: z.boolean().default(true),
        /**
         * Run-level retries through the retry topic, after a step's own retries failed transiently
         * with time left: attempts in all (the first included) and the full-jitter backoff.
         */
        runRetry: z
          .object({
            maxAttempts: z.number().int().min(1).max(20).default(3),
            baseMs: ms(1, 600_000).default(1_000),
            capMs: ms(1, 3_600_000).default(30_000),
          })
          .prefault({}),
        /**
         * The longest a step retry waits in the processor, holding the run's permits and slot. A
         * longer wait, or any wait a provider asked for with `retry-after`, ends the attempt: the
         * run goes through the retry topic (a run-level retry) and holds nothing while it waits.
         */
        maxInlineRetryWaitMs: ms(0, 10_000).default(1_000),
        /**
         * Attempts that fail on Sluice's own infrastructure (Redis or Kafka unreachable), not in a
         * step: repeated in the same processor with full-jitter backoff, the record uncommitted, and
         * after `maxAttempts` the run is dead-lettered (`infrastructure_error`). The backoff also
         * paces the retries of a dead-letter produce that fails, which go on until Kafka is back.
         */
        infraRetry: z
          .object({
            maxAttempts: z.number().int().min(1).max(100).default(8),
            baseMs: ms(1, 600_000).default(500),
            capMs: ms(1, 3_600_000).default(30_000),
          })
          .prefault({}),
        /**
         * Bytes of one step's output (JSON) kept in the Redis step journal and in the result; a
         * larger output fails the run (`output_too_large`, not retryable) and is not stored.
         */
        maxStepOutputBytes: z.number().int().min(1_024).max(900_000).default(262_144),
        /**
         * Bytes of a run's result (all step outputs, JSON) carried by its status event, which must
         * fit in one Kafka message (1 MB by default); a larger result fails the run (`result_too_large`).
         */
        maxResultBytes: z.number().int().min(1_024).max(900_000).default(524_288),
        /**
         * Pacing of dependency calls by their `rateLimit` and the limits providers report. A call
         * whose turn is at most `maxInlineWaitMs` away waits for it in the processor; a later turn
         * sends the run to the retry topic, due then. `enabled: false` paces nothing, with no Redis call.
         */
        pacing: z
          .object({
            enabled: z.boolean().default(true),
            maxInlineWaitMs: ms(0, 60_000).default(1_000),
            /** How long a limit a provider reported (or a not-before it asked for) is trusted without being reported again. */
            observedLimitTtlMs: ms(1_000, 86_400_000).default(600_000),
            /**
             * The share of each rate-limit bucket's burst a batch call leaves to interactive calls:
             * it waits for a fuller bucket, so interactive calls book their turns ahead of the
             * batch backlog. 1: batch goes only once every turn booked so far has passed; 0: first
             * come, first served. A full bucket lets batch go, so no rate is lost to it.
             */
            interactiveReserve: z.number().min(0).max(1).default(1),
            /**
             * The sharing of a requests limit among tenants by weight (src/pacing/fair-share.ts):
             * each tenant's own part is computed from the demand it showed over `demandWindowMs`
             * (every instance recomputes it every `refreshMs`); beyond its part a tenant borrows
             * what others leave, down to `borrowReserve` of the burst, which stays for tenants
             * within their parts.
             */
            fairShare: z
              .object({
                borrowReserve: z.number().min(0).lt(1).default(0.2),
                demandWindowMs: ms(100, 600_000).default(5_000),
                refreshMs: ms(100, 60_000).default(1_000),
              })
              .prefault({}),
          })
          .prefault({}),
      })
      .prefault({}),
    statusSink: z
      .object({
        batchSize: z.number().int().min(1).max(10_000).default(500),
      })
      .prefault({}),
    dlqSink: z
      .object({
        /** DLQ records archived per Postgres statement. */
        batchSize: z.number().int().min(1).max(5_000).default(200),
        /** Replayed and discarded archive rows are deleted this long after they were handled. */
        retentionDays: z.number().int().min(1).max(3_650).default(30),
        purgeIntervalMs: ms(60_000, 86_400_000).default(3_600_000),
      })
      .prefault({}),
    /** The ingress role: run requests from producers on the ingress topic, admitted like POST /v1/runs. */
    ingress: z
      .object({
        /** Partitions of the ingress topic one process works on at once. */
        partitionsConcurrently: z.number().int().min(1).max(1_000).default(6),
        /**
         * Records of one partition handled at once (read in order, finished in any order; offsets
         * committed up to the lowest unfinished one). Records in flight per process: at most
         * partitionsConcurrently × maxInFlight.
         */
        maxInFlight: z.number().int().min(1).max(1_000).default(32),
        /** Bound on handling one record (signature, idempotency, admission, produces); past it the record is tried again. */
        recordTimeoutMs: ms(1_000, 120_000).default(15_000),
        /**
         * A request whose record was written longer ago than this when first read (an outage, a
         * lagging ingress) is rejected with deadline_unreachable, however long its deadline.
         */
        maxRecordAgeMs: ms(1_000, 7 * 86_400_000).default(3_600_000),
        /** Backoff before a record is tried again after Redis or Kafka failed it: doubling from baseMs to capMs. */
        backoff: z
          .object({ baseMs: ms(10, 60_000).default(200), capMs: ms(10, 600_000).default(10_000) })
          .prefault({})
          .refine((b) => b.capMs >= b.baseMs, { message: 'must be at least baseMs', path: ['capMs'] }),
      })
      .prefault({}),
    /**
     * The lag-monitor role: consumer lag, time lag and Burrow-style status of every Sluice group,
     * and the cluster-wide backlog gauges. Every instance running the role competes for one lease
     * in Redis; only its holder polls and exports (docs/decisions.md, "Lag monitor").
     */
    lagMonitor: z
      .object({
        /** `false` keeps the role off even where `roles` lists it. */
        enable: z.boolean().default(true),
        /** How often the active monitor polls Kafka and Redis. */
        intervalMs: ms(100, 600_000).default(15_000),
        /** The sliding window statuses are judged over (STALL from half of it, STOP beyond it). */
        windowMs: ms(300, 86_400_000).default(300_000),
        /** The lease's time to live: a dead active monitor is replaced within about this long. */
        leaseMs: ms(500, 600_000).default(15_000),
        /** Bound on each poll's Kafka reads (offsets, members; record timestamps separately). */
        requestTimeoutMs: ms(100, 120_000).default(10_000),
      })
      .prefault({})
      .refine((m) => m.windowMs >= 3 * m.intervalMs, { message: 'must hold at least 3 polls: windowMs ≥ 3 × intervalMs', path: ['windowMs'] })
      .refine((m) => m.windowMs <= 1_000 * m.intervalMs, { message: 'must hold at most 1,000 polls: windowMs ≤ 1,000 × intervalMs', path: ['windowMs'] }),
    simulator: z
      .object({
        host: z.string().default('127.0.0.1'),
        port: z.number().int().min(0).max(65_535).default(8089),
        /** Where Sluice reaches the simulator; defaults to http://host:port. */
        url: z.url().optional(),
        anthropicLatencyMs: ms(0, 600_000).default(50),
        anthropicJitterMs: ms(0, 600_000).default(20),
        /** Provider-style limits the simulator's anthropic target enforces from the start (none by default). */
        anthropicRateLimit: z
          .strictObject({
            requestsPerMinute: z.number().int().min(1).max(1e9).optional(),
            inputTokensPerMinute: z.number().int().min(1).max(1e9).optional(),
            outputTokensPerMinute: z.number().int().min(1).max(1e9).optional(),
          })
          .refine((r) => Object.keys(r).length > 0, 'name at least one limit, or leave anthropicRateLimit out')
          .optional(),
      })
      .prefault({}),
    anthropic: z
      .object({
        /** Only from the environment (ANTHROPIC_API_KEY); without it Sluice talks to the simulator. */
        apiKey: z.string().min(1).optional(),
        baseUrl: z.url().optional(),
      })
      .prefault({}),
    tenants: z.record(name, tenant).refine((t) => Object.keys(t).length > 0, 'at least one tenant is required'),
    dependencies: z.record(name, dependency),
    workflows: z.record(name, workflow).refine((w) => Object.keys(w).length > 0, 'at least one workflow is required'),
    pricing,
  })
  .superRefine((cfg, ctx) => {
    for (const [wfName, wf] of Object.entries(cfg.workflows)) {
      const seen = new Set<string>();
      wf.steps.forEach((step, i) => {
        const at = ['workflows', wfName, 'steps', i];
        if (seen.has(step.id)) ctx.addIssue({ code: 'custom', path: [...at, 'id'], message: `duplicate step id "${step.id}"` });
        seen.add(step.id);
        const depName = dependencyOf(step);
        const field = step.kind === 'tool' ? 'tool' : 'dependency';
        expectDependency(cfg.dependencies, depName, step.kind === 'tool' ? 'tool' : 'llm', [...at, field], ctx);
        if (step.kind !== 'agent') return;
        step.tools.forEach((toolName, t) => {
          const tool = expectDependency(cfg.dependencies, toolName, 'tool', [...at, 'tools', t], ctx);
          if (tool?.kind === 'tool' && !tool.inputSchema) ctx.addIssue({ code: 'custom', path: [...at, 'tools', t], message: `tool "${toolName}" has no inputSchema, which an agent needs to offer it to the model` });
        });
      });
    }
    for (const [depName, dep] of Object.entries(cfg.dependencies)) {
      if (dep.kind === 'tool' && dep.inputSchema) {
        const problem = toolSchemaProblem(dep.inputSchema);
        if (problem) ctx.addIssue({ code: 'custom', path: ['dependencies', depName, 'inputSchema'], message: problem });
      }
      const adaptive = dep.adaptiveConcurrency;
      if (adaptive && adaptive.max === undefined && adaptive.min > dep.maxConcurrency) {
        ctx.addIssue({ code: 'custom', path: ['dependencies', depName, 'adaptiveConcurrency', 'min'], message: 'must not exceed maxConcurrency (the default max)' });
      }
      if (dep.kind !== 'tool' || !dep.rateLimit) continue;
      for (const field of TOKEN_LIMITS) {
        if (dep.rateLimit[field] !== undefined) ctx.addIssue({ code: 'custom', path: ['dependencies', depName, 'rateLimit', field], message: 'token limits apply to llm dependencies only' });
      }
    }
    const keyOwners = new Map<string, string>();
    for (const [tenantId, t] of Object.entries(cfg.tenants)) {
      const other = keyOwners.get(t.apiKeySha256);
      if (other) ctx.addIssue({ code: 'custom', path: ['tenants', tenantId, 'apiKeySha256'], message: `same key as tenant "${other}"` });
      keyOwners.set(t.apiKeySha256, tenantId);
    }
    if (keyOwners.has(cfg.api.adminKeySha256)) {
      ctx.addIssue({ code: 'custom', path: ['api', 'adminKeySha256'], message: 'the admin key must differ from every tenant key' });
    }
    const metricsKey = cfg.api.metricsKeySha256;
    if (metricsKey !== undefined && (keyOwners.has(metricsKey) || metricsKey === cfg.api.adminKeySha256)) {
      ctx.addIssue({ code: 'custom', path: ['api', 'metricsKeySha256'], message: 'the metrics key must differ from the admin key and every tenant key' });
    }
    if (cfg.api.deadlineMs.min > cfg.api.deadlineMs.max) {
      ctx.addIssue({ code: 'custom', path: ['api', 'deadlineMs', 'min'], message: 'must not exceed api.deadlineMs.max' });
    }
    if (cfg.kafka.minInsyncReplicas !== undefined && cfg.kafka.replicationFactor !== undefined && cfg.kafka.minInsyncReplicas > cfg.kafka.replicationFactor) {
      ctx.addIssue({ code: 'custom', path: ['kafka', 'minInsyncReplicas'], message: 'must not exceed kafka.replicationFactor' });
    }
  });

/** The dependency named `depName` when it is configured and of `kind`; otherwise an issue at `path`. */
function expectDependency(dependencies: Record<string, z.infer<typeof dependency>>, depName: string, kind: 'llm' | 'tool', path: PropertyKey[], ctx: z.RefinementCtx): z.infer<typeof dependency> | undefined {
  const dep = Object.hasOwn(dependencies, depName) ? dependencies[depName] : undefined;
  if (!dep) ctx.addIssue({ code: 'custom', path, message: `unknown dependency "${depName}"` });
  else if (dep.kind !== kind) ctx.addIssue({ code: 'custom', path, message: `"${depName}" is a ${dep.kind} dependency, not ${kind}` });
  return dep;
}

export type SluiceConfig = z.infer<typeof configSchema>;
export type TenantConfig = SluiceConfig['tenants'][string];
export type WorkflowConfig = SluiceConfig['workflows'][string];
export type StepConfig = WorkflowConfig['steps'][number];
export type AgentStepConfig = Extract<StepConfig, { kind: 'agent' }>;
export type DependencyConfig = SluiceConfig['dependencies'][string];
export type LlmDependencyConfig = Extract<DependencyConfig, { kind: 'llm' }>;
export type PricingConfig = SluiceConfig['pricing'];
export type ModelPrice = PricingConfig['models'][string];
export type ToolDependencyConfig = Extract<DependencyConfig, { kind: 'tool' }>;
export type RateLimitConfig = z.infer<typeof rateLimit>;
export type AdaptiveConcurrencyConfig = z.infer<typeof adaptiveConcurrency>;
export type PacingConfig = SluiceConfig['processor']['pacing'];
export type CallTimeouts = z.infer<typeof callTimeouts>;
export type RedisOutageConfig = SluiceConfig['admission']['redisOutage'];

/** An IPv4 or IPv6 address, or one with a prefix length in its range (`10.0.0.0/8`, `fd00::/8`). */
function isAddressOrRange(s: string): boolean {
  const [address, prefix, ...rest] = s.split('/');
  const family = isIP(address ?? '');
  if (family === 0 || rest.length > 0) return false;
  if (prefix === undefined) return true;
  return /^\d{1,3}$/.test(prefix) && Number(prefix) <= (family === 4 ? 32 : 128);
}
