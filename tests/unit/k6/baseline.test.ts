import { execFileSync } from 'node:child_process';
import { beforeAll, describe, expect, it } from 'vitest';
import { calls, respondWith } from './stubs/k6-http.js';
import { results } from './stubs/k6.js';

// k6 injects __ENV; the script reads it at load time.
(globalThis as any).__ENV = { RATE: '20', DURATION: '10s' };

describe('k6/baseline.js', () => {
  let script: { options: any; default: () => void };

  beforeAll(async () => {
    script = await import('../../../k6/baseline.js' as string);
  });

  it('is valid JavaScript for a module loader', () => {
    expect(() => execFileSync(process.execPath, ['--check', 'k6/baseline.js'])).not.toThrow();
  });

  it('is open-loop: a constant arrival rate taken from the environment', () => {
    const s = script.options.scenarios.submit;
    expect(s).toMatchObject({ executor: 'constant-arrival-rate', rate: 20, timeUnit: '1s', duration: '10s' });
    expect(s.maxVUs).toBeGreaterThanOrEqual(s.preAllocatedVUs);
  });

  it('submits runs to POST /v1/runs with a tenant key and a JSON body', () => {
    respondWith(202);
    script.default();
    const call = calls.at(-1)!;
    expect(call.url).toBe('http://127.0.0.1:8080/v1/runs');
    expect(call.params.headers.Authorization).toBe('Bearer local-key-a');
    expect(JSON.parse(call.body)).toMatchObject({ workflow: 'support-reply' });
    expect(Object.values(results.at(-1)!)).toEqual([true, true]);
  });

  it('counts an honest refusal with Retry-After as following the contract, and a 500 as not', () => {
    respondWith(429);
    script.default();
    expect(Object.values(results.at(-1)!)).toEqual([true, true]);
    respondWith(500);
    script.default();
    expect(results.at(-1)!['answer follows the overload contract']).toBe(false);
  });
});
