import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../../src/obs/logger.js';
import { auditCapture } from '../../support/audit-capture.js';

/** A logger writing into an array of parsed lines. */
function capture(): { lines: Record<string, any>[]; logger: ReturnType<typeof createLogger> } {
  const lines: Record<string, any>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line) as Record<string, any>);
      done();
    },
  });
  return { lines, logger: createLogger('info', 'sluice', sink) };
}

describe('createLogger redaction', () => {
  it('replaces credentials at the top of a line, one level down and in headers', () => {
    const { lines, logger } = capture();
    logger.info({ apiKey: 'sk-ant-top', password: 'pw-top', authorization: 'Bearer tenant-key', 'x-api-key': 'sk-ant-header-top' }, 'top');
    logger.info({ config: { apiKey: 'sk-ant-nested' }, db: { password: 'pw-nested' } }, 'nested');
    logger.info({ req: { method: 'POST', headers: { authorization: 'Bearer tenant-key', 'x-api-key': 'sk-ant-req', accept: 'application/json' } } }, 'request');
    logger.info({ headers: { authorization: 'Basic dTpw' } }, 'headers');
    expect(lines[0]).toMatchObject({ apiKey: '***', password: '***', authorization: '***', 'x-api-key': '***' });
    expect(lines[1]).toMatchObject({ config: { apiKey: '***' }, db: { password: '***' } });
    expect(lines[2]!.req).toEqual({ method: 'POST', headers: { authorization: '***', 'x-api-key': '***', accept: 'application/json' } });
    expect(lines[3]!.headers).toEqual({ authorization: '***' });
    expect(JSON.stringify(lines)).not.toMatch(/sk-ant|pw-|tenant-key|dTpw/);
  });

  it('masks the password of URLs, also on serialized errors, and leaves paths and plain URLs as they are', () => {
    const { lines, logger } = capture();
    const err = Object.assign(new Error('connect ECONNREFUSED'), { url: 'redis://:s3cret@cache:6379' });
    logger.warn({ err, redisUrl: 'redis://:s3cret@cache:6379', databaseUrl: 'postgresql://app:pgsecret@db/sluice?sslmode=require', baseUrl: 'https://proxy.example/v1?token=t0ken' }, 'down');
    logger.info({ url: '/v1/runs?limit=5', connectionString: 'postgresql://postgres@127.0.0.1:5432/sluice' }, 'plain');
    expect(lines[0]).toMatchObject({
      redisUrl: 'redis://:***@cache:6379',
      databaseUrl: 'postgresql://app:***@db/sluice?sslmode=require',
      baseUrl: 'https://proxy.example/v1?token=***',
      err: { message: 'connect ECONNREFUSED', url: 'redis://:***@cache:6379' },
    });
    expect(lines[1]).toMatchObject({ url: '/v1/runs?limit=5', connectionString: 'postgresql://postgres@127.0.0.1:5432/sluice' });
    expect(JSON.stringify(lines)).not.toMatch(/s3cret|pgsecret|t0ken/);
  });

  it('applies to child loggers and adds no field that was not logged', () => {
    const { lines, logger } = capture();
    logger.child({ component: 'infra' }).info({ kafka: ['k:9092'], apiKey: 'sk-ant-child' }, 'child');
    expect(lines[0]).toMatchObject({ component: 'infra', kafka: ['k:9092'], apiKey: '***', msg: 'child' });
    for (const field of ['password', 'authorization', 'url', 'headers']) expect(lines[0]).not.toHaveProperty(field);
  });
});

describe('createAuditLogger', () => {
  it('writes every line at info whatever SLUICE_LOG_LEVEL says, marked as the audit stream, with the same redaction', () => {
    const before = process.env.SLUICE_LOG_LEVEL;
    process.env.SLUICE_LOG_LEVEL = 'silent';
    try {
      const { lines, logger } = auditCapture();
      logger.info({ audit: { action: 'limit.change' }, authorization: 'Bearer local-admin-key' }, 'api limit.change done');
      expect(lines).toEqual([expect.objectContaining({ level: 30, stream: 'audit', audit: { action: 'limit.change' }, authorization: '***', msg: 'api limit.change done' })]);
    } finally {
      if (before === undefined) delete process.env.SLUICE_LOG_LEVEL;
      else process.env.SLUICE_LOG_LEVEL = before;
    }
  });
});
