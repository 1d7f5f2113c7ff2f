import { canonicalJson } from '../util/canonical-json.js';
/** Which field of a request is wrong and why, as the HTTP API's problem documents list them. */
export interface InputFieldError {
  path: string;
  message: string;
}

export interface RunInputBounds {
  maxDepth: number;
  maxBytes: number;
}

export type RunInputCheck = { ok: true; json: string } | { ok: false; error: InputFieldError };

/**
 * Whether a parsed JSON value nests arrays and objects deeper than `maxDepth` (a scalar is depth 0,
 * `{}` and `[]` depth 1). Iterative with an explicit stack and stopping at the first container past
 * the bound, so hostile nesting costs no call stack and at most one visit per value.
 */
export function nestsDeeperThan(value: unknown, maxDepth: number): boolean {
  const pending: Array<[unknown, number]> = [[value, 0]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [node, depth] = next;
    if (node === null || typeof node !== 'object') continue;
    if (depth + 1 > maxDepth) return true;
    for (const child of Array.isArray(node) ? node : Object.values(node)) pending.push([child, depth + 1]);
  }
  return false;
}

/**
 * A run's input as the JSON text its event carries, produced once and only within bounds: the
 * depth check comes first, because serializing deep nesting recurses (and overflows the stack at a
 * few thousand levels). The text is canonical (keys sorted at every depth), so the same input is
 * always the same bytes and the Idempotency-Key fingerprint can reuse it.
 */
export function serializeRunInput(input: unknown, bounds: RunInputBounds): RunInputCheck {
  if (nestsDeeperThan(input, bounds.maxDepth)) {
    return { ok: false, error: { path: '/input', message: `nests arrays and objects deeper than ${bounds.maxDepth} levels` } };
  }
  const json = canonicalJson(input);
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > bounds.maxBytes) {
    return { ok: false, error: { path: '/input', message: `is ${bytes} bytes as JSON; the limit is ${bounds.maxBytes}` } };
  }
  return { ok: true, json };
}
