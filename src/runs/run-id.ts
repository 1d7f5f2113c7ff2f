import { pooledRandomBytes } from '../util/pooled-random.js';

/**
 * RFC 9562 UUIDv7: time-ordered, so run ids sort by admission time and index well in Postgres,
 * while 74 random bits keep them unguessable across tenants.
 */
export function newRunId(now: number = Date.now(), random: Buffer = pooledRandomBytes(10)): string {
  const b = Buffer.alloc(16);
  b.writeUIntBE(now, 0, 6);
  random.copy(b, 6, 0, 10);
  b[6] = 0x70 | (b[6]! & 0x0f);
  b[8] = 0x80 | (b[8]! & 0x3f);
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** A run id's shape: a UUID in lowercase, as `newRunId` writes it. */
export const RUN_ID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export function isRunId(value: string): boolean {
  return RUN_ID_PATTERN.test(value);
}

/** The admission time (epoch ms) a run id carries, or undefined for an id that is not a UUIDv7. */
export function runIdTime(runId: string): number | undefined {
  if (!isRunId(runId) || runId[14] !== '7') return undefined;
  return Number.parseInt(runId.slice(0, 8) + runId.slice(9, 13), 16);
}
