import Anthropic from '@anthropic-ai/sdk';
import type { LlmDependencyConfig } from '../../config/schema.js';
import { StepError } from './step-error.js';

export interface LlmRequest {
  dependency: string;
  config: LlmDependencyConfig;
  system: string;
  userContent: string;
  tenantId: string;
  timeoutMs: number;
  headers: Record<string, string>;
}

export interface LlmResult {
  text: string;
  model: string;
  stopReason: string | null;
  usage: { inputTokens: number; outputTokens: number };
}

/**
 * The real SDK with its own retries off (`maxRetries: 0`): the SDK would otherwise retry 429/5xx
 * twice and wait out any retry-after, multiplying load exactly when the provider is struggling.
 */
export function createAnthropicClient(opts: { apiKey: string | undefined; baseUrl: string }): Anthropic {
  return new Anthropic({ apiKey: opts.apiKey ?? 'sluice-simulator', baseURL: opts.baseUrl, maxRetries: 0, timeout: 60_000 });
}

function retryAfterOf(err: InstanceType<typeof Anthropic.APIError>): number | undefined {
  const raw = err.headers?.get('retry-after');
  if (!raw) return undefined;
  const secs = Number(raw);
  return Number.isFinite(secs) && secs >= 0 ? secs : undefined;
}

/** Maps the SDK's error classes onto StepError so the processor's one retry layer can decide. */
export function toStepError(dependency: string, err: unknown): StepError {
  if (err instanceof Anthropic.APIConnectionTimeoutError) return new StepError('total_timeout', dependency, `${dependency}: ${err.message}`, true);
  if (err instanceof Anthropic.APIUserAbortError) return new StepError('deadline', dependency, `${dependency}: call aborted`, false);
  if (err instanceof Anthropic.APIConnectionError) return new StepError('connection', dependency, `${dependency}: ${err.message}`, true);
  if (err instanceof Anthropic.APIError) {
    const status = err.status ?? 0;
    const retryAfter = retryAfterOf(err);
    // A 429 without retry-after is a spend limit: it will not succeed on retry (NOTES.md).
    const retryable = status === 429 ? retryAfter !== undefined : status === 408 || status === 529 || status >= 500;
    return new StepError('http_status', dependency, `${dependency}: HTTP ${status} ${err.message}`.slice(0, 500), retryable, status, retryAfter);
  }
  return new StepError('bad_response', dependency, `${dependency}: ${(err as Error)?.message ?? String(err)}`, false);
}

export async function callLlm(client: Anthropic, req: LlmRequest): Promise<LlmResult> {
  try {
    const msg = await client.messages.create(
      {
        model: req.config.model,
        max_tokens: req.config.maxTokens,
        system: req.system,
        messages: [{ role: 'user', content: req.userContent }],
        metadata: { user_id: req.tenantId },
      },
      { timeout: req.timeoutMs, headers: req.headers, maxRetries: 0 },
    );
    const text = msg.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    return { text, model: msg.model, stopReason: msg.stop_reason, usage: { inputTokens: msg.usage.input_tokens, outputTokens: msg.usage.output_tokens } };
  } catch (err) {
    throw toStepError(req.dependency, err);
  }
}
