import Anthropic from '@anthropic-ai/sdk';
import { Stream } from '@anthropic-ai/sdk/core/streaming.js';
import type { LlmDependencyConfig } from '../config/schema.js';
import { retryAfterMs, type HeaderReader } from './rate-limit-headers.js';
import { StepError } from './step-error.js';

export interface LlmRequest {
  dependency: string;
  config: LlmDependencyConfig;
  system: string;
  userContent: string;
  tenantId: string;
  /** The call's total budget, already clamped to what the run's deadline leaves. */
  timeoutMs: number;
  headers: Record<string, string>;
}

/** Tokens of one response, as its `usage` reports them (the Messages API's four counts). */
export interface LlmUsage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheCreationTokens: number;
}

export interface LlmResult {
  text: string;
  model: string;
  stopReason: string | null;
  usage: LlmUsage;
  /** The response's headers: what they say of the provider's rate limits. */
  headers?: HeaderReader;
}

/**
 * The real SDK with its own retries off (`maxRetries: 0`): the SDK would otherwise retry 429/5xx
 * twice and wait out any retry-after, multiplying load exactly when the provider is struggling.
 */
export function createAnthropicClient(opts: { apiKey: string | undefined; baseUrl: string }): Anthropic {
  return new Anthropic({ apiKey: opts.apiKey ?? 'sluice-simulator', baseURL: opts.baseUrl, maxRetries: 0, timeout: 60_000 });
}

function retryAfterOf(err: InstanceType<typeof Anthropic.APIError>): number | undefined {
  const ms = retryAfterMs(err.headers?.get('retry-after'), Date.now());
  return ms === undefined ? undefined : ms / 1000;
}

/** Maps the SDK's error classes onto StepError so the processor's one retry layer can decide. */
export function toStepError(dependency: string, err: unknown): StepError {
  if (err instanceof Anthropic.APIConnectionTimeoutError) return new StepError('total_timeout', dependency, `${dependency}: ${err.message}`, true);
  if (err instanceof Anthropic.APIUserAbortError) return new StepError('deadline', dependency, `${dependency}: call aborted`, false);
  if (err instanceof Anthropic.APIConnectionError) return new StepError('connection', dependency, `${dependency}: ${err.message}`, true);
  if (err instanceof Anthropic.APIError) {
    const status = err.status ?? 0;
    const retryAfter = retryAfterOf(err);
    // A 429 without retry-after is a spend limit: it will not succeed on retry (docs/decisions.md).
    const retryable = status === 429 ? retryAfter !== undefined : status === 408 || status === 529 || status >= 500;
    const headers = err.headers;
    return new StepError('http_status', dependency, `${dependency}: HTTP ${status} ${err.message}`.slice(0, 500), retryable, status, retryAfter, headers ? (name) => headers.get(name) : undefined);
  }
  return new StepError('bad_response', dependency, `${dependency}: ${(err as Error)?.message ?? String(err)}`, false);
}

/** The HTTP status Anthropic documents for each error type, for errors that arrive inside a 200 stream. */
const STREAM_ERROR_STATUS: Partial<Record<string, number>> = {
  invalid_request_error: 400,
  authentication_error: 401,
  billing_error: 402,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  timeout_error: 504,
  overloaded_error: 529,
};

function streamError(dependency: string, data: string): StepError {
  const error = (parseEvent(dependency, data) as { error?: { type?: unknown; message?: unknown } }).error;
  const type = typeof error?.type === 'string' ? error.type : 'unknown_error';
  // An unknown type arrived after the provider accepted the request, so it is the provider's fault.
  const status = STREAM_ERROR_STATUS[type] ?? 500;
  const message = `${dependency}: HTTP ${status} ${type} mid-stream: ${String(error?.message ?? '')}`.slice(0, 500);
  // Unlike a 429 response, a rate_limit_error mid-stream is not a spend limit (those refuse the
  // request before streaming), so it is retryable like the overload it is.
  return new StepError('http_status', dependency, message, status === 429 || status >= 500, status);
}

/**
 * A token count from the provider, or undefined when absent. Anything but a non-negative safe
 * integer counts as absent: the counts feed counters, which cannot go down.
 */
function tokenCount(value: unknown): number | undefined {
  return Number.isSafeInteger(value) && (value as number) >= 0 ? (value as number) : undefined;
}

