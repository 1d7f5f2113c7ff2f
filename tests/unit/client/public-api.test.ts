import { readFileSync } from 'node:fs';
import { describe, expect, expectTypeOf, it } from 'vitest';
import * as client from '../../../src/client/index.js';
import * as producer from '../../../src/producers/index.js';
import type { RunClass, RunError, RunStatus, RunUsage } from '../../../src/client/index.js';
import type { RunClass as ServerRunClass, RunError as ServerRunError, RunStatus as ServerRunStatus } from '../../../src/events/schemas.js';
import { TERMINAL_STATUSES } from '../../../src/status/run-history.js';
import type { RunUsage as ServerRunUsage } from '../../../src/status/run-usage.js';
import { packageRoot } from '../../../src/util/package-root.js';

const pkg = JSON.parse(readFileSync(`${packageRoot()}/package.json`, 'utf8')) as { exports: Record<string, Record<string, string>> };

describe('the package entry points', () => {
  it('are the client library and, under sluice/producer, the Kafka producer, with their declarations', () => {
    expect(pkg.exports).toEqual({
      '.': { types: './dist/client/index.d.ts', default: './dist/client/index.js' },
      './producer': { types: './dist/producers/index.d.ts', default: './dist/producers/index.js' },
    });
  });

  it('exports the producer and its errors as values', () => {
    expect(Object.keys(producer).sort()).toEqual(['InvalidSubmissionError', 'OutcomeTimeoutError', 'OutcomeUnavailableError', 'ProducerClosedError', 'SluiceProducer', 'SluiceProducerError', 'SubmitFailedError', 'UnknownRequestError']);
  });

  it('exports the client, its errors and the terminal statuses as values', () => {
    expect(Object.keys(client).sort()).toEqual(['ResponseTooLargeError', 'SluiceClient', 'SluiceHttpError', 'SluiceRefusal', 'SseEventTooLargeError', 'TERMINAL_RUN_STATUSES']);
  });

  it('names in the README what it exports', () => {
    const readme = readFileSync(`${packageRoot()}/README.md`, 'utf8');
    const section = readme.slice(readme.indexOf('### Client library'));
    for (const name of [...Object.keys(client), 'submit', 'events', 'waitForResult', 'get(', 'cancel(', 'SluiceProducer', 'awaitOutcome', 'close(']) expect(section).toContain(name);
  });
});

describe("the client's contract types", () => {
  it("still fit what the server's views are built from", () => {
    expectTypeOf<ServerRunStatus>().toEqualTypeOf<RunStatus>();
    expectTypeOf<ServerRunClass>().toEqualTypeOf<RunClass>();
    expectTypeOf<ServerRunError>().toEqualTypeOf<RunError>();
    expectTypeOf<ServerRunUsage>().toEqualTypeOf<RunUsage>();
    expect([...client.TERMINAL_RUN_STATUSES].sort()).toEqual([...TERMINAL_STATUSES].sort());
  });
});
