import { inspect } from 'node:util';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { KeyDirectory } from '../../../src/api/auth.js';
import { sha256Hex } from '../../../src/util/sha256-hex.js';
import { PROBLEMS, problemBody, sendProblem, type ProblemCode } from '../../../src/api/problem.js';

describe('problemBody', () => {
  it('builds an RFC 9457 body with the contract extension members', () => {
    const errors = [{ path: '/workflow', message: 'is required' }];
    expect(problemBody('invalid_request', 'req-1', '/v1/runs', { detail: 'bad body', errors })).toEqual({
      type: 'urn:sluice:problem:invalid_request',
      title: 'The request is invalid',
      status: 400,
      detail: 'bad body',
      instance: '/v1/runs',
      code: 'invalid_request',
      requestId: 'req-1',
      retryable: false,
      errors,
    });
  });

  it('leaves out members that were not given', () => {
    const body = problemBody('not_found', 'req-2', undefined);
    expect(body).toEqual({ type: 'urn:sluice:problem:not_found', title: 'Not found', status: 404, code: 'not_found', requestId: 'req-2', retryable: false });
    expect(Object.keys(body)).not.toContain('retryAfterSec');
    expect(Object.keys(body)).not.toContain('instance');
    expect(Object.keys(body)).not.toContain('detail');
    expect(Object.keys(body)).not.toContain('errors');
  });

  it('leaves out an empty detail and an empty instance', () => {
    const body = problemBody('internal', 'r', '', { detail: '' });
    expect('detail' in body).toBe(false);
    expect('instance' in body).toBe(false);
  });

  it('keeps an empty errors list', () => {
    expect(problemBody('invalid_request', 'r', undefined, { errors: [] }).errors).toEqual([]);
  });

  it('rounds retryAfterSec up to whole seconds', () => {
    expect(problemBody('overloaded', 'r', undefined, { retryAfterSec: 1.2 }).retryAfterSec).toBe(2);
    expect(problemBody('overloaded', 'r', undefined, { retryAfterSec: 0.001 }).retryAfterSec).toBe(1);
    expect(problemBody('overloaded', 'r', undefined, { retryAfterSec: 3 }).retryAfterSec).toBe(3);
  });

  it('never gives a negative retryAfterSec, and keeps 0', () => {
    expect(problemBody('rate_limited', 'r', undefined, { retryAfterSec: -5 }).retryAfterSec).toBe(0);
    expect(problemBody('rate_limited', 'r', undefined, { retryAfterSec: -0.5 }).retryAfterSec).toBe(0);
    expect(problemBody('rate_limited', 'r', undefined, { retryAfterSec: 0 }).retryAfterSec).toBe(0);
    expect(Object.is(problemBody('rate_limited', 'r', undefined, { retryAfterSec: -0.5 }).retryAfterSec, -0)).toBe(false);
  });

  it('matches the contract table for every code', () => {
    const expected: Record<ProblemCode, [number, boolean]> = {
      invalid_request: [400, false],
      unknown_workflow: [400, false],
      invalid_idempotency_key: [400, false],
      unauthorized: [401, false],
      forbidden: [403, false],
      not_found: [404, false],
      method_not_allowed: [405, false],
      run_finished: [409, false],
      idempotency_key_reused: [409, false],
      idempotency_key_in_use: [409, true],
      request_timeout: [408, true],
      payload_too_large: [413, false],
      headers_too_large: [431, false],
      unsupported_media_type: [415, false],
      rate_limited: [429, true],
      token_budget_exhausted: [429, true],
      tenant_backlog_full: [429, true],
      overloaded: [503, true],
      dependency_unavailable: [503, true],
      deadline_unreachable: [503, true],
      not_ready: [503, true],
      internal: [500, true],
    };
    expect(Object.keys(PROBLEMS).sort()).toEqual(Object.keys(expected).sort());
    for (const [code, [status, retryable]] of Object.entries(expected) as [ProblemCode, [number, boolean]][]) {
      const body = problemBody(code, 'rid', undefined);
      expect(body.type).toBe(`urn:sluice:problem:${code}`);
      expect(body.code).toBe(code);
      expect(body.status, code).toBe(status);
      expect(body.retryable, code).toBe(retryable);
      expect(body.title.length).toBeGreaterThan(0);
    }
  });
});

