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
  });

  it('registers with the Confluent request shape and reads the schema back by id', async () => {
    const registry = new HttpSchemaRegistry(`${fake.url}/`);
    const id = await registry.register('dev.sluice.events.X', '"string"');
    expect(id).toBe(fake.schemas.indexOf('"string"') + 1);
    expect(fake.requests[0]).toMatchObject({
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
    expect(fake.requests.map((r) => r.method)).toEqual(['POST', 'GET']);
  });

  it('sends URL credentials as basic auth', async () => {
    const url = new URL(fake.url);
    url.username = 'key';
    url.password = 's3cr%2Ft';
    await new HttpSchemaRegistry(url.toString()).register('s', '"int"');
    expect(fake.requests[0]?.authorization).toBe(`Basic ${Buffer.from('key:s3cr/t').toString('base64')}`);
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
