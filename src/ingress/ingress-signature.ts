import { timingSafeEqual } from 'node:crypto';
import { ingressSignature } from '../events/ingress-signature.js';

export { SIGNATURE_HEADER, ingressSignature } from '../events/ingress-signature.js';

const HEX_SHA256 = /^[0-9a-f]{64}$/;

/** Whether `signature` (the header's text) is the record's signature; compared in constant time. */
export function signatureMatches(secret: Buffer, tenantId: string, value: Buffer, signature: string | undefined): boolean {
  if (signature === undefined || !HEX_SHA256.test(signature)) return false;
  return timingSafeEqual(Buffer.from(ingressSignature(secret, tenantId, value), 'hex'), Buffer.from(signature, 'hex'));
}
