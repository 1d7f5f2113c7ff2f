import { randomUUID } from 'node:crypto';
import type { EventCodec } from '../../src/events/codec.js';
import { statusRequestId } from '../../src/events/ingress-request-id.js';
import { SUBJECTS, type RunStatusChanged, type RunSubmission } from '../../src/events/schemas.js';
import { SIGNATURE_HEADER, ingressSignature } from '../../src/ingress/ingress-signature.js';

/** A RunSubmission of support-reply for tenant-a, with a fresh request id and key, and the given fields. */
export function runSubmission(over: Partial<RunSubmission> = {}): RunSubmission {
  return {
    requestId: randomUUID(),
    idempotencyKey: randomUUID(),
    tenantId: 'tenant-a',
    workflow: 'support-reply',
    input: JSON.stringify({ message: 'Where is order 42?', orderId: '42' }),
    class: null,
    deadlineMs: null,
    ...over,
  };
}

/** One ingress record as a producer writes it: keyed by tenant (or `key`), signed with `secret`. */
export async function signedRecord(codec: EventCodec, sub: RunSubmission, secret: Buffer, key: string = sub.tenantId): Promise<{ key: string; value: Buffer; headers: Record<string, string> }> {
  const value = await codec.encode(SUBJECTS.runSubmission, sub);
  return { key, value, headers: { [SIGNATURE_HEADER]: ingressSignature(secret, key, value) } };
}

/** Whether a status is the ingress's answer to `sub` (its request id, bound to its tenant). */
export const isAnswerTo =
  (sub: Pick<RunSubmission, 'tenantId' | 'requestId'>) =>
  (status: Pick<RunStatusChanged, 'requestId'>): boolean =>
    status.requestId === statusRequestId(sub.tenantId, sub.requestId);
