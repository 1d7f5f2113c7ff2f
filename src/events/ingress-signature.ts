import { createHmac } from 'node:crypto';

/** The header of an ingress record that proves the producer holds the tenant's ingress secret. */
export const SIGNATURE_HEADER = 'sluice-signature';

/**
 * Hex HMAC-SHA256, under the tenant's ingress secret, of the tenant id's UTF-8 bytes, one zero
 * byte, then the record's value bytes as they are on the wire. The tenant is in the signed bytes
 * so a signature made for one tenant never verifies for another, even with a shared secret; the
 * zero byte keeps "tenant" + "value" from being split another way.
 *
 * Part of the ingress record's wire format, so both ends take it from here: the ingress that
 * verifies it and the producer library (`SluiceProducer`) that signs.
 */
export function ingressSignature(secret: Buffer, tenantId: string, value: Buffer): string {
  return createHmac('sha256', secret).update(tenantId, 'utf8').update(Buffer.of(0)).update(value).digest('hex');
}