/** Takes the counts a `usage` object reports over those known so far (message_delta's are cumulative). */
function mergeUsage(usage: LlmUsage, reported: Partial<Record<'input_tokens' | 'output_tokens' | 'cache_read_input_tokens' | 'cache_creation_input_tokens', unknown>>): void {
  usage.inputTokens = tokenCount(reported.input_tokens) ?? usage.inputTokens;
  usage.outputTokens = tokenCount(reported.output_tokens) ?? usage.outputTokens;
  usage.cacheReadTokens = tokenCount(reported.cache_read_input_tokens) ?? usage.cacheReadTokens;
  usage.cacheCreationTokens = tokenCount(reported.cache_creation_input_tokens) ?? usage.cacheCreationTokens;
}

function parseEvent(dependency: string, data: string): unknown {
  try {
    return JSON.parse(data);
  } catch {
    throw new StepError('bad_response', dependency, `${dependency}: a stream event is not JSON: ${data.slice(0, 200)}`, false);
  }
}

/**
 * One streamed Messages call under three budgets, each a timer that aborts the request:
 * - connect (`config.timeouts.connectMs`): from the call's start until the response headers have
 *   arrived (for an error status, until its short body has been read too). It covers DNS, TCP,
 *   TLS, sending the request and the provider's time to answer with headers, which a streaming
 *   provider sends before the first token.
 * - read (`config.timeouts.readMs`): idle time on the stream, re-armed by every SSE event,
 *   pings included: a provider that still pings is slow, not gone.
 * - total (`req.timeoutMs`): the whole call, headers to message_stop.
 * The SDK's events are read raw because its parsed stream drops pings and ends silently when
 * aborted, which would hide which budget ran out.
 */
export async function callLlm(client: Anthropic, req: LlmRequest): Promise<LlmResult> {
  const { dependency } = req;
  const { connectMs, readMs } = req.config.timeouts;
  const controller = new AbortController();
  let expired: StepError | undefined;
  const expire = (kind: 'connect_timeout' | 'read_timeout' | 'total_timeout', detail: string) => () => {
    expired ??= new StepError(kind, dependency, `${dependency}: ${detail}`, true);
    controller.abort();
  };
  const totalTimer = setTimeout(expire('total_timeout', `no complete answer within ${req.timeoutMs} ms`), req.timeoutMs);
  const connectTimer = setTimeout(expire('connect_timeout', `no response headers within ${connectMs} ms`), connectMs);
  let idleTimer: NodeJS.Timeout | undefined;
  const armIdle = () => {
    clearTimeout(idleTimer);
    idleTimer = setTimeout(expire('read_timeout', `no stream event for ${readMs} ms`), readMs);
  };
  try {
    const response = await client.messages
      .create(
        {
          model: req.config.model,
          max_tokens: req.config.maxTokens,
          system: req.system,
          messages: [{ role: 'user', content: req.userContent }],
          metadata: { user_id: req.tenantId },
          stream: true,
        },
        // The SDK's own timer stops at the headers, so it can only ever duplicate ours.
        { signal: controller.signal, timeout: req.timeoutMs, headers: req.headers, maxRetries: req.config.sdkMaxRetries },
      )
      .asResponse();
    clearTimeout(connectTimer);
    armIdle();
    const headers: HeaderReader = (name) => response.headers.get(name);
    let text = '';
    let model = req.config.model;
    let stopReason: string | null = null;
    const usage: LlmUsage = { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0 };
    for await (const sse of Stream.rawEvents(response, controller)) {
      armIdle();
      if (sse.event === 'error') throw streamError(dependency, sse.data);
      if (sse.event === 'ping' || sse.data === '') continue;
      const event = parseEvent(dependency, sse.data) as Anthropic.RawMessageStreamEvent;
      switch (event.type) {
        case 'message_start':
          model = event.message.model;
          mergeUsage(usage, event.message.usage);
          break;
        case 'content_block_delta':
          if (event.delta.type === 'text_delta') text += event.delta.text;
          break;
        case 'message_delta':
          stopReason = event.delta.stop_reason;
          // Cumulative, so the last one is the total.
          mergeUsage(usage, event.usage);
          break;
        case 'message_stop':
          return { text, model, stopReason, usage, headers };
      }
    }
    throw new StepError('connection', dependency, `${dependency}: the stream ended before message_stop`, true);
  } catch (err) {
    // Our own abort surfaces as an AbortError or APIUserAbortError; the budget that fired is the cause.
    throw expired ?? (err instanceof StepError ? err : toStepError(dependency, err));
  } finally {
    clearTimeout(totalTimer);
    clearTimeout(connectTimer);
    clearTimeout(idleTimer);
  }
}
