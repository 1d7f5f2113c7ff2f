import { loadConfig } from '../../src/config/load.js';
import type { SluiceConfig } from '../../src/config/schema.js';
import { deepMerge, freePort, startSluice, testNamespace, writeTestConfig, type SluiceProcess } from '../integration/harness.js';

export interface DrillStack {
  api: string;
  sim: string;
  namespace: string;
  configPath: string;
  config: SluiceConfig;
  /** The process with the API, the sinks and the simulator (and the processor, unless split). */
  front: SluiceProcess;
  /** The processor process when the stack is split, so a drill can kill it alone. */
  processor?: SluiceProcess;
  /** Starts another processor process (after a kill). */
  startProcessor: () => Promise<SluiceProcess>;
  stop: () => Promise<void>;
}

const ALL_BUT_PROCESSOR = 'provider-sim,status-sink,dlq-sink,ingress,api';

/**
 * Sluice as the drills run it: every role, few partitions (quick rebalances), the broker's
 * minimum session timeout (a killed processor's partitions move within seconds), and
 * `env` pointing any dependency at the drill's throwaway server or proxy.
 */
export async function startDrillStack(opts: { label: string; overrides?: Record<string, unknown>; env?: Record<string, string>; splitProcessor?: boolean }): Promise<DrillStack> {
  const [apiPort, simPort] = [await freePort(), await freePort()];
  const namespace = testNamespace(opts.label);
  const configPath = writeTestConfig(
    deepMerge(
      {
        api: { port: apiPort },
        simulator: { port: simPort },
        kafka: { sessionTimeoutMs: 6_000, heartbeatIntervalMs: 1_000, partitions: { interactive: 2, batch: 2, retry: 1, status: 2, dlq: 1 } },
        processor: { shutdownGraceMs: 1_000 },
      },
      opts.overrides ?? {},
    ),
  );
  const config = loadConfig({ path: configPath, env: {} });
  const env = opts.env ?? {};
  const processors: SluiceProcess[] = [];
  const startProcessor = async () => {
    const p = await startSluice({ configPath, roles: 'processor', namespace, env });
    processors.push(p);
    await p.waitForLog((l) => l.msg === 'partitions assigned', 60_000);
    return p;
  };
  const front = await startSluice({ configPath, roles: opts.splitProcessor ? ALL_BUT_PROCESSOR : `${ALL_BUT_PROCESSOR},processor`, namespace, env });
  const processor = opts.splitProcessor ? await startProcessor() : undefined;
  return {
    api: `http://127.0.0.1:${apiPort}`,
    sim: `http://127.0.0.1:${simPort}`,
    namespace,
    configPath,
    config,
    front,
    processor,
    startProcessor,
    stop: async () => {
      for (const p of processors) await p.stop();
      await front.stop();
    },
  };
}
