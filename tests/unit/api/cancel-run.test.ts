import type { FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { fakeRunStatus, type FakeRunStatus } from '../../support/run-status-fakes.js';
import { ADMIN, KEY_A, KEY_B, RUN_ID, expectProblem, runView, statusApp } from './run-status-app.js';

let current: FastifyInstance | undefined;

afterEach(async () => {
  await current?.close();
  current = undefined;
});

function setup(opts: { failRequest?: boolean } = {}): { fake: FakeRunStatus; app: FastifyInstance } {
  const fake = fakeRunStatus(opts);
  current = statusApp(fake).app;
  return { fake, app: current };
}

const cancel = (app: FastifyInstance, authorization = KEY_A, id = RUN_ID) => app.inject({ method: 'DELETE', url: `/v1/runs/${id}`, headers: { authorization } });

describe('DELETE /v1/runs/:id', () => {
  it('records the request until the deadline and answers 202 with the current status, again on a repeat', async () => {
    const { fake, app } = setup();
    const view = runView('queued');
    fake.addRun('tenant-a', view);

    const res = await cancel(app);
    expect(res.statusCode).toBe(202);
    expect(res.json()).toEqual({ runId: RUN_ID, status: 'queued', cancelRequested: true });
    expect(fake.cancelRequests).toEqual([{ runId: RUN_ID, deadline: Date.parse(view.deadline) }]);

    expect((await cancel(app)).statusCode).toBe(202);
    expect(fake.cancelRequests).toHaveLength(2);
  });

  it('accepts a running run: it stops at its next step boundary', async () => {
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView('running'));
    const res = await cancel(app);
    expect(res.statusCode).toBe(202);
    expect(res.json().status).toBe('running');
  });

  it.each(['completed', 'failed', 'expired', 'cancelled', 'dead_lettered'] as const)('refuses a %s run with 409 run_finished', async (status) => {
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView(status));
    const body = expectProblem(await cancel(app), 409, 'run_finished');
    expect(body.retryable).toBe(false);
    expect(body.detail).toContain(status);
    expect(fake.cancelRequests).toEqual([]);
  });

  it("hides another tenant's run and a malformed id as 404, and needs a tenant key", async () => {
    const { fake, app } = setup();
    fake.addRun('tenant-a', runView('queued'));
    expectProblem(await cancel(app, KEY_B), 404, 'not_found');
    expectProblem(await cancel(app, KEY_A, 'nope'), 404, 'not_found');
    expectProblem(await cancel(app, ADMIN), 403, 'forbidden');
    expect(fake.cancelRequests).toEqual([]);
  });

  it('answers a retryable 503 when the request cannot be recorded', async () => {
    const { fake, app } = setup({ failRequest: true });
    fake.addRun('tenant-a', runView('queued'));
    const res = await cancel(app);
    const body = expectProblem(res, 503, 'dependency_unavailable');
    expect(body.retryable).toBe(true);
    expect(res.headers['retry-after']).toBe('1');
  });
});
