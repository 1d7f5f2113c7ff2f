import fc from 'fast-check';
import { ADMIN_KEY, TENANT_A_KEY, TENANT_B_KEY, TENANT_C_KEY } from '../harness.js';

/**
 * Generated HTTP requests for the API fuzz: methods, paths (traversal, odd and invalid
 * encodings, raw Latin-1 bytes), headers (missing, huge, duplicate and malformed Authorization,
 * media types, encodings, Idempotency-Key, Last-Event-ID) and bodies (valid submissions with
 * random input, random and truncated JSON, wrong types, deep nesting, huge numbers, invalid
 * UTF-8, lone surrogates). Everything is drawn from fast-check arbitraries, so one seed gives
 * the same requests again.
 */
export interface FuzzRequest {
  method: string;
  /** `{run}` stands for a run this fuzz got admitted, when it has one (else a random id). */
  path: string;
  headers: Record<string, string | string[]>;
  body?: Buffer;
}

export const TENANT_KEYS: Record<string, string> = { 'tenant-a': TENANT_A_KEY, 'tenant-b': TENANT_B_KEY, 'tenant-c': TENANT_C_KEY };
export const RUN_PLACEHOLDER = '{run}';
/** Node's default limit on a request's header section; past it Node answers 431 itself. */
export const MAX_HEADER_BYTES = 16 * 1024;

/** Characters Node lets a client put in a header value: tab, printable ASCII and Latin-1. */
const headerChar = fc.integer({ min: 0x1f, max: 0xff }).filter((c) => c !== 0x7f).map((c) => (c === 0x1f ? '\t' : String.fromCharCode(c)));
export const headerText = (maxLength: number) => fc.string({ unit: headerChar, maxLength });
/** Characters Node lets a client put in a path: no controls, no space, Latin-1 sent as raw bytes. */
export const pathChar = fc.integer({ min: 0x21, max: 0xff }).filter((c) => c !== 0x7f && c !== 0x23 && c !== 0x3f).map((c) => String.fromCharCode(c));
export const percentEncoded = fc.uint8Array({ maxLength: 24 }).map((bytes) => [...bytes].map((b) => `%${b.toString(16).padStart(2, '0')}`).join(''));

const runSegment = fc.oneof(
  { weight: 4, arbitrary: fc.constant(RUN_PLACEHOLDER) },
  { weight: 3, arbitrary: fc.uuid() },
  { weight: 1, arbitrary: fc.string({ unit: pathChar, maxLength: 40 }) },
  { weight: 1, arbitrary: percentEncoded },
  { weight: 1, arbitrary: fc.constantFrom('..', '.', '%2e%2e', '..%2f..%2f', '%c0%ae%c0%ae', '%00', '%zz', '%', 'a'.repeat(5_000), '%E2%80%AE', '\u00ff\u00fe') },
);

const path = fc.oneof(
  { weight: 6, arbitrary: fc.constant('/v1/runs') },
  { weight: 6, arbitrary: runSegment.map((id) => `/v1/runs/${id}`) },
  { weight: 4, arbitrary: runSegment.map((id) => `/v1/runs/${id}/events`) },
  { weight: 2, arbitrary: fc.constantFrom('/v1/admin/limits', '/healthz', '/readyz', '/metrics', '/', '/v1', '/v1/runs/', '/V1/RUNS', '//v1//runs', '/v1/./runs', '/v1/runs/../admin/limits', '/v1/runs/%2e%2e/admin/limits', '/../../../etc/passwd', '/v1/runs;x=1', '/\\v1\\runs', '/v1/runs%00', '/v1/runs/%2F') },
  { weight: 2, arbitrary: fc.tuple(fc.constantFrom('/v1/runs', `/v1/runs/${RUN_PLACEHOLDER}/events`, `/v1/runs/${RUN_PLACEHOLDER}`), fc.string({ unit: pathChar, maxLength: 60 })).map(([p, q]) => `${p}?${q}`) },
  { weight: 1, arbitrary: fc.constantFrom('/v1/runs?lastEventId=-1', '/v1/runs/{run}/events?lastEventId=99999999999999999999', '/v1/runs/{run}/events?lastEventId=1e3&lastEventId=2') },
  { weight: 1, arbitrary: fc.string({ unit: pathChar, maxLength: 120 }).map((p) => `/${p}`) },
);

