/**
 * Provider simulator (`provider-sim` role): an Anthropic Messages API look-alike (which plays a
 * scripted agent when offered tools, see scripted-agent.ts) plus demo tools, with per-target
 * fault profiles switched at run time through /admin.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { once } from 'node:events';
import { STATUS_CODES } from 'node:http';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { Logger } from '../../obs/logger.js';
import { isRecord } from '../../util/is-record.js';
import { CallStats, type CallStatsSnapshot } from './call-stats.js';
import {
  ANTHROPIC_TARGET,
  ZERO_PROFILE,
  applyFaultPatch,
  decideOutcome,
  parseFaultUpdate,
  parseSimulateFailure,
  type FaultProfile,
  type FieldError,
} from './fault-profile.js';
import { TargetRateLimits, anthropicRateLimitHeaders, describeRefusal, toolRateLimitHeaders, type BucketState, type CallCost } from './rate-limit.js';
import {
  MAX_TOOL_NAME_LENGTH,
  nextTurn,
  parseAgentDirective,
  readConversation,
  type AgentScript,
  type AgentTool,
  type AgentTurn,
} from './scripted-agent.js';

/** Stats bucket for calls that do not say which tenant they serve. */
export const NO_TENANT = '_none';
export const SIMULATE_FAILURE_HEADER = 'x-simulate-failure';
export const TENANT_HEADER = 'x-sluice-tenant';

const BODY_LIMIT_BYTES = 1024 * 1024;
/** The tool ledger's bounds: keys, one kept response, and keys plus kept responses together. */
const LEDGER_BOUNDS: LedgerBounds = { maxKeys: 50_000, maxResponseBytes: 64 * 1024, maxTotalBytes: 64 * 1024 * 1024 };
const MAX_IDEMPOTENCY_KEY_LENGTH = 256;
const REPLY_SNIPPET_CHARS = 200;
const STREAM_CHUNKS = 5;
/** A long answer streams in deltas of at most this many characters, as a provider's are small. */
const MAX_DELTA_CHARS = 16 * 1024;
/** The Messages API's bound on the tools of one request. */
const MAX_TOOLS = 128;

export interface ProviderSimOptions {
  /** The admin key as configured: a SHA-256 hex digest, never the key itself. */
  adminKeySha256: string;
  logger: Logger;
  /** Names served under POST /tools/:name; each is also a fault target. */
  tools: string[];
  /** Source for fault rolls and jitter, injectable so tests are deterministic. */
  random?: () => number;
  /** Baseline profile per target, restored by DELETE /admin/faults. */
  defaults?: Record<string, Partial<FaultProfile>>;
  /** Clock of the rate limits, injectable so tests can step time. */
  now?: () => number;
}

export interface ProviderSimStats extends CallStatsSnapshot {
  sideEffects: Record<string, number>;
  duplicateDeliveries: Record<string, number>;
}

/** Settles what an admitted call drew from the output-token bucket: the tokens its answer used. */
type SettleOutput = (outputTokens: number) => void;

interface SimCall {
  target: string;
  tenant: string;
  override: FaultProfile | undefined;
  /** What the call draws from the target's rate limits. */
  cost: CallCost;
  rateLimitHeaders(states: readonly BucketState[], now: number): Record<string, string>;
  succeed(delayMs: number, closed: AbortSignal, settle: SettleOutput): Promise<FastifyReply>;
  fail(status: number, message: string, retryAfterSec: number | undefined): FastifyReply;
}

/** What a tool call draws: one request, no tokens. */
const TOOL_CALL_COST: CallCost = { requests: 1, inputTokens: 0, outputTokens: 0 };

