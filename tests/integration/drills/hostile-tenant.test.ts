import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { TENANT_C_KEY } from '../harness.js';
import { backlogAfterSettling } from '../../support/backlog.js';
import { expectDrillInvariants, isAllowed5xx, resetSimStats, settleAndWeigh } from '../../support/drill-invariants.js';
import { DrillLog, MIXED_TENANTS, steadyLoad, type Exchange } from '../../support/drill-load.js';
import { startDrillStack, type DrillStack } from '../../support/drill-stack.js';

interface HostileCase {
  name: string;
  body: string | Buffer;
  contentType?: string;
  /** The contract's answers for it; 429 (the tenant's own rate) is always allowed. */
  allowed: number[];
}

const json = (value: unknown) => JSON.stringify(value);
const submit = (input: string) => `{"workflow":"support-reply","input":${input}}`;
const nested = (depth: number, open: string, close: string) => `${open.repeat(depth)}1${close.repeat(depth)}`;

/** What one tenant throws at the API: each is answered by the contract, none hurts anyone else. */
function hostileCases(bodyLimit: number): HostileCase[] {
  // The input reaches the LLM prompt (a string input verbatim) and the order id comes back in the
  // tool's output, so both end up in the result that the status sink stores.
  const message = (text: string, orderId = '1') => submit(json({ message: text, orderId }));
  return [
    { name: 'NUL in a string input', body: submit(json('hi \u0000 there')), allowed: [202] },
    { name: 'NUL in the order id', body: message('where is it?', 'n\u0000ul'), allowed: [202] },
    { name: 'NUL in a key', body: submit('{"a\\u0000b":1}'), allowed: [202] },
    { name: 'objects nested 5,000 deep', body: submit(nested(5_000, '{"a":', '}')), allowed: [202, 400] },
    { name: 'arrays nested 5,000 deep', body: submit(nested(5_000, '[', ']')), allowed: [202, 400] },
    { name: 'a string just under the body limit', body: message('x'.repeat(bodyLimit - 200)), allowed: [202, 400] },
    { name: 'a string over the body limit', body: message('x'.repeat(bodyLimit + 1_000)), allowed: [413] },
    { name: 'invalid UTF-8 bytes', body: Buffer.concat([Buffer.from(submit('{"message":"')).subarray(0, -2), Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xed, 0xa0, 0x80, 0xc0, 0xaf]), Buffer.from('"}}')]), allowed: [202, 400] },
    { name: 'lone surrogates in a string input', body: submit('"high \\ud800 low \\udfff reversed \\udc00\\ud800"'), allowed: [202, 400] },
    { name: 'a lone surrogate in the order id', body: submit('{"message":"where?","orderId":"\\ud800"}'), allowed: [202, 400] },
    { name: 'an unknown field', body: json({ workflow: 'support-reply', input: {}, priority: 'max' }), allowed: [400] },
    { name: 'wrong types', body: json({ workflow: ['support-reply'], input: 'x', class: 7, deadlineMs: 'soon' }), allowed: [400] },
    { name: 'a deadline of 1e308', body: '{"workflow":"support-reply","input":{},"deadlineMs":1e308}', allowed: [400] },
    { name: 'numbers past double range', body: submit('{"n":1e999999,"m":-1e999999,"big":123456789012345678901234567890123456789}'), allowed: [202, 400] },
    { name: 'a __proto__ key', body: submit('{"__proto__":{"admin":true},"constructor":{"prototype":{"x":1}}}'), allowed: [202, 400] },
    { name: 'a body that is not an object', body: '[{"workflow":"support-reply","input":{}}]', allowed: [400] },
    { name: 'truncated JSON', body: submit('{"message":"cut her'), allowed: [400] },
    { name: 'JSON under a text/plain label', body: message('hello'), contentType: 'text/plain', allowed: [415] },
  ];
}

/**
 * One tenant (tenant-c) sends hostile bodies while two others run normally: every hostile request
 * gets one of the contract's answers (never a 5xx), whatever it got admitted ends, the others'
 * runs all complete, and no admission capacity is left behind once everything has finished.
 */
describe('drill: one tenant sends hostile input while others run', () => {
  let stack: DrillStack;

  beforeAll(async () => {
    stack = await startDrillStack({ label: 'drill-hostile' });
  });

  afterAll(async () => {
    await stack?.stop();
  });

  it('answers every hostile request by the contract and lets the other tenants finish', async () => {
    const log = new DrillLog(stack.api);
    await resetSimStats(stack.sim);
    const cases = hostileCases(stack.config.api.bodyLimitBytes);
    const normal = MIXED_TENANTS.filter((s) => s.tenant !== 'tenant-c');
    const hostile = { tenant: 'tenant-c', key: TENANT_C_KEY, workflow: 'support-reply' };
    const answers: { name: string; allowed: number[]; exchange: Exchange }[] = [];

    const load = steadyLoad(log, { streams: normal, ratePerSec: 4, durationMs: 15_000, maxRequests: 60, readBack: true });
    for (let round = 0; round < 3; round++) {
      for (const c of cases) {
        const exchange = await log.submit(hostile, { body: c.body, headers: { 'content-type': c.contentType ?? 'application/json' } });
        answers.push({ name: c.name, allowed: c.allowed, exchange });
        await sleep(250);
      }
    }
    await load;

    const verdict = await settleAndWeigh({ name: 'hostile-tenant', log, sim: stack.sim, config: stack.config, terminalWithinMs: 60_000, processes: [stack.front] });
    expectDrillInvariants(verdict);

    const offContract = answers
      .filter(({ allowed, exchange: e }) => !(allowed.includes(e.status) || e.status === 429 || isAllowed5xx(e)) || (e.status >= 400 && !(e.contentType ?? '').includes('application/problem+json')))
      .map(({ name, exchange: e }) => `${name} → ${e.status} ${e.contentType ?? ''} ${JSON.stringify(e.body)?.slice(0, 160)}`);
    expect.soft(offContract, "every hostile request gets one of the contract's answers").toEqual([]);

    const runOf = (e: Exchange) => (e.status === 202 ? verdict.views.get((e.body as { runId: string }).runId) : undefined);
    const nulRuns = answers.filter((a) => a.name.startsWith('NUL')).map((a) => runOf(a.exchange));
    expect.soft(nulRuns.map((v) => v?.status), 'a run with NUL in its input completes and reads back').toEqual(nulRuns.map(() => 'completed'));

    const others = [...log.accepted.values()].filter((r) => r.tenant !== 'tenant-c');
    const othersNotCompleted = others.map((r) => ({ runId: r.runId, tenant: r.tenant, status: verdict.views.get(r.runId)?.status })).filter((r) => r.status !== 'completed');
    expect.soft(others.length, 'the other tenants got runs in').toBeGreaterThan(0);
    expect.soft(othersNotCompleted, "the other tenants' runs all complete").toEqual([]);

    const backlog = await backlogAfterSettling(inject('infra').redisUrl, stack.namespace, ['tenant-a', 'tenant-b', 'tenant-c']);
    expect.soft(backlog, 'no admission capacity is left behind').toEqual(Object.fromEntries(Object.keys(backlog).map((k) => [k, 0])));
  }, 120_000);
});
