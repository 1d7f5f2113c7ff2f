import http from 'node:http';
import hdr from 'hdr-histogram-js';

export interface OpenLoopResult {
  /** Requests scheduled (rate × duration). */
  scheduled: number;
  completed: number;
  /** Requests not sent because too many were already outstanding: the target fell behind. */
  dropped: number;
  errors: number;
  statuses: Record<number, number>;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  achievedPerSec: number;
}

export interface OpenLoopOptions {
  url: string;
  ratePerSec: number;
  durationSec: number;
  body: () => string;
  headers: Record<string, string>;
  /** Outstanding requests allowed before new ones are dropped (bounds memory and sockets). */
  maxOutstanding?: number;
  timeoutMs?: number;
}

/**
 * Open-loop load: requests are sent on a fixed schedule whatever the latency, and each
 * latency is measured from when the request was due, not when it was sent, so a stalled server
 * shows its queueing delay instead of hiding it (no coordinated omission).
 */
export async function runOpenLoop(opts: OpenLoopOptions): Promise<OpenLoopResult> {
  const histogram = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 120_000_000, numberOfSignificantValueDigits: 3 });
  const agent = new http.Agent({ keepAlive: true, maxSockets: opts.maxOutstanding ?? 512 });
  const target = new URL(opts.url);
  const maxOutstanding = opts.maxOutstanding ?? 512;
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const total = Math.round(opts.ratePerSec * opts.durationSec);
  const intervalUs = 1_000_000 / opts.ratePerSec;
  const statuses: Record<number, number> = {};
  let outstanding = 0;
  let completed = 0;
  let dropped = 0;
  let errors = 0;
  const start = process.hrtime.bigint();
  const pending: Promise<void>[] = [];

  // Latency counts from when the request was due, or from its send if the generator was early
  // (timers are coarser than a fast answer); lateness of the generator itself is counted.
  const send = (dueNs: bigint) =>
    new Promise<void>((resolve) => {
      const sentNs = process.hrtime.bigint();
      const fromNs = sentNs > dueNs ? dueNs : sentNs;
      outstanding++;
      const payload = opts.body();
      const req = http.request(
        { host: target.hostname, port: target.port, path: target.pathname, method: 'POST', agent, timeout: timeoutMs, headers: { ...opts.headers, 'content-length': Buffer.byteLength(payload) } },
        (res) => {
          res.resume();
          res.on('end', () => {
            statuses[res.statusCode ?? 0] = (statuses[res.statusCode ?? 0] ?? 0) + 1;
            histogram.recordValue(Math.max(1, Number((process.hrtime.bigint() - fromNs) / 1000n)));
            completed++;
            outstanding--;
            resolve();
          });
        },
      );
      const fail = () => {
        errors++;
        outstanding--;
        resolve();
      };
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', fail);
      req.end(payload);
    });

  for (let i = 0; i < total; i++) {
    const dueNs = start + BigInt(Math.round(i * intervalUs * 1000));
    const waitMs = Number(dueNs - process.hrtime.bigint()) / 1e6;
    if (waitMs > 1) await new Promise((r) => setTimeout(r, waitMs));
    if (outstanding >= maxOutstanding) {
      dropped++;
      continue;
    }
    pending.push(send(dueNs));
  }
  await Promise.all(pending);
  const elapsedSec = Number(process.hrtime.bigint() - start) / 1e9;
  agent.destroy();
  const us = (p: number) => histogram.getValueAtPercentile(p) / 1000;
  const result = { scheduled: total, completed, dropped, errors, statuses, p50Ms: us(50), p99Ms: us(99), maxMs: histogram.maxValue / 1000, achievedPerSec: completed / elapsedSec };
  histogram.destroy();
  return result;
}