export function createProviderSim(opts: ProviderSimOptions): FastifyInstance {
  if (!/^[0-9a-f]{64}$/.test(opts.adminKeySha256)) throw new Error('provider-sim: adminKeySha256 must be a SHA-256 hex digest');
  const targets = [ANTHROPIC_TARGET, ...opts.tools];
  if (new Set(targets).size !== targets.length) {
    throw new Error(`provider-sim: tool names must be unique and not "${ANTHROPIC_TARGET}"`);
  }
  const tools = new Set(opts.tools);
  const random = opts.random ?? Math.random;
  const now = opts.now ?? Date.now;
  const adminKeyDigest = Buffer.from(opts.adminKeySha256, 'hex');
  const baselines = new Map(targets.map((target) => [target, baselineProfile(target, opts.defaults?.[target], targets)]));
  const unknownDefaults = Object.keys(opts.defaults ?? {}).filter((target) => !baselines.has(target));
  if (unknownDefaults.length > 0) throw new Error(`provider-sim: defaults for unknown targets: ${unknownDefaults.join(', ')}`);
  const faults = new Map(baselines);
  const rateLimits = new Map(targets.map((target) => [target, new TargetRateLimits()]));
  const limitsOf = (target: string): TargetRateLimits => {
    const limits = rateLimits.get(target);
    if (limits === undefined) throw new Error(`provider-sim: no rate limits for unknown target "${target}"`);
    return limits;
  };
  const restoreBaselines = (): void => {
    const at = now();
    for (const [target, profile] of baselines) {
      faults.set(target, profile);
      limitsOf(target).configure(profile.rateLimit, at, true);
    }
  };
  restoreBaselines();
  const stats = new CallStats();
  const ledger = new ToolLedger(LEDGER_BOUNDS);

  const logger: FastifyBaseLogger = opts.logger;
  const app = Fastify({
    loggerInstance: logger,
    // Load tests drive thousands of calls a second; per-request log lines would drown the signal.
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: BODY_LIMIT_BYTES,
    // Hanging calls must not keep close() waiting for clients that never give up.
    forceCloseConnections: true,
    genReqId: () => `req_sim_${randomBytes(12).toString('hex')}`,
  });

  app.addHook('onRequest', async (request, reply) => {
    reply.header('request-id', request.id);
  });
  app.setErrorHandler(errorHandler(sendProblemForStatus));
  app.setNotFoundHandler((request, reply) => sendProblem(reply, 404, 'not_found', `no route ${request.method} ${request.url}`));

  /**
   * The rate limits come first, as at a provider's front door: a refused call is answered 429 at
   * once, draws nothing and meets no fault. An admitted call holds its max_tokens in the output
   * bucket until its answer is sent (then it keeps only the tokens the answer used) or until it
   * ends otherwise (fault error, hang, client gone), which gives all of them back.
   */
  async function simulate(reply: FastifyReply, call: SimCall): Promise<FastifyReply> {
    const ticket = stats.enter(call.target, call.tenant);
    const closed = closeSignal(reply);
    const limits = limitsOf(call.target);
    const admittedAt = now();
    const admission = limits.admit(call.cost, admittedAt);
    reply.headers(call.rateLimitHeaders(limits.states(admittedAt), admittedAt));
    let settled = !admission.ok;
    const settle: SettleOutput = (outputTokens) => {
      if (settled) return;
      settled = true;
      limits.refund({ requests: 0, inputTokens: 0, outputTokens: Math.max(0, call.cost.outputTokens - outputTokens) }, now());
    };
    // Leaving on connection close covers normal completion, client timeouts and hangs alike.
    const leave = (): void => {
      ticket.leave();
      settle(0);
    };
    if (closed.aborted) leave();
    else closed.addEventListener('abort', leave, { once: true });
    if (!admission.ok) {
      ticket.refuseForRateLimit();
      return call.fail(429, describeRefusal(admission), admission.retryAfterSec);
    }
    const outcome = decideOutcome(faults.get(call.target) ?? ZERO_PROFILE, call.override, random);
    if (outcome.kind === 'hang') {
      reply.hijack();
      if (!closed.aborted) await once(closed, 'abort');
      return reply;
    }
    if (outcome.kind === 'ok') return call.succeed(outcome.delayMs, closed, settle);
    ticket.fail();
    if (!(await pause(outcome.delayMs, closed))) return abandon(reply);
    settle(0);
    return call.fail(outcome.status, `simulated ${outcome.status} from provider-sim`, outcome.retryAfterSec);
  }

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.register(async (scope) => {
    scope.setErrorHandler(errorHandler(sendAnthropicError));
    // Every answer reports the limits, as the API does; an admitted call's answer reports them after its draw.
    scope.addHook('onRequest', async (_request, reply) => {
      reply.headers(anthropicRateLimitHeaders(limitsOf(ANTHROPIC_TARGET).states(now())));
    });
    scope.post('/v1/messages', async (request, reply) => {
      if (headerValue(request, 'x-api-key') === undefined && headerValue(request, 'authorization') === undefined) {
        return sendAnthropicError(reply, 401, 'x-api-key header is required');
      }
      const override = readOverride(request);
      if (!override.ok) return sendAnthropicError(reply, 400, `${SIMULATE_FAILURE_HEADER}: ${override.message}`);
      const parsed = parseMessagesRequest(request.body);
      if (!parsed.ok) return sendAnthropicError(reply, 400, parsed.message);
      const body = parsed.value;
      const message = buildMessage(body, faults.get(ANTHROPIC_TARGET) ?? ZERO_PROFILE);
      return simulate(reply, {
        target: ANTHROPIC_TARGET,
        tenant: body.userId ?? NO_TENANT,
        override: override.value,
        // Providers check output tokens at admission against max_tokens, the most the answer may use.
        cost: { requests: 1, inputTokens: message.usage.input_tokens, outputTokens: body.maxTokens },
        rateLimitHeaders: anthropicRateLimitHeaders,
        async succeed(delayMs, closed, settle) {
          if (body.stream) {
            settle(message.usage.output_tokens);
            return reply
              .type('text/event-stream; charset=utf-8')
              .header('cache-control', 'no-cache')
              .send(Readable.from(messageEvents(message, delayMs, closed)));
          }
          if (!(await pause(delayMs, closed))) return abandon(reply);
          settle(message.usage.output_tokens);
          return reply.send(message);
        },
        fail: (status, message, retryAfterSec) => sendAnthropicError(reply, status, message, retryAfterSec),
      });
    });
  });

  app.post<{ Params: { name: string } }>('/tools/:name', async (request, reply) => {
    const tool = request.params.name;
    if (!tools.has(tool)) return sendProblem(reply, 404, 'unknown_tool', `unknown tool "${tool}"`);
    const override = readOverride(request);
    if (!override.ok) return sendInvalidField(reply, SIMULATE_FAILURE_HEADER, override.message);
    const body: unknown = request.body;
    if (body !== undefined && !isRecord(body)) return sendInvalidField(reply, 'body', 'must be a JSON object');
    const idempotencyKey = headerValue(request, 'idempotency-key');
    if (idempotencyKey !== undefined && (idempotencyKey === '' || idempotencyKey.length > MAX_IDEMPOTENCY_KEY_LENGTH)) {
      return sendInvalidField(reply, 'idempotency-key', `must be 1 to ${MAX_IDEMPOTENCY_KEY_LENGTH} characters`);
    }
    const input = body?.input;
    return simulate(reply, {
      target: tool,
      tenant: headerValue(request, TENANT_HEADER) ?? NO_TENANT,
      override: override.value,
      cost: TOOL_CALL_COST,
      rateLimitHeaders: toolRateLimitHeaders,
      async succeed(delayMs, closed) {
        // The effect lands before the latency, as in a real tool: a caller that times out
        // during the delay has still caused it, which is what idempotency keys are for.
        const delivery = ledger.deliver(tool, idempotencyKey, () => toolResponse(tool, input));
        if (!(await pause(delayMs, closed))) return abandon(reply);
        if (delivery.replayed) reply.header('idempotent-replayed', 'true');
        return reply.send(delivery.body);
      },
      fail: (status, message, retryAfterSec) => sendProblem(reply, status, problemCode(status), message, { retryAfterSec }),
    });
  });

  app.register(
    async (admin) => {
      admin.addHook('onRequest', async (request, reply) => {
        if (!bearerMatches(headerValue(request, 'authorization'), adminKeyDigest)) {
          reply.header('www-authenticate', 'Bearer');
          return sendProblem(reply, 401, 'unauthorized', 'admin endpoints need Authorization: Bearer <admin key>');
        }
      });
      admin.get('/faults', async () => Object.fromEntries(faults));
      admin.put('/faults', async (request, reply) => {
        const parsed = parseFaultUpdate(request.body, targets);
        if (!parsed.ok) return sendProblem(reply, 400, 'invalid_request', 'invalid fault profile', { errors: parsed.errors });
        const { target, patch } = parsed.value;
        const profile = applyFaultPatch(baselines.get(target) ?? ZERO_PROFILE, patch);
        faults.set(target, profile);
        limitsOf(target).configure(profile.rateLimit, now());
        request.log.info({ target, profile }, 'provider-sim fault profile set');
        return { target, ...profile };
      });
      admin.delete('/faults', async (request, reply) => {
        restoreBaselines();
        request.log.info('provider-sim fault profiles reset');
        return reply.code(204).send();
      });
      admin.get('/stats', async (): Promise<ProviderSimStats> => ({ ...stats.snapshot(), ...ledger.counters() }));
      admin.post('/stats/reset', async (_request, reply) => {
        stats.reset();
        ledger.resetCounters();
        return reply.code(204).send();
      });
    },
    { prefix: '/admin' },
  );

  return app;
}

