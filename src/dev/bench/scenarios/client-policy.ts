/**
 * What a scenario's client does with each answer: pure, so the harness and its tests agree on
 * which answers end a request and which send it again.
 */
import type { ClientRetry } from './scenario.js';

/** How one send ended, as the client sees it. */
export type SendOutcome =
  /** 202: the run was accepted; its terminal status is the answer. */
  | { kind: 'accepted'; runId: string }
  /** 429 or 503 with Retry-After: an honest refusal. */
  | { kind: 'refused'; status: number; code: string }
  /** Any other HTTP status: the request itself was wrong, sending it again cannot help. */
  | { kind: 'error'; status: number; code: string }
  /** No answer: connection refused or reset, or the client's timeout. */
  | { kind: 'transport'; message: string };

export const REFUSAL_STATUSES: ReadonlySet<number> = new Set([429, 503]);

/** Terminal statuses after which a client that wanted an answer asks again. */
const FAILED_RUN_STATUSES: ReadonlySet<string> = new Set(['failed', 'expired', 'dead_lettered']);

/** Whether the client sends again after this answer (before counting its retries left). */
export function wantsRetry(answer: { outcome: SendOutcome; terminalStatus?: string }): boolean {
  const o = answer.outcome;
  if (o.kind === 'refused' || o.kind === 'transport') return true;
  if (o.kind === 'accepted') return answer.terminalStatus !== undefined && FAILED_RUN_STATUSES.has(answer.terminalStatus);
  return false;
}

/**
 * The wait in ms before the `attempt + 1`-th send of a request whose `attempt`-th send (from 1)
 * wants a retry, or undefined when the client gives up. Delays are scenario seconds, divided by
 * the time scale like every other duration.
 */
export function retryDelayMs(policy: ClientRetry, attempt: number, timeScale: number): number | undefined {
  if (policy.kind === 'none') return undefined;
  const delaySec = policy.delaysSec[attempt - 1];
  return delaySec === undefined ? undefined : (delaySec * 1000) / timeScale;
}

/** The outcome of an HTTP answer to `POST /v1/runs`. */
export function sendOutcome(status: number, body: unknown): SendOutcome {
  const fields = typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {};
  const code = typeof fields.code === 'string' ? fields.code : `http_${status}`;
  if (status === 202 && typeof fields.runId === 'string') return { kind: 'accepted', runId: fields.runId };
  if (REFUSAL_STATUSES.has(status)) return { kind: 'refused', status, code };
  return { kind: 'error', status, code: status === 202 ? 'accepted_without_run_id' : code };
}
