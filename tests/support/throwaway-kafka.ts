import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { brokerPid, ensureBroker, stopBroker } from '../../src/dev/infra/kafka-broker.js';
import { createLogger } from '../../src/obs/logger.js';
import { freePort } from '../../src/util/free-port.js';
import { withTimeout } from '../../src/util/with-timeout.js';

/** A cold JVM start with storage formatting on a loaded 2-core machine; past this the drill fails. */
const START_BOUND_MS = 120_000;
/** The shared broker: a drill never stops it. */
const SHARED_BROKER_PORT = 9092;

export interface ThrowawayKafka {
  brokers: string[];
  /** Stops the broker (SIGTERM, SIGKILL after its grace); its data stays for `start`. */
  stop: () => Promise<void>;
  /** Starts it again on the same ports with the same data (topics, offsets). */
  start: () => Promise<void>;
  /** Stops it and deletes its state dir (afterAll). */
  close: () => Promise<void>;
}

/**
 * A single-node KRaft broker of the test's own, on free ports with its own temp state dir, run
 * by the same code as `sluice infra up`. Stopped by the pid in its state dir, never by name; a
 * process exit hook kills it should the test process die before `close`.
 */
export async function startThrowawayKafka(): Promise<ThrowawayKafka> {
  const logger = createLogger(process.env.SLUICE_TEST_LOG_LEVEL ?? 'warn', 'throwaway-kafka');
  const stateDir = mkdtempSync(join(tmpdir(), 'sluice-drill-kafka-'));
  const [port, controllerPort] = [await freePort(), await freePort()];
  if (port === SHARED_BROKER_PORT || controllerPort === SHARED_BROKER_PORT) throw new Error('refusing to run a throwaway broker on the shared port 9092');
  let pid: number | undefined;
  const killOnExit = () => {
    if (pid === undefined) return;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  };
  process.once('exit', killOnExit);

  const start = async () => {
    try {
      const handle = await withTimeout(ensureBroker({ stateDir, port, controllerPort, logger }), START_BOUND_MS, 'throwaway Kafka broker start');
      if (!handle.owned) throw new Error(`port ${port} answered as a broker we did not start`);
      pid = handle.pid;
    } catch (err) {
      // A start that ran out of time may still have launched the JVM.
      pid = await brokerPid(stateDir);
      await stop();
      throw err;
    }
  };

  const stop = async () => {
    await stopBroker(stateDir, logger);
    pid = undefined;
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
  return { brokers: [`127.0.0.1:${port}`], stop, start, close };
}
