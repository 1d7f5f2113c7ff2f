import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { Role, SluiceConfig } from '../config/schema.js';
import type { Logger } from '../obs/logger.js';
import { createMetrics, type Metrics } from '../obs/metrics.js';
import { buildApiServer } from '../api/server.js';
import { registerHealthRoutes } from '../api/routes/health.js';
import { createProviderSim } from '../sim/provider-sim.js';
import { RunStore } from '../status/run-store.js';
import { StatusSink } from '../status/status-sink.js';
import { RunConsumer } from '../processors/run-consumer.js';
import { RunExecutor } from '../processors/run-executor.js';
import { createAnthropicClient } from '../processors/steps/llm-call.js';
import { SharedClients } from './shared-clients.js';

export interface RunningRoles {
  roles: Role[];
  apiUrl?: string;
  simulatorUrl?: string;
  opsUrl?: string;
  metrics: Metrics;
  stop(): Promise<void>;
}

async function listen(app: FastifyInstance, host: string, port: number): Promise<string> {
  await app.listen({ host, port });
  const addr = app.server.address();
  const actualPort = typeof addr === 'object' && addr ? addr.port : port;
  return `http://${host}:${actualPort}`;
}

/**
 * Starts the configured roles in this process. The simulator comes first (the processor calls it),
 * then the sinks and processors, and the API last, so nothing is accepted before it can be served.
 * `stop()` reverses that order: stop accepting, drain work, then close connections.
 */
export async function startRoles(config: SluiceConfig, logger: Logger): Promise<RunningRoles> {
  const roles = new Set(config.roles);
  const metrics = createMetrics();
  const clients = new SharedClients(config, logger);
  const stops: (() => Promise<void>)[] = [];
  const running: RunningRoles = { roles: [...roles], metrics, stop: async () => undefined };

  const stopAll = async () => {
    for (const stop of stops.reverse()) {
      try {
        await stop();
      } catch (err) {
        logger.warn({ err }, 'error while stopping a role');
      }
    }
    await clients.close();
  };
  running.stop = stopAll;

  try {
    if (roles.has('provider-sim')) {
      const sim = createProviderSim({
        adminKeySha256: config.api.adminKeySha256,
        logger: logger.child({ role: 'provider-sim' }),
        tools: Object.entries(config.dependencies).filter(([, d]) => d.kind === 'tool').map(([name]) => name),
        defaults: { anthropic: { latencyMs: config.simulator.anthropicLatencyMs, jitterMs: config.simulator.anthropicJitterMs } },
      });
      running.simulatorUrl = await listen(sim, config.simulator.host, config.simulator.port);
      stops.push(() => sim.close());
    }
    const simulatorUrl = config.simulator.url ?? running.simulatorUrl ?? `http://${config.simulator.host}:${config.simulator.port}`;

    if (roles.has('status-sink')) {
      await clients.ensureTopics();
      const sink = new StatusSink({ kafka: clients.kafka, config, codec: clients.codec, store: new RunStore(await clients.pool()), deadLetters: await clients.producer(), logger, metrics });
      await sink.start();
      stops.push(() => sink.stop());
    }

    if (roles.has('processor')) {
      const producer = await clients.producer();
      const anthropic = createAnthropicClient({ apiKey: config.anthropic.apiKey, baseUrl: config.anthropic.baseUrl ?? (config.anthropic.apiKey ? 'https://api.anthropic.com' : simulatorUrl) });
      const executor = new RunExecutor({ config, anthropic, simulatorUrl, publishStatus: (e) => producer.publishStatus(e, config.processor.produceTimeoutMs), metrics, logger: logger.child({ role: 'processor' }) });
      const consumer = new RunConsumer({ kafka: clients.kafka, config, codec: clients.codec, deadLetters: producer, execute: (run) => executor.execute(run), logger, metrics });
      await consumer.start();
      stops.push(() => consumer.stop(config.processor.shutdownGraceMs));
    }

    if (roles.has('api')) {
      const api = buildApiServer({ config, logger, metrics, producer: await clients.producer(), runs: new RunStore(await clients.pool()), readiness: clients.readinessChecks() });
      running.apiUrl = await listen(api, config.api.host, config.api.port);
      stops.push(() => api.close());
    } else if (config.opsPort > 0) {
      const ops = Fastify({ loggerInstance: logger.child({ role: 'ops' }) as FastifyBaseLogger, logController: new LogController({ disableRequestLogging: true }) });
      registerHealthRoutes(ops, { readiness: clients.readinessChecks(), metrics });
      running.opsUrl = await listen(ops, config.api.host, config.opsPort);
      stops.push(() => ops.close());
    }
  } catch (err) {
    await stopAll();
    throw err;
  }
  return running;
}