describe('sendProblem', () => {
  async function send(code: ProblemCode, extras: Parameters<typeof sendProblem>[2]) {
    const app = Fastify({ genReqId: () => 'req-fixed' });
    app.get('/thing', async (_req, reply) => sendProblem(reply, code, extras));
    try {
      return await app.inject({ method: 'GET', url: '/thing?x=1' });
    } finally {
      await app.close();
    }
  }

  it('answers application/problem+json with the status, request id and instance', async () => {
    const res = await send('forbidden', { detail: 'no' });
    expect(res.statusCode).toBe(403);
    expect(res.headers['content-type']).toMatch(/^application\/problem\+json/);
    expect(res.headers['retry-after']).toBeUndefined();
    expect(res.json()).toEqual({
      type: 'urn:sluice:problem:forbidden',
      title: 'This key may not do that',
      status: 403,
      detail: 'no',
      instance: '/thing?x=1',
      code: 'forbidden',
      requestId: 'req-fixed',
      retryable: false,
    });
  });

  it('sets Retry-After to the same rounded seconds as retryAfterSec', async () => {
    const res = await send('overloaded', { retryAfterSec: 2.1 });
    expect(res.statusCode).toBe(503);
    expect(res.headers['retry-after']).toBe('3');
    expect(res.json()).toMatchObject({ retryAfterSec: 3, retryable: true, code: 'overloaded' });
  });

  it('sets Retry-After: 0 for a negative wait', async () => {
    const res = await send('rate_limited', { retryAfterSec: -4 });
    expect(res.statusCode).toBe(429);
    expect(res.headers['retry-after']).toBe('0');
    expect(res.json().retryAfterSec).toBe(0);
  });
});

describe('KeyDirectory', () => {
  const cfg = {
    tenants: {
      'tenant-a': { apiKeySha256: sha256Hex('key-a'), description: '', fallback: 'degrade' as const },
      'tenant-b': { apiKeySha256: sha256Hex('key-b'), description: '', fallback: 'fail' as const },
    },
    api: {
      host: '127.0.0.1',
      port: 0,
      bodyLimitBytes: 1024,
      deadlineMs: { defaultInteractive: 1000, defaultBatch: 1000, min: 100, max: 1000 },
      adminKeySha256: sha256Hex('admin-key'),
    },
  };
  const keys = new KeyDirectory(cfg);

  it('maps a tenant key to its tenant', () => {
    expect(keys.authenticate('Bearer key-a')).toEqual({ kind: 'tenant', tenantId: 'tenant-a' });
    expect(keys.authenticate('Bearer key-b')).toEqual({ kind: 'tenant', tenantId: 'tenant-b' });
  });

  it('maps the admin key to the admin principal', () => {
    expect(keys.authenticate('Bearer admin-key')).toEqual({ kind: 'admin' });
  });

  it('accepts the scheme in any case and extra whitespace around the key', () => {
    for (const h of ['bearer key-a', 'BEARER key-a', 'BeArEr key-a', 'Bearer   key-a', 'Bearer\tkey-a', 'Bearer key-a  ']) {
      expect(keys.authenticate(h), JSON.stringify(h)).toEqual({ kind: 'tenant', tenantId: 'tenant-a' });
    }
  });

  it('is case-sensitive about the key itself', () => {
    expect(keys.authenticate('Bearer KEY-A')).toBeUndefined();
  });

  it('refuses a missing, empty or malformed header', () => {
    for (const h of [undefined, '', 'Bearer', 'Bearer ', 'key-a', 'Basic key-a', 'Token key-a', 'Bearerkey-a', ' Bearer key-a', 'Bearer key-a extra', 'Bearer key a']) {
      expect(keys.authenticate(h), JSON.stringify(h)).toBeUndefined();
    }
  });

  it('refuses an unknown key', () => {
    expect(keys.authenticate('Bearer key-z')).toBeUndefined();
  });

  it('refuses keys longer than 512 characters, even a configured one', () => {
    const long = 'k'.repeat(513);
    const dir = new KeyDirectory({ ...cfg, tenants: { long: { apiKeySha256: sha256Hex(long) } } });
    expect(dir.authenticate(`Bearer ${long}`)).toBeUndefined();
    const max = 'k'.repeat(512);
    const dir2 = new KeyDirectory({ ...cfg, tenants: { max: { apiKeySha256: sha256Hex(max) } } });
    expect(dir2.authenticate(`Bearer ${max}`)).toEqual({ kind: 'tenant', tenantId: 'max' });
  });

  it('stores keys only as SHA-256: the digest itself is not a key', () => {
    expect(keys.authenticate(`Bearer ${sha256Hex('key-a')}`)).toBeUndefined();
    expect(keys.authenticate(`Bearer ${sha256Hex('admin-key')}`)).toBeUndefined();
    // Nothing in the directory can reveal a plaintext key: it only ever saw digests.
    const dump = inspect(keys, { depth: 10, showHidden: true });
    expect(dump).toContain(sha256Hex('key-a'));
    expect(dump).not.toMatch(/key-a['"]/);
  });
});
