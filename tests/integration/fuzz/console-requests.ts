import fc from 'fast-check';
import { ADMIN_KEY, TENANT_A_KEY } from '../harness.js';
import { RUN_PLACEHOLDER, contentType, headerText, pathChar, percentEncoded, type FuzzRequest } from './api-requests.js';

/**
 * Generated requests for the operator side: the console's routes (its session cookie, CSRF token
 * and Origin each right, wrong or missing) and the admin API's (the admin key, mostly). Times, ids
 * and filters come in the shapes that reached Postgres before the boundary checked them (leap
 * seconds, days a month lacks, ids past bigint, NUL), with valid ones in between. Placeholders
 * stand for what exists only at run time: the fuzz's current session, its CSRF token, this API's
 * origin, and a run the tenant fuzz got admitted.
 */
export const SESSION_PLACEHOLDER = '{session}';
export const CSRF_PLACEHOLDER = '{csrf}';
export const ORIGIN_PLACEHOLDER = '{origin}';

const weighted = <T>(...arbs: [number, fc.Arbitrary<T>][]) => fc.oneof(...arbs.map(([weight, arbitrary]) => ({ weight, arbitrary })));
/** Percent-encoded as a browser would; a lone surrogate, which encodeURIComponent refuses, as the bytes Node would send for it. */
const encoded = (text: string) => {
  try {
    return encodeURIComponent(text);
  } catch {
    return [...Buffer.from(text)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('');
  }
};

const instantText = weighted<string>(
  [4, fc.date({ min: new Date('0000-01-01T00:00:00Z'), max: new Date('9999-12-31T23:59:59.999Z'), noInvalidDate: true }).map((d) => d.toISOString())],
  [3, fc.constantFrom('2016-12-31T23:59:60Z', '2021-02-29T00:00:00Z', '2020-04-31T12:00:00Z', '2020-01-01T24:00:00Z', '2020-01-01T00:00:00+24:00', '0000-01-01T00:00:00Z', '9999-12-31T23:59:59-23:59', '+275760-09-13T00:00:00.000Z', '2020-01-01T00:00:00.1234567890Z', '2020-01-01 00:00:00Z', 'yesterday', '', '1e309')],
  [1, fc.string({ unit: pathChar, maxLength: 40 })],
);
const bigintish = weighted<string>(
  [3, fc.bigInt({ min: 0n, max: 2n ** 64n }).map(String)],
  [2, fc.constantFrom('9999999999999999999', '9223372036854775807', '9223372036854775808', '18446744073709551616', '0', '-1', '01', '1e3', '1.5', '%201', '%00', '1%00')],
  [1, fc.string({ unit: pathChar, maxLength: 30 })],
);
const runId = weighted<string>([4, fc.constant(RUN_PLACEHOLDER)], [2, fc.uuid()], [1, fc.uuid().map((u) => u.toUpperCase())], [1, fc.string({ unit: pathChar, maxLength: 40 })], [1, percentEncoded]);
const filterText = weighted<string>([3, fc.constantFrom('tenant-a', 'tenant-b', 'support-reply', 'report-digest', 'decode_error', 'unauthenticated', 'exhausted')], [2, fc.string({ unit: 'binary', maxLength: 30 })], [1, fc.constantFrom('a\u0000b', '\u0000', 'x'.repeat(201), '\ud800')]);

/** A query string: known keys with hostile values, unknown keys, repeated keys, and raw bytes. */
const query = (fields: Record<string, fc.Arbitrary<string>>) =>
  weighted<string>(
    [6, fc.array(fc.oneof(...Object.entries(fields).map(([k, v]) => v.map((x) => `${k}=${encoded(x)}`))), { maxLength: 4 }).map((parts) => parts.join('&'))],
    [1, fc.tuple(fc.constantFrom(...Object.keys(fields)), fc.string({ unit: pathChar, maxLength: 40 })).map(([k, raw]) => `${k}=${raw}`)],
    [1, fc.constantFrom('x=1', 'limit=100000', '__proto__=1', 'since=2020-01-01T00:00:00Z&since=2021-01-01T00:00:00Z', '')],
  ).map((q) => (q === '' ? '' : `?${q}`));

const runsQuery = query({ runId, tenant: filterText, workflow: filterText, status: fc.constantFrom('queued', 'running', 'completed', 'failed', 'dead_lettered', 'bogus'), since: instantText, until: instantText });
const dlqQuery = query({ status: fc.constantFrom('pending', 'replayed', 'discarded', 'bogus'), tenant: filterText, workflow: filterText, reason: filterText });

const dependency = weighted<string>([4, fc.constantFrom('anthropic', 'order-lookup')], [1, fc.constantFrom('nobody', 'constructor', '__proto__', '%2e%2e', 'a'.repeat(300))], [1, fc.string({ unit: pathChar, maxLength: 30 })]);
const json = (value: unknown) => JSON.stringify(value);
const anyJson = fc.jsonValue({ maxDepth: 3 }).map(json);

const limitBody = weighted<string>(
  [4, fc.record({ scope: fc.constantFrom('global', 'tenant', 'workflow', 'dependency', 'class'), name: fc.option(fc.constantFrom('tenant-a', 'support-reply', 'anthropic', 'nobody', 'constructor', ''), { nil: undefined }), limit: fc.oneof(fc.integer({ min: 0, max: 64 }), fc.integer(), fc.double(), fc.constantFrom(1_000_001, -1, '3', null)) }, { requiredKeys: [] }).map(json)],
  [1, anyJson],
);
const forceBody = weighted<string>([4, fc.record({ mode: fc.constantFrom('open', 'closed', 'half_open'), durationSec: fc.oneof(fc.integer({ min: 1, max: 3 }), fc.integer({ min: -5, max: 5_000 }), fc.constantFrom(1.5, '60', null)) }, { requiredKeys: [] }).map(json)], [1, anyJson]);
const ids = fc.array(bigintish, { maxLength: 120 });
const replayBody = weighted<string>([4, fc.record({ ids, dryRun: fc.oneof({ weight: 9, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constantFrom(false, 'yes', null) }) }, { requiredKeys: [] }).map(json)], [1, anyJson]);
const discardBody = weighted<string>([4, fc.record({ ids, reason: fc.oneof(fc.string({ maxLength: 40 }), fc.constantFrom('', 'x'.repeat(501), 'dup\u0000licate')) }, { requiredKeys: [] }).map(json)], [1, anyJson]);
const loginBody = weighted<string>([3, fc.constantFrom(json({ key: ADMIN_KEY }), json({ key: 'local-key-a' }), json({ key: '' }), json({ key: 'x'.repeat(600) }))], [3, fc.string({ maxLength: 40 }).map((key) => json({ key }))], [1, anyJson]);

interface Route {
  method: string;
  path: fc.Arbitrary<string>;
  body?: fc.Arbitrary<string>;
}

const consoleRoutes = weighted<Route>(
  [1, fc.constantFrom<Route>({ method: 'GET', path: fc.constantFrom('/console', '/console/', '/console/nope', '/console/api/nope') })],
  [1, fc.constant<Route>({ method: 'GET', path: weighted<string>([1, fc.string({ unit: pathChar, maxLength: 40 })], [1, fc.constantFrom('..%2Findex.html', '%00', 'app.js')]).map((n) => `/console/assets/${n}`) })],
  [3, fc.constant<Route>({ method: 'POST', path: fc.constant('/console/session'), body: loginBody })],
  [1, fc.constant<Route>({ method: 'DELETE', path: fc.constant('/console/session') })],
  [4, fc.constantFrom<Route>(...['/console/api/session', '/console/api/overview', '/console/api/backpressure', '/console/api/limits', '/console/api/dependencies'].map((p) => ({ method: 'GET', path: fc.constant(p) })))],
  [3, fc.constant<Route>({ method: 'PUT', path: fc.constant('/console/api/limits'), body: limitBody })],
  [2, fc.constant<Route>({ method: 'PUT', path: dependency.map((d) => `/console/api/breakers/${d}/force`), body: forceBody })],
  [1, fc.constant<Route>({ method: 'DELETE', path: dependency.map((d) => `/console/api/breakers/${d}/force`) })],
  [8, fc.constant<Route>({ method: 'GET', path: runsQuery.map((q) => `/console/api/runs${q}`) })],
  [4, fc.constant<Route>({ method: 'GET', path: runId.map((id) => `/console/api/runs/${id}`) })],
  [2, fc.constant<Route>({ method: 'POST', path: runId.map((id) => `/console/api/runs/${id}/cancel`) })],
  [4, fc.constant<Route>({ method: 'GET', path: dlqQuery.map((q) => `/console/api/dlq${q}`) })],
  [4, fc.constant<Route>({ method: 'GET', path: bigintish.map((id) => `/console/api/dlq/${id}`) })],
  [3, fc.constant<Route>({ method: 'POST', path: fc.constant('/console/api/dlq/replay'), body: replayBody })],
  [2, fc.constant<Route>({ method: 'POST', path: fc.constant('/console/api/dlq/discard'), body: discardBody })],
  // The two requests, as they were found.
  [1, fc.constantFrom<Route>({ method: 'GET', path: fc.constant('/console/api/runs?since=2016-12-31T23:59:60Z') }, { method: 'GET', path: fc.constant('/console/api/dlq/9999999999999999999') })],
);

const adminRoutes = weighted<Route>(
  [3, fc.constantFrom<Route>({ method: 'GET', path: fc.constant('/v1/admin/limits') }, { method: 'GET', path: fc.constant('/v1/admin/breakers') }, { method: 'GET', path: fc.constant('/metrics') })],
  [4, fc.constant<Route>({ method: 'PUT', path: fc.constant('/v1/admin/limits'), body: limitBody })],
  [3, fc.constant<Route>({ method: 'PUT', path: dependency.map((d) => `/v1/admin/breakers/${d}/force`), body: forceBody })],
  [2, fc.constant<Route>({ method: 'DELETE', path: dependency.map((d) => `/v1/admin/breakers/${d}/force`) })],
  [1, fc.constant<Route>({ method: 'GET', path: fc.constantFrom('/v1/admin', '/v1/admin/', '/v1/admin/limits/x', '/v1/admin/breakers/anthropic', '/v1/admin/%2e%2e/limits') })],
);

const cookie = weighted<string | undefined>(
  [12, fc.constant(SESSION_PLACEHOLDER)],
  [2, fc.constant(undefined)],
  [1, fc.constantFrom('sluice_console=', 'sluice_console=garbage', `sluice_console=${'a'.repeat(200)}`, `other=1; ${SESSION_PLACEHOLDER}`, `sluice_console=x; ${SESSION_PLACEHOLDER}`)],
  [1, headerText(60)],
);
const csrf = weighted<string | undefined>([10, fc.constant(CSRF_PLACEHOLDER)], [2, fc.constant(undefined)], [1, fc.constantFrom('', 'x'.repeat(43), `${CSRF_PLACEHOLDER}x`)], [1, headerText(60)]);
const origin = weighted<string | undefined>([6, fc.constant(undefined)], [3, fc.constant(ORIGIN_PLACEHOLDER)], [1, fc.constantFrom('https://evil.example', 'null', 'http://127.0.0.1', '')], [1, headerText(40)]);
const adminAuthorization = weighted<string | undefined>(
  [10, fc.constant(`Bearer ${ADMIN_KEY}`)],
  [1, fc.constant(`Bearer ${TENANT_A_KEY}`)],
  [1, fc.constant(undefined)],
  [1, headerText(60).map((t) => `Bearer ${t}`)],
);

const present = (headers: Record<string, string | undefined>) => Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== undefined)) as Record<string, string>;
/** Mostly the route's own method; now and then another, which must be answered by the contract too. */
const methodFor = (route: Route) => weighted<string>([12, fc.constant(route.method)], [1, fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS')]);
const bodyFor = (route: Route) => (route.body ? weighted<string | undefined>([10, route.body], [1, fc.constant(undefined)], [1, fc.string({ unit: 'binary', maxLength: 200 })]) : fc.constant(undefined));

const toRequest = (method: string, path: string, headers: Record<string, string | undefined>, body: string | undefined, type: string | undefined): FuzzRequest => {
  const sendBody = method === 'GET' || method === 'HEAD' ? undefined : body;
  return { method, path, headers: present({ ...headers, ...(sendBody !== undefined ? { 'content-type': type } : {}) }), body: sendBody === undefined ? undefined : Buffer.from(sendBody) };
};

const consoleRequest = consoleRoutes.chain((route) =>
  fc.record({ method: methodFor(route), path: route.path, body: bodyFor(route), cookie, csrf, origin, type: contentType }).map(({ method, path, body, cookie, csrf, origin, type }) => toRequest(method, path, { cookie, 'x-csrf-token': csrf, origin }, body, type)),
);

const adminRequest = adminRoutes.chain((route) =>
  fc.record({ method: methodFor(route), path: route.path, body: bodyFor(route), authorization: adminAuthorization, type: contentType }).map(({ method, path, body, authorization, type }) => toRequest(method, path, { authorization }, body, type)),
);

export const operatorRequest: fc.Arbitrary<FuzzRequest> = fc.oneof({ weight: 3, arbitrary: consoleRequest }, { weight: 1, arbitrary: adminRequest });
