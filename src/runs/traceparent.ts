import { pooledRandomBytes } from '../util/pooled-random.js';

/** W3C Trace Context `traceparent`: version-traceid-parentid-flags. */
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

function isAllZero(hex: string): boolean {
  return /^0+$/.test(hex);
}

/** Continues the caller's trace when it sent a valid traceparent, else starts a new one. */
export function childTraceparent(incoming: string | undefined, random: (n: number) => Buffer = pooledRandomBytes): string {
  const spanId = random(8).toString('hex');
  const m = incoming ? TRACEPARENT.exec(incoming.trim().toLowerCase()) : null;
  if (m && !isAllZero(m[1]!) && !isAllZero(m[2]!)) return `00-${m[1]}-${spanId}-${m[3]}`;
  return `00-${random(16).toString('hex')}-${spanId}-01`;
}

export function traceIdOf(traceparent: string): string | undefined {
  return TRACEPARENT.exec(traceparent)?.[1];
}