function baselineProfile(target: string, defaults: Partial<FaultProfile> | undefined, targets: readonly string[]): FaultProfile {
  if (defaults === undefined) return { ...ZERO_PROFILE };
  const parsed = parseFaultUpdate({ ...defaults, target }, targets);
  if (!parsed.ok) {
    const details = parsed.errors.map((error) => `${error.field} ${error.message}`).join('; ');
    throw new Error(`provider-sim: invalid default profile for ${target}: ${details}`);
  }
  return applyFaultPatch(ZERO_PROFILE, parsed.value.patch);
}

export interface LedgerBounds {
  /** Idempotency keys remembered at most. */
  maxKeys: number;
  /** A first response larger than this (as JSON) is not kept, only its key. */
  maxResponseBytes: number;
  /** Bytes of keys and kept responses together. */
  maxTotalBytes: number;
}

interface FirstDelivery {
  /** The first response, or undefined when it was too large to keep. */
  body: unknown;
  kept: boolean;
  /** What this entry counts against `maxTotalBytes`. */
  bytes: number;
}

/**
 * Remembers each idempotency key's first response so a redelivered call has no second effect.
 * Responses echo caller data, so the ledger is bounded in bytes as well as keys: the oldest keys
 * are forgotten first, and a response over `maxResponseBytes` is not kept at all, only its key.
 * A repeat of such a key is still a duplicate (no second effect) but is answered afresh, which for
 * these tools, a pure function of their input, is the first answer when the input is the same.
 */