const validKey = fc.constantFrom(TENANT_A_KEY, TENANT_B_KEY, TENANT_C_KEY);
const authorization = fc.oneof(
  { weight: 12, arbitrary: validKey.map((k) => `Bearer ${k}`) },
  { weight: 1, arbitrary: fc.constant(`Bearer ${ADMIN_KEY}`) },
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 2, arbitrary: headerText(80).map((t) => `Bearer ${t}`) },
  { weight: 1, arbitrary: headerText(80) },
  { weight: 1, arbitrary: validKey.chain((k) => fc.constantFrom(`bearer ${k}`, `BEARER   ${k}  `, `Bearer\t${k}`, `Basic ${Buffer.from(`${k}:`).toString('base64')}`, `Bearer ${k} extra`, `Bearer ${k}${k}`, k)) },
  { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 20_000 }).map((n) => `Bearer ${'k'.repeat(n)}`) },
  { weight: 1, arbitrary: fc.tuple(validKey, headerText(40)).map(([k, t]) => [`Bearer ${k}`, `Bearer ${t}`]) },
  { weight: 1, arbitrary: fc.tuple(headerText(40), validKey).map(([t, k]) => [`Bearer ${t}`, `Bearer ${k}`]) },
);

export const contentType = fc.oneof(
  { weight: 8, arbitrary: fc.constant('application/json') },
  { weight: 4, arbitrary: fc.constant(undefined) },
  {
    weight: 3,
    arbitrary: fc.constantFrom('application/json; charset=utf-8', 'application/json; charset=utf-16', 'application/json; charset=latin1', 'APPLICATION/JSON', 'application/json;;;', 'application/problem+json', 'text/plain', 'text/html', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/octet-stream', '*/*', '', 'application/json, text/plain'),
  },
  { weight: 1, arbitrary: headerText(60) },
);

const optionalHeader = (arb: fc.Arbitrary<string | string[]>, freq: number) => fc.option(arb, { nil: undefined, freq });

const headers = fc.record({
  authorization,
  'content-type': contentType,
  'content-encoding': optionalHeader(fc.oneof(fc.constantFrom('gzip', 'deflate', 'br', 'identity', 'zstd', 'gzip, gzip', 'x-evil'), headerText(20)), 6),
  'idempotency-key': optionalHeader(fc.oneof(fc.string({ unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)), minLength: 1, maxLength: 40 }), fc.constantFrom('', ' ', 'a'.repeat(256), 'key with spaces'), headerText(40)), 3),
  'last-event-id': optionalHeader(fc.oneof(fc.nat().map(String), fc.constantFrom('-1', '1e99', '0x10', '99999999999999999999', '', ' 7 ', 'abc'), headerText(30)), 5),
  'x-request-id': optionalHeader(fc.oneof(fc.string({ maxLength: 40 }).filter((s) => /^[\x20-\x7e]*$/.test(s)), headerText(200)), 6),
  traceparent: optionalHeader(fc.oneof(fc.constant('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'), headerText(80)), 6),
  accept: optionalHeader(fc.constantFrom('text/event-stream', 'application/json', '*/*', 'application/xml'), 6),
});

const json = (value: unknown) => JSON.stringify(value);
const nested = (depth: number, open: string, close: string) => `${open.repeat(depth)}1${close.repeat(depth)}`;
const someInput = fc.oneof(fc.jsonValue({ maxDepth: 4 }), fc.string({ unit: 'binary', maxLength: 200 }), fc.record({ message: fc.string({ unit: 'binary', maxLength: 100 }), orderId: fc.string({ unit: 'binary', maxLength: 20 }) }));

const submission = fc
  .record(
    {
      workflow: fc.oneof({ weight: 8, arbitrary: fc.constantFrom('support-reply', 'report-digest') }, { weight: 1, arbitrary: fc.string({ maxLength: 70 }) }),
      input: someInput,
      class: fc.constantFrom('interactive', 'batch', 'urgent', 7),
      deadlineMs: fc.oneof(fc.integer({ min: 1_000, max: 120_000 }), fc.integer(), fc.double(), fc.constantFrom('5000', null, 1e308, 0, -1)),
    },
    { requiredKeys: ['workflow', 'input'] },
  )
  .map(json);

const invalidUtf8 = fc.uint8Array({ minLength: 1, maxLength: 64 }).map((bad) => Buffer.concat([Buffer.from('{"workflow":"support-reply","input":{"message":"'), Buffer.from(bad), Buffer.from('"}}')]));

const body = fc.oneof(
  { weight: 40, arbitrary: submission },
  { weight: 8, arbitrary: fc.jsonValue().map(json) },
  { weight: 8, arbitrary: fc.tuple(submission, fc.nat()).map(([s, cut]) => s.slice(0, cut % Math.max(1, s.length))) },
  { weight: 4, arbitrary: fc.record({ workflow: fc.jsonValue({ maxDepth: 1 }), input: fc.jsonValue({ maxDepth: 1 }), extra: fc.jsonValue({ maxDepth: 1 }) }).map(json) },
  { weight: 4, arbitrary: fc.tuple(fc.integer({ min: 100, max: 6_000 }), fc.boolean()).map(([depth, arrays]) => `{"workflow":"support-reply","input":${arrays ? nested(depth, '[', ']') : nested(depth, '{"a":', '}')}}`) },
  { weight: 4, arbitrary: fc.constantFrom('1e999', '-0', '123456789012345678901234567890', '{"workflow":"support-reply","input":{"n":1e999,"m":-1e-999}}', '{"workflow":"support-reply","input":{},"deadlineMs":1e999}') },
  { weight: 4, arbitrary: fc.uint8Array({ maxLength: 2_000 }).map((b) => Buffer.from(b)) },
  { weight: 4, arbitrary: invalidUtf8 },
  { weight: 4, arbitrary: fc.constantFrom('', ' ', 'null', '[]', '"x"', '{}', '{"__proto__":{"x":1},"workflow":"support-reply","input":{}}') },
  { weight: 1, arbitrary: fc.integer({ min: 200_000, max: 300_000 }).map((n) => json({ workflow: 'support-reply', input: { blob: 'x'.repeat(n) } })) },
);

const method = fc.oneof({ weight: 8, arbitrary: fc.constantFrom('GET', 'POST', 'DELETE') }, { weight: 1, arbitrary: fc.constantFrom('PUT', 'PATCH', 'HEAD', 'OPTIONS') });

const anyRequest = fc
  .record({ method, path, headers, body: fc.option(body, { nil: undefined, freq: 8 }) })
  .map(({ method, path, headers, body }) => {
    const present = Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== undefined)) as Record<string, string | string[]>;
    // GET and HEAD carry no body as a rule; the other methods do unless the draw says none.
    const sendBody = method === 'GET' || method === 'HEAD' ? undefined : body;
    return { method, path, headers: present, body: sendBody === undefined ? undefined : Buffer.isBuffer(sendBody) ? sendBody : Buffer.from(sendBody) };
  });

/**
 * Well-formed submissions by a tenant with hostile bodies: enough of them get admitted for the
 * capacity checks to mean something. Idempotency-Keys come from a small set, so replays and
 * reuse with another body happen too.
 */
const submitRequest = fc
  .record({
    key: validKey,
    body: fc.oneof({ weight: 6, arbitrary: submission }, { weight: 1, arbitrary: body }),
    idempotencyKey: fc.option(fc.constantFrom(...Array.from({ length: 20 }, (_, i) => `fuzz-key-${i}`)), { nil: undefined, freq: 3 }),
  })
  .map(({ key, body, idempotencyKey }) => ({
    method: 'POST',
    path: '/v1/runs',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}) },
    body: Buffer.isBuffer(body) ? body : Buffer.from(body),
  }));

export const fuzzRequest: fc.Arbitrary<FuzzRequest> = fc.oneof({ weight: 3, arbitrary: anyRequest }, { weight: 1, arbitrary: submitRequest });
