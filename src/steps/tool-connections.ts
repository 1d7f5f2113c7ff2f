import http from 'node:http';
import https from 'node:https';
import type { Socket } from 'node:net';
import { callTool, type ToolRequest } from './tool-call.js';

export interface ToolConnectionsOptions {
  /** Connections open at once to one origin; calls beyond wait for one (their total budget runs meanwhile). */
  maxSocketsPerOrigin?: number;
  /** Idle connections kept per origin; more are closed as their calls end. */
  maxIdlePerOrigin?: number;
  /**
   * An idle connection is closed after this long. Below the 5 s a Node server keeps an idle
   * connection by default, so a call does not take a connection the server is closing.
   */
  idleMs?: number;
}

const DEFAULT_MAX_SOCKETS = 256;
const DEFAULT_MAX_IDLE = 64;
const DEFAULT_IDLE_MS = 4_000;

/**
 * Where tool calls get their connections: one kept-alive pool per tool server (origin), so a call
 * does not pay a TCP (and TLS) handshake, and the tool server an accept, every time. The pools are
 * bounded in open and idle connections, and closed with the processor.
 */
export class ToolConnections {
  private readonly pools = new Map<string, http.Agent>();
  private readonly opts: Required<ToolConnectionsOptions>;

  constructor(opts: ToolConnectionsOptions = {}) {
    this.opts = { maxSocketsPerOrigin: opts.maxSocketsPerOrigin ?? DEFAULT_MAX_SOCKETS, maxIdlePerOrigin: opts.maxIdlePerOrigin ?? DEFAULT_MAX_IDLE, idleMs: opts.idleMs ?? DEFAULT_IDLE_MS };
  }

  call(req: ToolRequest): Promise<unknown> {
    return callTool(req, this.poolFor(req.url));
  }

  /** Closes every connection, idle or in use. */
  close(): void {
    for (const pool of this.pools.values()) pool.destroy();
    this.pools.clear();
  }

  private poolFor(url: URL): http.Agent {
    let pool = this.pools.get(url.origin);
    if (!pool) {
      // LIFO: the most recently used connection goes first, so the rest go idle and close.
      const options = { keepAlive: true, maxSockets: this.opts.maxSocketsPerOrigin, maxFreeSockets: this.opts.maxIdlePerOrigin, scheduling: 'lifo' as const };
      pool = url.protocol === 'https:' ? new https.Agent(options) : new http.Agent(options);
      // The idle timer is set as a connection goes back to the pool, not through the agent's
      // `timeout`: that one also runs while a new connection is being made, where the call's own
      // connect budget applies. A pooled connection that times out is closed by the agent.
      const { idleMs } = this.opts;
      pool.on('free', (socket: Socket) => {
        if (socket.timeout === undefined || socket.timeout === 0 || socket.timeout > idleMs) socket.setTimeout(idleMs);
      });
      this.pools.set(url.origin, pool);
    }
    return pool;
  }
}
