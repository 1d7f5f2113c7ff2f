import type { FastifyInstance } from 'fastify';
import { buildApiServer, type ApiDeps } from '../../../src/api/server.js';
import { loadConfig } from '../../../src/config/load.js';
import { createLogger } from '../../../src/obs/logger.js';
import { createMetrics } from '../../../src/obs/metrics.js';
import { fakeRunStatus } from '../../support/run-status-fakes.js';

const config = loadConfig({ env: {} });
const unused = async () => {
  throw new Error('not used by the admin routes');
};

/** The whole API server (its authentication, errors and validation) for the admin routes: only the limits and breakers are real enough to matter. */
export function adminApp(deps: Pick<ApiDeps, 'limits' | 'breakers'> & Partial<Pick<ApiDeps, 'audit' | 'authFailures' | 'config'>>): FastifyInstance {
  return buildApiServer({
    config,
    logger: createLogger('silent'),
    metrics: createMetrics(),
    readiness: [],
    runStatus: fakeRunStatus().deps,
    reads: fakeRunStatus().reads,
    producer: { publishRunRequested: unused },
    runs: { recordAdmission: unused, getRun: unused },
    admission: { decide: unused, withdraw: unused, redisUnreachable: () => { throw new Error('not used by the admin routes'); } },
    idempotency: { claim: unused, store: unused, forget: unused },
    withdrawals: { markAnswerPending: unused, markAnswered: unused, withdraw: unused },
    audit: createLogger('silent'),
    ...deps,
  } satisfies ApiDeps);
}
