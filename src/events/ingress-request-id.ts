import type { RunStatusChanged } from './schemas.js';

/**
 * A producer's request id as the statuses the ingress publishes carry it: `<tenantId>:<requestId>`.
 * Producers choose their request ids and every producer reads the one status topic, so an id alone
 * is unique only within its tenant: bound to the tenant whose signature the ingress checked, another
 * tenant reusing the id never writes a status that reads as this tenant's request, even to a
 * consumer that looks at `requestId` alone. Tenant ids hold no ':' (the config's name rule), so the
 * first ':' ends the tenant.
 *
 * Part of the status event's wire format, so both ends take it from here: the ingress that writes
 * it and the producer library (`SluiceProducer`) that reads it.
 */
export function statusRequestId(tenantId: string, requestId: string): string {
  return `${tenantId}:${requestId}`;
}

/**
 * The producer's own request id a status answers, or undefined when the status is not an answer to
 * one of `tenantId`'s requests: another tenant's status is never one, whatever its `requestId` says.
 * An id without the tenant's prefix is taken as it is: an ingress older than the prefix wrote it,
 * and the status's `tenantId` (the signature's tenant) already says it is this tenant's, so
 * producers can be upgraded before the ingress.
 */
export function ownRequestId(tenantId: string, e: Pick<RunStatusChanged, 'tenantId' | 'requestId'>): string | undefined {
  if (e.tenantId !== tenantId || e.requestId == null) return undefined;
  const prefix = `${tenantId}:`;
  return e.requestId.startsWith(prefix) ? e.requestId.slice(prefix.length) : e.requestId;
}
