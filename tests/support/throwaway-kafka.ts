import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { brokerList, ensureKafkaCluster, runningNodes, stopKafka, type BrokerNode } from '../../src/dev/infra/kafka-broker.js';
import { isAlive, waitFor } from '../../src/dev/infra/process.js';
import { createLogger } from '../../src/obs/logger.js';
import { freePort } from '../../src/util/free-port.js';
import { withTimeout } from '../../src/util/with-timeout.js';

/** A cold JVM start with storage formatting on a loaded 2-core machine; past this the drill fails. */
const START_BOUND_MS = 120_000;
/** The shared broker: a drill never stops it. */
const SHARED_BROKER_PORT = 9092;

export interface ThrowawayKafka {
  brokers: string[];
  /** Each node with the pid it runs as now (undefined once stopped or killed). */
  nodes: () => (BrokerNode & { pid?: number })[];
  /** SIGKILLs one node (no controlled shutdown) and waits until it is gone. */
  kill: (nodeId: number) => Promise<void>;
  /** Stops every node (SIGTERM, SIGKILL after its grace); the data stays for `start`. */
  stop: () => Promise<void>;
  /** Starts the nodes that do not run, on the same ports with the same data (topics, offsets). */
  start: () => Promise<void>;
  /** Stops it and deletes its state dir (afterAll). */
  close: () => Promise<void>;
}

/**
 * A KRaft cluster of the test's own (one node by default), on free ports with its own temp state
 * dir, run by the same code as `sluice infra up`. Stopped by the pids in its state dir, never by
 * name; a process exit hook kills it should the test process die before `close`.
 */
export async function startThrowawayKafka(opts: { brokers?: number } = {}): Promise<ThrowawayKafka> {
  const logger = createLogger(process.env.SLUICE_TEST_LOG_LEVEL ?? 'warn', 'throwaway-kafka');
  const stateDir = mkdtempSync(join(tmpdir(), 'sluice-drill-kafka-'));
  const nodes: BrokerNode[] = [];
  for (let nodeId = 1; nodeId <= (opts.brokers ?? 1); nodeId++) nodes.push({ nodeId, port: await freePort(), controllerPort: await freePort() });
  if (nodes.some((n) => n.port === SHARED_BROKER_PORT || n.controllerPort === SHARED_BROKER_PORT)) throw new Error('refusing to run a throwaway broker on the shared port 9092');
  const pids = new Map<number, number>();
  const killOnExit = () => {
    for (const pid of pids.values()) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }
  };
  process.once('exit', killOnExit);

  const stop = async () => {
    await stopKafka(stateDir, logger);
    pids.clear();
  };

  const start = async () => {
    try {
      const handle = await withTimeout(ensureKafkaCluster({ stateDir, nodes, logger }), START_BOUND_MS, 'throwaway Kafka cluster start');
      if (!handle.owned) throw new Error(`port ${nodes[0]!.port} answered as a broker we did not start`);
      for (const n of handle.nodes) pids.set(n.nodeId, n.pid);
    } catch (err) {
      // A start that ran out of time may still have launched JVMs.
      for (const n of await runningNodes(stateDir)) pids.set(n.nodeId, n.pid);
      await stop();
      throw err;
    }
  };

  const kill = async (nodeId: number) => {
    const pid = pids.get(nodeId);
    if (pid === undefined) throw new Error(`node ${nodeId} does not run`);
    process.kill(pid, 'SIGKILL');
    pids.delete(nodeId);
    if ((await waitFor(10_000, 50, async () => ((await isAlive(pid)) ? undefined : true))) !== true) throw new Error(`node ${nodeId} (pid ${pid}) outlived SIGKILL by 10 s`);
  };

  const close = async () => {
    await stop();
    process.off('exit', killOnExit);
    rmSync(stateDir, { recursive: true, force: true });
  };

  try {
    await start();
  } catch (err) {
    await close();
    throw err;
  }
  return { brokers: brokerList(nodes), nodes: () => nodes.map((n) => ({ ...n, pid: pids.get(n.nodeId) })), kill, stop, start, close };
}