export class ToolLedger {
  private readonly first = new Map<string, FirstDelivery>();
  private totalBytes = 0;
  private readonly sideEffects = new Map<string, number>();
  private readonly duplicates = new Map<string, number>();

  constructor(private readonly bounds: LedgerBounds) {}

  deliver(tool: string, key: string | undefined, respond: () => unknown): { body: unknown; replayed: boolean } {
    const slot = key === undefined ? undefined : JSON.stringify([tool, key]);
    const earlier = slot === undefined ? undefined : this.first.get(slot);
    if (earlier) {
      bump(this.duplicates, tool);
      return { body: earlier.kept ? earlier.body : respond(), replayed: true };
    }
    const body = respond();
    bump(this.sideEffects, tool);
    if (slot !== undefined) this.remember(slot, body);
    return { body, replayed: false };
  }

  private remember(slot: string, body: unknown): void {
    const bodyBytes = Buffer.byteLength(JSON.stringify(body ?? null), 'utf8');
    const kept = bodyBytes <= this.bounds.maxResponseBytes;
    const bytes = Buffer.byteLength(slot, 'utf8') + (kept ? bodyBytes : 0);
    // Maps iterate in insertion order, so the first keys are the oldest.
    for (const [oldest, entry] of this.first) {
      if (this.first.size < this.bounds.maxKeys && this.totalBytes + bytes <= this.bounds.maxTotalBytes) break;
      this.first.delete(oldest);
      this.totalBytes -= entry.bytes;
    }
    this.first.set(slot, { body: kept ? body : undefined, kept, bytes });
    this.totalBytes += bytes;
  }

  counters(): Pick<ProviderSimStats, 'sideEffects' | 'duplicateDeliveries'> {
    return { sideEffects: Object.fromEntries(this.sideEffects), duplicateDeliveries: Object.fromEntries(this.duplicates) };
  }

  /** The remembered keys stay: they are the tools' own state, not measurements. */
  resetCounters(): void {
    this.sideEffects.clear();
    this.duplicates.clear();
  }
}

function bump(map: Map<string, number>, key: string): void {
  map.set(key, (map.get(key) ?? 0) + 1);
}

const CARRIERS = ['UPS', 'DHL', 'FedEx'] as const;
const DEFAULT_ORDER_ID = 'ord_demo';
const DEFAULT_REPORT_ROWS = 100;
/** A fixed origin keeps order-lookup answers identical across days. */
const ETA_BASE_MS = Date.UTC(2030, 0, 1);
const DAY_MS = 86_400_000;
const DEFAULT_KB_QUERY = 'getting started';
const KB_TITLES = ['Shipping times', 'Returns and refunds', 'Tracking a parcel', 'Changing a delivery address', 'Payment methods'] as const;

