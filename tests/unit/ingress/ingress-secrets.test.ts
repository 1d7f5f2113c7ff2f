import { describe, expect, it } from 'vitest';
import { ConfigError } from '../../../src/config/load.js';
import { readIngressSecrets } from '../../../src/ingress/ingress-secrets.js';

type Tenants = Parameters<typeof readIngressSecrets>[0]['tenants'];
const tenants = (ingress: Record<string, { secretEnv?: string; secretFile?: string } | undefined>) =>
  Object.fromEntries(Object.entries(ingress).map(([id, i]) => [id, { ingress: i }])) as unknown as Tenants;

const LONG = 'a-secret-of-at-least-sixteen-bytes';

describe('readIngressSecrets', () => {
  it('reads each secret from its environment variable or file, a file without its trailing newline', () => {
    const secrets = readIngressSecrets(
      { tenants: tenants({ a: { secretEnv: 'A_SECRET' }, b: { secretFile: '/run/secrets/b' }, c: undefined }) },
      { env: { A_SECRET: LONG }, readFile: (path) => (path === '/run/secrets/b' ? Buffer.from(`${LONG}-b\n`) : Buffer.alloc(0)) },
    );
    expect(secrets.get('a')?.toString()).toBe(LONG);
    expect(secrets.get('b')?.toString()).toBe(`${LONG}-b`);
    expect(secrets.has('c')).toBe(false);
  });

  it('refuses to start with an unset variable, an unreadable file or a short secret, naming every field', () => {
    let error: unknown;
    try {
      readIngressSecrets(
        { tenants: tenants({ a: { secretEnv: 'UNSET' }, b: { secretFile: '/missing' }, c: { secretEnv: 'SHORT' } }) },
        {
          env: { SHORT: 'short' },
          readFile: () => {
            throw new Error('ENOENT');
          },
        },
      );
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).fields).toEqual(['tenants.a.ingress.secretEnv', 'tenants.b.ingress.secretFile', 'tenants.c.ingress.secretEnv']);
    expect((error as ConfigError).message).not.toContain('short');
  });
});
