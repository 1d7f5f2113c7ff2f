import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { EventCodec, EventDecodeError } from '../../../src/events/codec.js';
import { HttpSchemaRegistry } from '../../../src/events/http-schema-registry.js';
import { SchemaNotFoundError, SchemaRegistryError } from '../../../src/events/schema-registry.js';
import { SUBJECTS } from '../../../src/events/schemas.js';
import { runRequested } from './fixtures.js';

const CONTENT_TYPE = 'application/vnd.schemaregistry.v1+json';

interface Recorded {
  method: string;
  url: string;
  contentType: string | undefined;
  authorization: string | undefined;
  body: string;
}

/** Just enough of the Confluent Schema Registry API, plus switches for failures. */
class FakeRegistry {
  readonly requests: Recorded[] = [];
  readonly schemas: string[] = [];
  /** Compatibility level per subject; a subject without one falls back to `globalLevel`. */
  readonly levels = new Map<string, string>();
  /** Undefined: the registry ignores `defaultToGlobal`, as older ones do. */
  globalLevel: string | undefined = 'NONE';
  /** Answer a level change with 403, as for an API key without write access to config. */
  denyConfigWrites = false;
  failWith: { status: number; body: string } | undefined;
  hangMs = 0;
  private readonly server: Server = createServer((req, res) => void this.handle(req, res));
  url = '';

  async start(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body = '';
    for await (const chunk of req) body += String(chunk);
    this.requests.push({
      method: req.method ?? '',
      url: req.url ?? '',
      contentType: req.headers['content-type'],
      authorization: req.headers.authorization,
      body,
    });
    if (this.hangMs) await new Promise((resolve) => setTimeout(resolve, this.hangMs));
    const reply = (status: number, payload: unknown): void => {
      res.writeHead(status, { 'content-type': CONTENT_TYPE });
      res.end(typeof payload === 'string' ? payload : JSON.stringify(payload));
    };
    if (this.failWith) return reply(this.failWith.status, this.failWith.body);
    const register = /^\/subjects\/([^/]+)\/versions$/.exec(req.url ?? '');
    if (req.method === 'POST' && register) {
      const { schema } = JSON.parse(body) as { schema: string };
      let index = this.schemas.indexOf(schema);
      if (index < 0) index = this.schemas.push(schema) - 1;
      return reply(200, { id: index + 1 });
    }
    const config = /^\/config\/([^/?]+)(\?defaultToGlobal=true)?$/.exec(req.url ?? '');
    if (config) {
      const subject = decodeURIComponent(config[1] as string);
      if (req.method === 'PUT') {
        if (this.denyConfigWrites) return reply(403, { error_code: 40301, message: 'User is denied operation Write' });
        const { compatibility } = JSON.parse(body) as { compatibility: string };
        this.levels.set(subject, compatibility);
        return reply(200, { compatibility });
      }
      const level = this.levels.get(subject) ?? (config[2] ? this.globalLevel : undefined);
      if (level === undefined) return reply(404, { error_code: 40408, message: 'Subject has no compatibility level' });
      return reply(200, { compatibilityLevel: level });
    }
    const byId = /^\/schemas\/ids\/(\d+)$/.exec(req.url ?? '');
    if (req.method === 'GET' && byId) {
      const schema = this.schemas[Number(byId[1]) - 1];
      if (schema === undefined) return reply(404, { error_code: 40403, message: 'Schema not found' });
      return reply(200, { schema });
    }
    reply(404, { error_code: 404, message: 'HTTP 404 Not Found' });
  }
}