function toolResponse(tool: string, input: unknown): unknown {
  const fields = isRecord(input) ? input : {};
  switch (tool) {
    case 'order-lookup': {
      const orderId = typeof fields.orderId === 'string' && fields.orderId !== '' ? fields.orderId : DEFAULT_ORDER_ID;
      const hash = createHash('sha256').update(orderId).digest().readUInt32BE(0);
      const eta = new Date(ETA_BASE_MS + (1 + (hash % 7)) * DAY_MS).toISOString().slice(0, 10);
      return { orderId, status: 'shipped', carrier: CARRIERS[hash % CARRIERS.length], eta };
    }
    case 'report': {
      const rows = Number.isSafeInteger(fields.rows) && (fields.rows as number) >= 0 ? (fields.rows as number) : DEFAULT_REPORT_ROWS;
      return { rows, summary: `Simulated report over ${rows} rows` };
    }
    case 'notify':
      return { delivered: true };
    case 'kb-search': {
      const query = typeof fields.query === 'string' && fields.query !== '' ? fields.query : DEFAULT_KB_QUERY;
      const hash = createHash('sha256').update(query).digest().readUInt32BE(0);
      const articles = [0, 1].map((offset) => {
        const title = KB_TITLES[(hash + offset) % KB_TITLES.length]!;
        return { title, snippet: `${title}: what applies to "${query}".` };
      });
      return { query, articles };
    }
    default:
      return { ok: true, echo: input ?? null };
  }
}

interface MessagesRequest {
  model: string;
  messages: { role: 'user' | 'assistant'; content: unknown }[];
  system?: unknown;
  userId?: string;
  stream: boolean;
  maxTokens: number;
  /** Present when the request offers tools: the sim then plays the scripted agent. */
  agent: { tools: AgentTool[]; script: AgentScript } | undefined;
}

type SimContentBlock = { type: 'text'; text: string } | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };

interface SimMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: SimContentBlock[];
  stop_reason: AgentTurn['stopReason'];
  stop_sequence: null;
  usage: SimUsage;
}

/**
 * The Messages API's usage. The simulator caches nothing, so both cache counts are 0, as the real
 * API reports them for a request without `cache_control` breakpoints.
 */
interface SimUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

/** Required fields of each content block type the sim accepts, with their JSON kinds. */
const BLOCK_FIELDS: Record<string, Record<string, 'string' | 'object'>> = {
  text: { text: 'string' },
  image: { source: 'object' },
  document: { source: 'object' },
  tool_use: { id: 'string', name: 'string', input: 'object' },
  tool_result: { tool_use_id: 'string' },
  thinking: { thinking: 'string', signature: 'string' },
  redacted_thinking: { data: 'string' },
};
const TOOL_RESULT_BLOCKS = ['text', 'image', 'document'];

class InvalidRequest extends Error {}

function invalid(path: string, message: string): never {
  throw new InvalidRequest(`${path}: ${message}`);
}

function required(body: Record<string, unknown>, field: string, path: string = field): unknown {
  const value = body[field];
  if (value === undefined) invalid(path, 'Field required');
  return value;
}

/** Checks what Anthropic checks for the fields the sim uses; messages mimic Anthropic's `path: problem` style. */
function parseMessagesRequest(body: unknown): { ok: true; value: MessagesRequest } | { ok: false; message: string } {
  try {
    return { ok: true, value: readMessagesRequest(body) };
  } catch (error) {
    if (error instanceof InvalidRequest) return { ok: false, message: error.message };
    throw error;
  }
}

function readMessagesRequest(body: unknown): MessagesRequest {
  if (!isRecord(body)) invalid('body', 'Input should be a valid dictionary');
  const model = required(body, 'model');
  if (typeof model !== 'string' || model === '') invalid('model', 'Input should be a non-empty string');
  const maxTokens = required(body, 'max_tokens');
  if (!Number.isSafeInteger(maxTokens) || (maxTokens as number) < 1) invalid('max_tokens', 'Input should be a positive integer');
  const messages = required(body, 'messages');
  if (!Array.isArray(messages)) invalid('messages', 'Input should be a valid list');
  if (messages.length === 0) invalid('messages', 'at least one message is required');
  const parsedMessages = messages.map((message: unknown, index) => {
    const path = `messages.${index}`;
    if (!isRecord(message)) invalid(path, 'Input should be a valid dictionary');
    const role = required(message, 'role', `${path}.role`);
    if (!isRole(role)) invalid(`${path}.role`, "Input should be 'user' or 'assistant'");
    const content = required(message, 'content', `${path}.content`);
    if (typeof content !== 'string') checkBlocks(content, `${path}.content`, Object.keys(BLOCK_FIELDS));
    return { role, content };
  });
  if (body.system !== undefined && typeof body.system !== 'string') checkBlocks(body.system, 'system', ['text']);
  const tools = readTools(body.tools);
  let agent: MessagesRequest['agent'];
  if (tools.length > 0) {
    const script = parseAgentDirective(textOf(body.system), tools.map((tool) => tool.name));
    if (!script.ok) invalid('system', script.message);
    agent = { tools, script: script.value };
  }
  let userId: string | undefined;
  if (body.metadata !== undefined) {
    if (!isRecord(body.metadata)) invalid('metadata', 'Input should be a valid dictionary');
    const id = body.metadata.user_id;
    if (id !== undefined && id !== null && typeof id !== 'string') invalid('metadata.user_id', 'Input should be a valid string');
    if (typeof id === 'string' && id !== '') userId = id;
  }
  if (body.stream !== undefined && typeof body.stream !== 'boolean') invalid('stream', 'Input should be a valid boolean');
  return { model, messages: parsedMessages, system: body.system, userId, stream: body.stream === true, maxTokens: maxTokens as number, agent };
}

