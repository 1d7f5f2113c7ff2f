import Anthropic from '@anthropic-ai/sdk';
import { Stream } from '@anthropic-ai/sdk/core/streaming.js';
import type { LlmDependencyConfig } from '../config/schema.js';
import { retryAfterMs, type HeaderReader } from './rate-limit-headers.js';
import { StepError } from './step-error.js';

/** One message of the conversation, as the Messages API takes it. */
export type LlmMessage = Anthropic.MessageParam;
/** A content block of a message sent: text, a tool call sent back, or a tool's result. */
export type LlmMessageBlock = Anthropic.ContentBlockParam;

/** A tool the model may ask for: name, description and JSON Schema of its input. */
export interface LlmTool {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

export interface LlmRequest {
  dependency: string;
  config: LlmDependencyConfig;
  system: string;
  messages: LlmMessage[];
  tools?: readonly LlmTool[];
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

/**
 * A block of the model's answer. A tool_use whose streamed input is not a JSON object has `input`
 * undefined and `inputError` saying why: the model is told so in an is_error tool_result, which a
 * thrown error would not allow.
 */
export type LlmContentBlock = { type: 'text'; text: string } | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> | undefined; inputError?: string };

export interface LlmResult {
  /** The text blocks, concatenated. */
  text: string;
  content: LlmContentBlock[];
  model: string;
  stopReason: string | null;
  /** As the provider reported it: whether to believe its output count is the caller's decision (`answerBytes`). */
  usage: LlmUsage;
  /** UTF-8 bytes of the text and tool input the answer streamed: what its output tokens must account for. */
  answerBytes: number;
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

/** What one response may make us hold: past these the provider is broken or hostile, not verbose. */
export const MAX_CONTENT_BLOCKS = 64;
export const MAX_TOOL_INPUT_BYTES = 256 * 1024;

/**
 * The most UTF-8 bytes one output token is taken to carry, over a whole answer: four times the
 * usual rule of thumb of about four characters a token for English text and code. Other scripts
 * take fewer bytes a token (a CJK character is 3 bytes and about a token); only runs of one
 * character (spaces, dashes) make much longer tokens, and no answer is made of those alone. So an
 * answer over `maxTokens` × 16 bytes is more than the request's `max_tokens` could have produced.
 */
export const MAX_BYTES_PER_TOKEN = 16;
/** Added to every answer's bound, so a small `maxTokens` is never cut short by a few long tokens. */
export const ANSWER_SLACK_BYTES = 16 * 1024;
/** JSON escaping makes a byte at most 6 (`\u0000`); the event's own fields take far less than this. */
const EVENT_FRAMING_BYTES = 4 * 1024;

/** Bytes of text and tool input an answer to a request of `maxTokens` may stream. */
export function maxAnswerBytes(maxTokens: number): number {
  return maxTokens * MAX_BYTES_PER_TOKEN + ANSWER_SLACK_BYTES;
}

/** Bytes one SSE event of such an answer may take: at most the whole answer in one delta, every byte escaped. */
export function maxEventBytes(maxTokens: number): number {
  return 6 * maxAnswerBytes(maxTokens) + EVENT_FRAMING_BYTES;
}

const LF = 0x0a;
const CR = 0x0d;

/**
 * Bytes of the SSE event still arriving: those since the last blank line, which ends an event.
 * The SDK holds an event's lines until that blank line, so a provider could make it buffer one
 * event of any size; counting the raw bytes lets the call be cut off first. Line ends are LF, CR
 * or CRLF, as SSE allows.
 */
export class SseEventMeter {
  private pending = 0;
  private atLineStart = true;
  private afterCr = false;

