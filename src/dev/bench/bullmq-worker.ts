import { Redis } from 'ioredis';
import { Worker, type Job } from 'bullmq';
import { defaultConfigPath, loadConfig } from '../../config/load.js';
import { ownEntry } from '../../config/lookup.js';
import { dependencyOf } from '../../config/workflows.js';
import { callLlm, createAnthropicClient } from '../../steps/llm-call.js';
import { composeUserTurn } from '../../steps/prompt.js';
import { ToolConnections } from '../../steps/tool-connections.js';

/** What the baseline worker does per job. */
export type BullWork = 'http' | 'noop';

export interface BullWorkerOptions {
  redisUrl: string;
  queue: string;
  prefix: string;
  concurrency: number;
  work: BullWork;
  simulatorUrl: string;
}

export interface BullJobData {
  tenantId: string;
  runId: string;
  input: unknown;
}

/** Parent → worker: count finished jobs from now on and say when `target` are done. */
export interface WatchMessage {
  type: 'watch';
  id: number;
  target: number;
}

/** Worker → parent. `at` is this process's Date.now() when the target-th job finished. */
export type WorkerMessage = { type: 'ready' } | { type: 'done'; id: number; at: number; completed: number; failed: number; busyMs: number; cpuMs: number };

/**
 * The same calls support-reply's steps make (llm → order-lookup → llm), with the same client code
 * as RunExecutor (the Anthropic SDK with retries off, node:http over kept-alive connections for the tool), and nothing else:
 * no permits, no status events, no cancellation checks.
 */
function httpWork(simulatorUrl: string) {
  const config = loadConfig({ path: defaultConfigPath(), env: {} });
  const workflow = ownEntry(config.workflows, 'support-reply');
  if (!workflow) throw new Error('config/local.yaml has no support-reply workflow');
  const anthropic = createAnthropicClient({ apiKey: undefined, baseUrl: simulatorUrl });
  const tools = new ToolConnections();
  return async (job: Job<BullJobData>): Promise<unknown> => {
    const { input, tenantId, runId } = job.data;
    const outputs: Record<string, unknown> = {};
    let lastText: string | null = null;
    for (const step of workflow.steps) {
      const depName = dependencyOf(step);
      const dep = ownEntry(config.dependencies, depName);
      if (!dep) throw new Error(`dependency ${depName} is not configured`);
      const headers = { 'X-Sluice-Tenant': tenantId, 'X-Sluice-Run': runId, 'Idempotency-Key': `${runId}:${step.id}` };
      if (step.kind === 'llm' && dep.kind === 'llm') {
        const res = await callLlm(anthropic, { dependency: depName, config: dep, system: step.system, messages: [{ role: 'user', content: composeUserTurn(input, outputs) }], tenantId, timeoutMs: dep.timeouts.totalMs, headers });
        outputs[step.id] = { text: res.text, model: res.model, usage: res.usage };
        lastText = res.text;
      } else if (step.kind === 'tool' && dep.kind === 'tool') {
        const url = new URL(dep.url.startsWith('/') ? `${simulatorUrl}${dep.url}` : dep.url);
        outputs[step.id] = await tools.call({ dependency: depName, url, body: { input, steps: outputs }, headers, timeouts: dep.timeouts });
      } else {
        throw new Error(`step ${step.id} does not match dependency ${depName}`);
      }
    }
    return { text: lastText, steps: workflow.steps.map((s) => ({ id: s.id, output: outputs[s.id] })) };
  };
}

const cpuMs = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1000;

/** Three awaits of a resolved promise: the queue's own cost and nothing else. */
async function noopWork(): Promise<unknown> {
  await Promise.resolve();
  await Promise.resolve();
  await Promise.resolve();
  return { ok: true };
}

/**
 * `bench bullmq-worker` (hidden): one BullMQ worker in its own process, as Sluice's processor is,
 * reporting to the parent over IPC (no Redis traffic of its own beyond BullMQ's).
 */
export async function runBullWorker(opts: BullWorkerOptions): Promise<void> {
  const send = (m: WorkerMessage) => process.send?.(m);
  const connection = new Redis(opts.redisUrl, { maxRetriesPerRequest: null });
  const work = opts.work === 'http' ? httpWork(opts.simulatorUrl) : noopWork;
  let busyMs = 0;
  const processor = async (job: Job<BullJobData>) => {
    const started = performance.now();
    try {
      return await work(job);
    } finally {
      busyMs += performance.now() - started;
    }
  };
  const worker = new Worker<BullJobData>(opts.queue, processor, { connection, prefix: opts.prefix, concurrency: opts.concurrency, autorun: true });
  let watch: { id: number; target: number; completed: number; failed: number; busyFrom: number; cpuFrom: NodeJS.CpuUsage } | undefined;
  const finished = (ok: boolean) => {
    if (!watch) return;
    if (ok) watch.completed++;
    else watch.failed++;
    if (watch.completed + watch.failed === watch.target) {
      send({ type: 'done', id: watch.id, at: Date.now(), completed: watch.completed, failed: watch.failed, busyMs: busyMs - watch.busyFrom, cpuMs: cpuMs(process.cpuUsage(watch.cpuFrom)) });
      watch = undefined;
    }
  };
  worker.on('completed', () => finished(true));
  worker.on('failed', () => finished(false));
  worker.on('error', (err) => process.stderr.write(`bullmq-worker: ${err.message}\n`));
  process.on('message', (m: WatchMessage) => {
    if (m.type === 'watch') watch = { id: m.id, target: m.target, completed: 0, failed: 0, busyFrom: busyMs, cpuFrom: process.cpuUsage() };
  });
  await worker.waitUntilReady();
  send({ type: 'ready' });
  // Stop on SIGTERM, or when the parent goes away (IPC closed), whichever comes first.
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', () => resolve());
    process.once('disconnect', () => resolve());
  });
  await Promise.race([worker.close(), new Promise((r) => setTimeout(r, 5_000).unref())]);
  connection.disconnect();
}