function readTools(tools: unknown): AgentTool[] {
  if (tools === undefined) return [];
  if (!Array.isArray(tools)) invalid('tools', 'Input should be a valid list');
  if (tools.length > MAX_TOOLS) invalid('tools', `List should have at most ${MAX_TOOLS} items`);
  const parsed = tools.map((tool: unknown, index): AgentTool => {
    const path = `tools.${index}`;
    if (!isRecord(tool)) invalid(path, 'Input should be a valid dictionary');
    const name = required(tool, 'name', `${path}.name`);
    if (typeof name !== 'string' || name === '' || name.length > MAX_TOOL_NAME_LENGTH) {
      invalid(`${path}.name`, `Input should be a string of 1 to ${MAX_TOOL_NAME_LENGTH} characters`);
    }
    const { description } = tool;
    if (description !== undefined && typeof description !== 'string') invalid(`${path}.description`, 'Input should be a valid string');
    const schema = required(tool, 'input_schema', `${path}.input_schema`);
    if (!isRecord(schema)) invalid(`${path}.input_schema`, 'Input should be a valid dictionary');
    return { name, ...(description !== undefined && { description }), input_schema: schema };
  });
  if (new Set(parsed.map((tool) => tool.name)).size !== parsed.length) invalid('tools', 'Tool names must be unique');
  return parsed;
}

function isRole(value: unknown): value is 'user' | 'assistant' {
  return value === 'user' || value === 'assistant';
}

function checkBlocks(blocks: unknown, path: string, allowedTypes: readonly string[]): void {
  if (!Array.isArray(blocks)) invalid(path, 'Input should be a valid string or list of content blocks');
  blocks.forEach((block: unknown, index) => {
    const blockPath = `${path}.${index}`;
    if (!isRecord(block)) invalid(blockPath, 'Input should be a valid dictionary');
    const type = required(block, 'type', `${blockPath}.type`);
    const fields = typeof type === 'string' && allowedTypes.includes(type) ? BLOCK_FIELDS[type] : undefined;
    if (fields === undefined) invalid(`${blockPath}.type`, `Input should be one of ${allowedTypes.map((t) => `'${t}'`).join(', ')}`);
    for (const [field, kind] of Object.entries(fields)) {
      const value = required(block, field, `${blockPath}.${field}`);
      if (kind === 'string' ? typeof value !== 'string' : !isRecord(value)) {
        invalid(`${blockPath}.${field}`, `Input should be a valid ${kind === 'string' ? 'string' : 'dictionary'}`);
      }
    }
    if (type === 'tool_result' && block.content !== undefined && typeof block.content !== 'string') {
      checkBlocks(block.content, `${blockPath}.content`, TOOL_RESULT_BLOCKS);
    }
  });
}

/** The readable text of a content value: strings, text blocks, tool inputs and tool results, in order. */
function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map(blockText)
    .filter((text) => text !== '')
    .join(' ');
}

function blockText(block: unknown): string {
  if (!isRecord(block)) return '';
  if (typeof block.text === 'string') return block.text;
  if (block.type === 'tool_use') return JSON.stringify(block.input);
  return textOf(block.content);
}

/** Anthropic's rule of thumb: about four characters per token. */
function estimateTokens(text: string): number {
  return Math.max(1, Math.ceil(text.length / 4));
}

/** Without tools the sim echoes the last user message; with tools it plays the scripted agent. */
function answerTurn(request: MessagesRequest): AgentTurn {
  if (request.agent !== undefined) return nextTurn(request.agent.script, request.agent.tools, readConversation(request.messages));
  const lastUser = request.messages.findLast((message) => message.role === 'user');
  return { text: `Simulated reply to: ${textOf(lastUser?.content).slice(0, REPLY_SNIPPET_CHARS)}`, calls: [], stopReason: 'end_turn' };
}