describe('HttpSchemaRegistry', () => {
  const fake = new FakeRegistry();
  beforeAll(() => fake.start());
  afterAll(() => fake.stop());
  beforeEach(() => {
    fake.failWith = undefined;
    fake.hangMs = 0;
    fake.requests.length = 0;
    fake.levels.clear();
    fake.globalLevel = 'NONE';
    fake.denyConfigWrites = false;
  });

  it('registers with the Confluent request shape and reads the schema back by id', async () => {
    const registry = new HttpSchemaRegistry(`${fake.url}/`);
    const id = await registry.register('dev.sluice.events.X', '"string"');
    expect(id).toBe(fake.schemas.indexOf('"string"') + 1);
    expect(fake.requests.at(-1)).toMatchObject({
      method: 'POST',
      url: '/subjects/dev.sluice.events.X/versions',
      contentType: CONTENT_TYPE,
      body: JSON.stringify({ schema: '"string"' }),
    });
    expect(await new HttpSchemaRegistry(fake.url).schemaById(id)).toBe('"string"');
  });

  it('caches registrations and schemas', async () => {
    const registry = new HttpSchemaRegistry(fake.url);
    const id = await registry.register('s', '"long"');
    await registry.register('s', '"long"');
    await Promise.all([registry.schemaById(id), registry.schemaById(id)]);
    await registry.schemaById(id);
    expect(fake.requests.map((r) => r.method)).toEqual(['GET', 'PUT', 'POST', 'GET']);
  });

  it('sends URL credentials as basic auth', async () => {
    const url = new URL(fake.url);
    url.username = 'key';
    url.password = 's3cr%2Ft';
    await new HttpSchemaRegistry(url.toString()).register('s', '"int"');
    expect(fake.requests[0]?.authorization).toBe(`Basic ${Buffer.from('key:s3cr/t').toString('base64')}`);
  });

  it('sets BACKWARD on the subject before registering when its level does not imply it', async () => {
    await new HttpSchemaRegistry(fake.url).register('dev.sluice.events.RunRequested', '"string"');
    expect(fake.requests.map((r) => `${r.method} ${r.url}`)).toEqual([
      'GET /config/dev.sluice.events.RunRequested?defaultToGlobal=true',
      'PUT /config/dev.sluice.events.RunRequested',
      'POST /subjects/dev.sluice.events.RunRequested/versions',
    ]);
    expect(fake.requests[1]).toMatchObject({ contentType: CONTENT_TYPE, body: '{"compatibility":"BACKWARD"}' });
    expect(fake.levels.get('dev.sluice.events.RunRequested')).toBe('BACKWARD');
  });

  it.each(['BACKWARD', 'BACKWARD_TRANSITIVE', 'FULL', 'FULL_TRANSITIVE'])(
    'leaves a %s level alone, whether global or set on the subject',
    async (level) => {
      fake.globalLevel = level;
      await new HttpSchemaRegistry(fake.url).register('a', '"string"');
      fake.globalLevel = 'NONE';
      fake.levels.set('b', level);
      await new HttpSchemaRegistry(fake.url).register('b', '"string"');
      expect(fake.requests.map((r) => r.method)).toEqual(['GET', 'POST', 'GET', 'POST']);
    },
  );

  it.each(['NONE', 'FORWARD', 'FORWARD_TRANSITIVE'])('replaces a %s level with BACKWARD', async (level) => {
    fake.levels.set('s', level);
    await new HttpSchemaRegistry(fake.url).register('s', '"string"');
    expect(fake.levels.get('s')).toBe('BACKWARD');
  });

  it('sets BACKWARD when the registry ignores defaultToGlobal and the subject has no level', async () => {
    fake.globalLevel = undefined;
    await new HttpSchemaRegistry(fake.url).register('s', '"string"');
    expect(fake.levels.get('s')).toBe('BACKWARD');
  });

  it('does not register when the level cannot be set, and tries again on the next call', async () => {
    const registry = new HttpSchemaRegistry(fake.url);
    fake.denyConfigWrites = true;
    const err = await registry.register('s', '"string"').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SchemaRegistryError);
    expect((err as Error).message).toMatch(/403.*denied/);
    expect(fake.requests.map((r) => r.method)).toEqual(['GET', 'PUT']);
    fake.denyConfigWrites = false;
    expect(await registry.register('s', '"string"')).toBeGreaterThan(0);
  });

  it("maps Confluent's schema-not-found to SchemaNotFoundError", async () => {
    await expect(new HttpSchemaRegistry(fake.url).schemaById(999)).rejects.toBeInstanceOf(SchemaNotFoundError);
  });

  it('reports an error status with the status and a body excerpt, and retries after it', async () => {
    const registry = new HttpSchemaRegistry(fake.url);
    fake.failWith = { status: 409, body: '{"error_code":409,"message":"Schema being registered is incompatible"}' };
    const err = await registry.register('s', '"bytes"').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SchemaRegistryError);
    expect((err as SchemaRegistryError).status).toBe(409);
    expect((err as SchemaRegistryError).retryable).toBe(false);
    expect((err as Error).message).toMatch(/409.*incompatible/);

    fake.failWith = { status: 503, body: 'upstream unavailable' };
    const unavailable = await registry.schemaById(1).catch((e: unknown) => e);
    expect(unavailable).toBeInstanceOf(SchemaRegistryError);
    expect(unavailable).not.toBeInstanceOf(SchemaNotFoundError);
    expect((unavailable as SchemaRegistryError).retryable).toBe(true);

    fake.failWith = undefined;
    expect(await registry.register('s', '"bytes"')).toBeGreaterThan(0);
  });

  it('does not treat a 404 from a wrong base path as a missing schema', async () => {
    const err = await new HttpSchemaRegistry(`${fake.url}/wrong`).schemaById(1).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SchemaRegistryError);
    expect(err).not.toBeInstanceOf(SchemaNotFoundError);
  });

  it('times out', async () => {
    fake.hangMs = 1000;
    const started = Date.now();
    const err = await new HttpSchemaRegistry(fake.url, { timeoutMs: 100 }).schemaById(1).catch((e: unknown) => e);
    expect(Date.now() - started).toBeLessThan(900);
    expect(err).toBeInstanceOf(SchemaRegistryError);
    expect((err as Error).message).toMatch(/timed out after 100 ms/);
    expect((err as SchemaRegistryError).retryable).toBe(true);
  });

  it('reports an unreachable registry as retryable', async () => {
    const closed = new FakeRegistry();
    await closed.start();
    await closed.stop();
    const err = await new HttpSchemaRegistry(closed.url).schemaById(1).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SchemaRegistryError);
    expect((err as Error).message).toMatch(/ECONNREFUSED/);
    expect((err as SchemaRegistryError).retryable).toBe(true);
  });

  it('backs the codec end to end', async () => {
    const codec = new EventCodec(new HttpSchemaRegistry(fake.url));
    const buf = await codec.encode(SUBJECTS.runRequested, runRequested);
    expect(await new EventCodec(new HttpSchemaRegistry(fake.url)).decode(buf, SUBJECTS.runRequested)).toEqual(
      runRequested,
    );
    buf.writeInt32BE(4242, 1);
    const err = await codec.decode(buf, SUBJECTS.runRequested).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EventDecodeError);
    expect((err as EventDecodeError).reason).toBe('unknown_schema');
  });
});
