import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ownRequestId, statusRequestId } from '../../../src/events/ingress-request-id.js';
import { MAX_REQUEST_ID } from '../../../src/client/types.js';

/** Tenant ids as the config's name rule allows them (src/config/schema.ts). */
const tenantId = fc.stringMatching(/^[a-z0-9][a-z0-9._-]{0,62}$/);
const requestId = fc.string({ minLength: 1, maxLength: MAX_REQUEST_ID, unit: 'grapheme' });

describe('request ids on the status topic', () => {
  it('are the tenant, a colon and the producer\'s id', () => {
    expect(statusRequestId('tenant-a', 'order-42')).toBe('tenant-a:order-42');
  });

  it("read back as the producer's own id for its own tenant", () => {
    fc.assert(fc.property(tenantId, requestId, (t, r) => ownRequestId(t, { tenantId: t, requestId: statusRequestId(t, r) }) === r));
  });

  it("never read as another tenant's request, whatever id either chose", () => {
    fc.assert(
      fc.property(tenantId, tenantId, requestId, requestId, (a, b, ra, rb) => {
        fc.pre(a !== b);
        // A consumer that looks at the id alone still tells the two tenants apart…
        expect(statusRequestId(a, ra)).not.toBe(statusRequestId(b, rb));
        // …and the producer library reads none of another tenant's statuses, however its id is written.
        for (const written of [statusRequestId(a, ra), statusRequestId(b, rb), rb]) expect(ownRequestId(b, { tenantId: a, requestId: written })).toBeUndefined();
      }),
    );
  });

  it('take an id without the prefix, as an older ingress wrote it, only from the own tenant', () => {
    expect(ownRequestId('tenant-a', { tenantId: 'tenant-a', requestId: 'order-42' })).toBe('order-42');
    expect(ownRequestId('tenant-a', { tenantId: 'tenant-a', requestId: null })).toBeUndefined();
    expect(ownRequestId('tenant-a', { tenantId: 'tenant-a' })).toBeUndefined();
  });
});