const ANSWER_FILLER = ' The simulator was told to answer at length.';

/** Text of exactly `bytes` UTF-8 bytes: `text` cut short (between characters), or padded with a sentence repeated. */
function textOfBytes(text: string, bytes: number): string {
  let kept = '';
  let used = 0;
  for (const char of text) {
    const size = Buffer.byteLength(char);
    if (used + size > bytes) break;
    kept += char;
    used += size;
  }
  const missing = bytes - used;
  return kept + ANSWER_FILLER.repeat(Math.ceil(missing / ANSWER_FILLER.length)).slice(0, missing);
}

function buildMessage(request: MessagesRequest, profile: Pick<FaultProfile, 'answerBytes' | 'reportedOutputTokens'>): SimMessage {
  const turn = answerTurn(request);
  const repeatIds = request.agent?.script.repeatIds === true;
  const content: SimContentBlock[] = [
    { type: 'text', text: profile.answerBytes === undefined ? turn.text : textOfBytes(turn.text, profile.answerBytes) },
    ...turn.calls.map((call, i): SimContentBlock => ({ type: 'tool_use', id: `toolu_sim_${repeatIds ? i : randomBytes(12).toString('hex')}`, ...call })),
  ];
  const prompt = [
    textOf(request.system),
    ...request.messages.map((message) => textOf(message.content)),
    // The tool definitions are part of the prompt the model reads, and count as input tokens.
    ...(request.agent === undefined ? [] : [JSON.stringify(request.agent.tools)]),
  ].join('\n');
  return {
    id: `msg_sim_${randomBytes(12).toString('hex')}`,
    type: 'message',
    role: 'assistant',
    model: request.model,
    content,
    stop_reason: turn.stopReason,
    stop_sequence: null,
    usage: {
      input_tokens: estimateTokens(prompt),
      output_tokens: profile.reportedOutputTokens ?? estimateTokens(content.map(streamedPayload).join('')),
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
    },
  };
}

/** What a block's deltas carry when streamed: its text, or its input as JSON. */
function streamedPayload(block: SimContentBlock): string {
  return block.type === 'text' ? block.text : JSON.stringify(block.input);
}

/** A block as its content_block_start opens it, and the deltas that complete it. */
function streamedBlock(block: SimContentBlock): { start: SimContentBlock; deltas: Record<string, unknown>[] } {
  const payload = streamedPayload(block);
  const chunkLength = Math.min(MAX_DELTA_CHARS, Math.max(1, Math.ceil(payload.length / STREAM_CHUNKS)));
  const chunks = Array.from({ length: Math.ceil(payload.length / chunkLength) }, (_, i) => payload.slice(i * chunkLength, (i + 1) * chunkLength));
  return block.type === 'text'
    ? { start: { type: 'text', text: '' }, deltas: chunks.map((text) => ({ type: 'text_delta', text })) }
    : { start: { ...block, input: {} }, deltas: chunks.map((partial_json) => ({ type: 'input_json_delta', partial_json })) };
}