  /** Feeds the next chunk of the body; returns the most bytes an event held pending within it. */
  feed(chunk: Uint8Array): number {
    let most = this.pending;
    for (const byte of chunk) {
      if (byte === LF && this.afterCr) {
        this.afterCr = false;
        continue;
      }
      this.afterCr = byte === CR;
      if (byte === LF || byte === CR) {
        if (this.atLineStart) this.pending = 0;
        this.atLineStart = true;
        continue;
      }
      this.atLineStart = false;
      this.pending++;
      if (this.pending > most) most = this.pending;
    }
    return most;
  }
}

type ToolInput = Pick<Extract<LlmContentBlock, { type: 'tool_use' }>, 'input' | 'inputError'>;

/**
 * A content block while its deltas arrive: a tool_use has its input once stopped. `skipped` is a
 * block of a type we do not return (thinking).
 */
type OpenBlock = { type: 'text'; text: string } | { type: 'tool_use'; id: string; name: string; json: string; input?: ToolInput } | { type: 'skipped' };

/** A tool's streamed input: the object it must be, or why it is not one. */
function toolInput(json: string): ToolInput {
  if (json === '') return { input: {} };
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch (err) {
    return { input: undefined, inputError: `the input is not JSON: ${(err as Error).message}`.slice(0, 300) };
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    return { input: undefined, inputError: `the input is JSON but not an object: ${json.slice(0, 100)}` };
  }
  return { input: parsed as Record<string, unknown> };
}

/** Assembles the answer's content blocks from their start, delta and stop events, within the bounds above. */
class ContentAssembler {
  private readonly blocks = new Map<number, OpenBlock>();
  private toolInputBytes = 0;
  /** Text and tool input received so far. */
  answerBytes = 0;
  private readonly maxAnswerBytes: number;

  constructor(
    private readonly dependency: string,
    private readonly maxTokens: number,
  ) {
    this.maxAnswerBytes = maxAnswerBytes(maxTokens);
  }

  start(event: Anthropic.RawContentBlockStartEvent): void {
    const index = this.index(event.index);
    if (this.blocks.has(index)) throw this.bad(`content block ${index} started twice`);
    if (this.blocks.size >= MAX_CONTENT_BLOCKS) throw this.bad(`more than ${MAX_CONTENT_BLOCKS} content blocks`);
    const block = event.content_block as { type?: unknown; id?: unknown; name?: unknown } | undefined;
    if (block?.type === 'text') this.blocks.set(index, { type: 'text', text: '' });
    else if (block?.type === 'tool_use') {
      if (typeof block.id !== 'string' || typeof block.name !== 'string') throw this.bad(`tool_use block ${index} has no id or name`);
      this.blocks.set(index, { type: 'tool_use', id: block.id, name: block.name, json: '' });
    } else this.blocks.set(index, { type: 'skipped' });
  }

  delta(event: Anthropic.RawContentBlockDeltaEvent): void {
    const block = this.opened(event.index);
    const delta = event.delta as { type?: unknown; text?: unknown; partial_json?: unknown };
    if (delta.type === 'text_delta') {
      if (block.type !== 'text' || typeof delta.text !== 'string') throw this.bad(`a text_delta for content block ${event.index}, which is not text`);
      this.receive(Buffer.byteLength(delta.text));
      block.text += delta.text;
    } else if (delta.type === 'input_json_delta') {
      if (block.type !== 'tool_use' || block.input || typeof delta.partial_json !== 'string') throw this.bad(`an input_json_delta for content block ${event.index}, which is no open tool_use`);
      const bytes = Buffer.byteLength(delta.partial_json);
      this.toolInputBytes += bytes;
      if (this.toolInputBytes > MAX_TOOL_INPUT_BYTES) throw this.bad(`more than ${MAX_TOOL_INPUT_BYTES} bytes of tool input`);
      this.receive(bytes);
      block.json += delta.partial_json;
    }
  }

  /** Counts a delta before it is kept: past the answer's bound nothing more is held. */
  private receive(bytes: number): void {
    this.answerBytes += bytes;
    if (this.answerBytes > this.maxAnswerBytes) {
      throw this.bad(`the answer passed its bound of ${this.maxAnswerBytes} bytes (maxTokens ${this.maxTokens} × ${MAX_BYTES_PER_TOKEN} + ${ANSWER_SLACK_BYTES}) with ${this.answerBytes} bytes received`);
    }
  }

  stop(event: Anthropic.RawContentBlockStopEvent): void {
    const block = this.opened(event.index);
    if (block.type !== 'tool_use' || block.input) return;
    block.input = toolInput(block.json);
    block.json = '';
  }

  /** The blocks in the answer's order. */
  content(): LlmContentBlock[] {
    return [...this.blocks.entries()]
      .sort(([a], [b]) => a - b)
      .flatMap(([index, block]): LlmContentBlock[] => {
        if (block.type === 'text') return [{ type: 'text', text: block.text }];
        if (block.type === 'skipped') return [];
        if (!block.input) throw this.bad(`tool_use block ${index} never stopped`);
        return [{ type: 'tool_use', id: block.id, name: block.name, ...block.input }];
      });
  }

