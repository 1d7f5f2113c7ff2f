import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ingressSignature, signatureMatches } from '../../../src/ingress/ingress-signature.js';

const SECRET = Buffer.from('0123456789abcdef0123456789abcdef');
const VALUE = Buffer.from([0, 0, 0, 0, 7, 1, 2, 3]);

describe('ingress signature', () => {
  it('is the hex HMAC-SHA256 of the tenant, a zero byte and the value', () => {
    const expected = createHmac('sha256', SECRET).update(Buffer.concat([Buffer.from('tenant-a'), Buffer.of(0), VALUE])).digest('hex');
    expect(ingressSignature(SECRET, 'tenant-a', VALUE)).toBe(expected);
  });

  it('verifies its own signature', () => {
    expect(signatureMatches(SECRET, 'tenant-a', VALUE, ingressSignature(SECRET, 'tenant-a', VALUE))).toBe(true);
  });

  it('refuses a missing, malformed or upper-case signature', () => {
    expect(signatureMatches(SECRET, 'tenant-a', VALUE, undefined)).toBe(false);
    expect(signatureMatches(SECRET, 'tenant-a', VALUE, '')).toBe(false);
    expect(signatureMatches(SECRET, 'tenant-a', VALUE, 'zz')).toBe(false);
    expect(signatureMatches(SECRET, 'tenant-a', VALUE, ingressSignature(SECRET, 'tenant-a', VALUE).toUpperCase())).toBe(false);
  });

  it('does not verify for another tenant, another secret or changed bytes', () => {
    const signature = ingressSignature(SECRET, 'tenant-a', VALUE);
    expect(signatureMatches(SECRET, 'tenant-b', VALUE, signature)).toBe(false);
    expect(signatureMatches(Buffer.from('another secret of sixteen+ bytes'), 'tenant-a', VALUE, signature)).toBe(false);
    expect(signatureMatches(SECRET, 'tenant-a', Buffer.concat([VALUE, Buffer.of(0)]), signature)).toBe(false);
  });

  it('cannot be moved between tenant and value', () => {
    // "tenant-a" + "\0" + "x" never equals "tenant-a\0" + "\0" + "x" split differently: the tenant holds no zero byte.
    expect(ingressSignature(SECRET, 'tenant-a', Buffer.from('bx'))).not.toBe(ingressSignature(SECRET, 'tenant-ab', Buffer.from('x')));
  });
});