function sseEvent(data: { type: string; [field: string]: unknown }): string {
  return `event: ${data.type}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** Anthropic's streaming event sequence, with the call's latency spread over all the deltas. */
async function* messageEvents(message: SimMessage, delayMs: number, closed: AbortSignal): AsyncGenerator<string> {
  const blocks = message.content.map(streamedBlock);
  const deltaDelayMs = delayMs / Math.max(1, blocks.reduce((sum, block) => sum + block.deltas.length, 0));
  yield sseEvent({
    type: 'message_start',
    message: { ...message, content: [], stop_reason: null, usage: { ...message.usage, output_tokens: 1 } },
  });
  for (const [index, block] of blocks.entries()) {
    yield sseEvent({ type: 'content_block_start', index, content_block: block.start });
    if (index === 0) yield sseEvent({ type: 'ping' });
    for (const delta of block.deltas) {
      if (!(await pause(deltaDelayMs, closed))) return;
      yield sseEvent({ type: 'content_block_delta', index, delta });
    }
    yield sseEvent({ type: 'content_block_stop', index });
  }
  yield sseEvent({
    type: 'message_delta',
    delta: { stop_reason: message.stop_reason, stop_sequence: null },
    // Cumulative counts, as the API sends them in its final message_delta.
    usage: message.usage,
  });
  yield sseEvent({ type: 'message_stop' });
}

/** Aborts once the response's connection is closed: finished, timed out or dropped by the client. */
function closeSignal(reply: FastifyReply): AbortSignal {
  const controller = new AbortController();
  if (reply.raw.destroyed) controller.abort();
  else reply.raw.once('close', () => controller.abort());
  return controller.signal;
}

/** Waits `ms`; false when the client went away first, so nothing should be sent. */
async function pause(ms: number, closed: AbortSignal): Promise<boolean> {
  if (closed.aborted) return false;
  if (ms <= 0) return true;
  try {
    await sleep(ms, undefined, { signal: closed });
    return true;
  } catch (error) {
    if (error instanceof Error && error.name === 'AbortError') return false;
    throw error;
  }
}

/** Nobody is listening any more; take the reply away from Fastify so it does not write to a dead socket. */
function abandon(reply: FastifyReply): FastifyReply {
  reply.hijack();
  return reply;
}

function headerValue(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

function readOverride(request: FastifyRequest): { ok: true; value: FaultProfile | undefined } | { ok: false; message: string } {
  const header = headerValue(request, SIMULATE_FAILURE_HEADER);
  return header === undefined ? { ok: true, value: undefined } : parseSimulateFailure(header);
}

/** Compares digests, so the comparison is constant-time and the key itself is never stored. */
function bearerMatches(header: string | undefined, expectedDigest: Buffer): boolean {
  const token = /^Bearer (.+)$/i.exec(header ?? '')?.[1];
  if (token === undefined) return false;
  return timingSafeEqual(createHash('sha256').update(token, 'utf8').digest(), expectedDigest);
}

function isRetryable(status: number): boolean {
  return status === 429 || status >= 500;
}

/** Maps Fastify's own failures (bad JSON, body too large, …) onto a route family's error format. */
function errorHandler(send: (reply: FastifyReply, status: number, message: string) => FastifyReply) {
  return (error: FastifyError, request: FastifyRequest, reply: FastifyReply): FastifyReply => {
    const status = error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500 ? error.statusCode : 500;
    if (status === 500) request.log.error({ err: error }, 'provider-sim request failed');
    return send(reply, status, status === 500 ? 'internal error' : error.message);
  };
}

const ANTHROPIC_ERROR_TYPES: Partial<Record<number, string>> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  529: 'overloaded_error',
};

function sendAnthropicError(reply: FastifyReply, status: number, message: string, retryAfterSec?: number): FastifyReply {
  const type = ANTHROPIC_ERROR_TYPES[status] ?? (status < 500 ? 'invalid_request_error' : 'api_error');
  if (retryAfterSec !== undefined) reply.header('retry-after', String(retryAfterSec));
  if (isRetryable(status)) reply.header('x-should-retry', 'true');
  return reply.code(status).send({ type: 'error', error: { type, message } });
}

const PROBLEM_CODES: Partial<Record<number, string>> = {
  400: 'invalid_request',
  401: 'unauthorized',
  404: 'not_found',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
  429: 'rate_limited',
  529: 'overloaded',
};

function problemCode(status: number): string {
  return PROBLEM_CODES[status] ?? (status < 500 ? 'invalid_request' : 'internal_error');
}

/** RFC 9457 problem, with the extension members the contract (docs/contract.md) requires of every Sluice error. */
function sendProblem(
  reply: FastifyReply,
  status: number,
  code: string,
  detail: string,
  extra: { errors?: FieldError[]; retryAfterSec?: number | undefined } = {},
): FastifyReply {
  if (extra.retryAfterSec !== undefined) reply.header('retry-after', String(extra.retryAfterSec));
  return reply
    .code(status)
    .type('application/problem+json')
    .send({
      type: 'about:blank',
      title: status === 529 ? 'Overloaded' : (STATUS_CODES[status] ?? 'Error'),
      status,
      detail,
      code,
      requestId: reply.request.id,
      retryable: isRetryable(status),
      ...(extra.retryAfterSec !== undefined && { retryAfterSec: extra.retryAfterSec }),
      ...(extra.errors !== undefined && { errors: extra.errors.map(({ field, message }) => ({ path: field, message })) }),
    });
}

function sendInvalidField(reply: FastifyReply, field: string, message: string): FastifyReply {
  return sendProblem(reply, 400, 'invalid_request', `${field} ${message}`, { errors: [{ field, message }] });
}

function sendProblemForStatus(reply: FastifyReply, status: number, message: string): FastifyReply {
  return sendProblem(reply, status, problemCode(status), message);
}
