import http from 'node:http';
import https from 'node:https';
import type { CallTimeouts } from '../config/schema.js';
import { headerReader, retryAfterMs } from './rate-limit-headers.js';
import { StepError } from './step-error.js';

export interface ToolRequest {
  dependency: string;
  url: URL;
  body: unknown;
  headers: Record<string, string>;
  timeouts: CallTimeouts;
  /** Bytes of response accepted; a tool that streams more is cut off. */
  maxResponseBytes?: number;
}

function retryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

function retryAfterSecOf(value: string | null | undefined): number | undefined {
  const ms = retryAfterMs(value, Date.now());
  return ms === undefined ? undefined : ms / 1000;
}

/**
 * One HTTP tool call under three budgets: connect (socket established), read (idle
 * gap between bytes) and total (whole exchange). Node's fetch cannot separate these, so this uses
 * node:http directly. No retries here: retries live in exactly one layer (src/execution/step-caller.ts).
 * The call goes over `agent`'s kept-alive connections (`ToolConnections`): a connection taken from
 * its pool is already established, so only a new one is held to the connect budget.
 */
export function callTool(req: ToolRequest, agent: http.Agent): Promise<unknown> {
  const { dependency, url, timeouts } = req;
  const payload = Buffer.from(JSON.stringify(req.body));
  const maxBytes = req.maxResponseBytes ?? 1024 * 1024;
  const lib = url.protocol === 'https:' ? https : http;

  return new Promise((resolve, reject) => {
    let settled = false;
    const timers: NodeJS.Timeout[] = [];
    const finish = (err: StepError | undefined, value?: unknown) => {
      if (settled) return;
      settled = true;
      for (const t of timers) clearTimeout(t);
      if (err) {
        request.destroy();
        reject(err);
      } else resolve(value);
    };
    const request = lib.request(url, {
      method: 'POST',
      agent,
      headers: { 'content-type': 'application/json', 'content-length': String(payload.length), accept: 'application/json', ...req.headers },
    });
    timers.push(setTimeout(() => finish(new StepError('total_timeout', dependency, `${dependency}: no complete answer within ${timeouts.totalMs} ms`, true)), timeouts.totalMs));
    request.on('socket', (socket) => {
      if (!socket.connecting) return;
      const connectTimer = setTimeout(() => finish(new StepError('connect_timeout', dependency, `${dependency}: not connected within ${timeouts.connectMs} ms`, true)), timeouts.connectMs);
      timers.push(connectTimer);
      socket.once('connect', () => clearTimeout(connectTimer));
    });
    // The request's own timeout, not the socket's: it starts once connected, and it is taken off
    // the connection when the exchange ends, so a pooled connection carries no stale timer.
    request.setTimeout(timeouts.readMs, () => finish(new StepError('read_timeout', dependency, `${dependency}: idle for ${timeouts.readMs} ms`, true)));
    request.on('error', (err) => finish(new StepError('connection', dependency, `${dependency}: ${err.message}`, true)));
    request.on('response', (res) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > maxBytes) finish(new StepError('bad_response', dependency, `${dependency}: response larger than ${maxBytes} bytes`, false, res.statusCode));
        else chunks.push(c);
      });
      res.on('error', (err) => finish(new StepError('connection', dependency, `${dependency}: ${err.message}`, true)));
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        const text = Buffer.concat(chunks).toString('utf8');
        if (status < 200 || status >= 300) {
          finish(new StepError('http_status', dependency, `${dependency}: HTTP ${status} ${text.slice(0, 200)}`, retryableStatus(status), status, retryAfterSecOf(headerReader(res.headers)('retry-after'))));
          return;
        }
        try {
          finish(undefined, text.length > 0 ? JSON.parse(text) : null);
        } catch {
          finish(new StepError('bad_response', dependency, `${dependency}: the answer is not JSON`, false, status));
        }
      });
    });
    request.end(payload);
  });
}