  private opened(index: unknown): OpenBlock {
    const block = this.blocks.get(this.index(index));
    if (!block) throw this.bad(`an event for content block ${String(index)}, which never started`);
    return block;
  }

  private index(index: unknown): number {
    if (!Number.isSafeInteger(index) || (index as number) < 0) throw this.bad(`a content block index that is not a non-negative integer: ${String(index)}`);
    return index as number;
  }

  private bad(detail: string): StepError {
    return new StepError('bad_response', this.dependency, `${this.dependency}: ${detail}`, false);
  }
}

/** The response with its body cut off (`over` told the bytes) once one event passes `maxBytes`. */
function boundedEvents(response: Response, maxBytes: number, over: (bytes: number) => void): Response {
  if (!response.body) return response;
  const meter = new SseEventMeter();
  const body = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, stream) {
        const bytes = meter.feed(chunk);
        if (bytes <= maxBytes) return stream.enqueue(chunk);
        over(bytes);
        stream.error(new Error(`a stream event of over ${maxBytes} bytes`));
      },
    }),
  );
  return new Response(body, { status: response.status, headers: response.headers });
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
 * aborted, which would hide which budget ran out. What the answer may make us hold is bounded by
 * its `maxTokens` (`maxAnswerBytes`, and `maxEventBytes` for one event still arriving); past a
 * bound the call fails, not retryable, and the request is aborted so nothing more is read.
 */
export async function callLlm(client: Anthropic, req: LlmRequest): Promise<LlmResult> {
  const { dependency } = req;
  const { connectMs, readMs } = req.config.timeouts;
  const controller = new AbortController();
  /** Why we ended the call ourselves: a budget ran out, or the answer passed a bound. */
  let endedBy: StepError | undefined;
  const end = (why: StepError) => {
    endedBy ??= why;
    controller.abort();
  };
  const expire = (kind: 'connect_timeout' | 'read_timeout' | 'total_timeout', detail: string) => () => end(new StepError(kind, dependency, `${dependency}: ${detail}`, true));
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
          messages: req.messages,
          // The provider checks each schema; the SDK's type only insists it describes an object.
          ...(req.tools?.length ? { tools: req.tools.map((t) => ({ name: t.name, description: t.description, input_schema: t.inputSchema as Anthropic.Tool.InputSchema })) } : {}),
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
    const { maxTokens } = req.config;
    const content = new ContentAssembler(dependency, maxTokens);
    let model = req.config.model;
    let stopReason: string | null = null;
    const usage: LlmUsage = { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheCreationTokens: 0 };
    for await (const sse of Stream.rawEvents(boundedEvents(response, maxEventBytes(maxTokens), (bytes) => end(new StepError('bad_response', dependency, `${dependency}: a stream event passed its bound of ${maxEventBytes(maxTokens)} bytes (from maxTokens ${maxTokens}) with ${bytes} bytes received`, false))), controller)) {
      armIdle();
      if (sse.event === 'error') throw streamError(dependency, sse.data);
      if (sse.event === 'ping' || sse.data === '') continue;
      const event = parseEvent(dependency, sse.data) as Anthropic.RawMessageStreamEvent;
      switch (event.type) {
        case 'message_start':
          model = event.message.model;
          mergeUsage(usage, event.message.usage);
          break;
        case 'content_block_start':
          content.start(event);
          break;
        case 'content_block_delta':
          content.delta(event);
          break;
        case 'content_block_stop':
          content.stop(event);
          break;
        case 'message_delta':
          stopReason = event.delta.stop_reason;
          // Cumulative, so the last one is the total.
          mergeUsage(usage, event.usage);
          break;
        case 'message_stop': {
          const blocks = content.content();
          const text = blocks.map((b) => (b.type === 'text' ? b.text : '')).join('');
          return { text, content: blocks, model, stopReason, usage, answerBytes: content.answerBytes, headers };
        }
      }
    }
    throw new StepError('connection', dependency, `${dependency}: the stream ended before message_stop`, true);
  } catch (err) {
    // Whatever failed, nothing more is read: not left to how the SDK's iterator ends (a no-op once the stream ended).
    controller.abort();
    // Our own abort surfaces as an AbortError or APIUserAbortError; why we ended the call is the cause.
    throw endedBy ?? (err instanceof StepError ? err : toStepError(dependency, err));
  } finally {
    clearTimeout(totalTimer);
    clearTimeout(connectTimer);
    clearTimeout(idleTimer);
  }
}
