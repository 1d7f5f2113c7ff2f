import { connect, createServer, type Server, type Socket } from 'node:net';
import { freePort } from '../../src/util/free-port.js';

export interface PostgresProxy {
  /** `targetUrl` with its host and port replaced by the proxy's. */
  url: string;
  /** A network outage: open connections are dropped and new ones refused. */
  cut: () => Promise<void>;
  /** Accepts connections again on the same port. */
  restore: () => Promise<void>;
  close: () => Promise<void>;
}

/**
 * A TCP hop in front of the real Postgres that a test can cut and restore, as a network outage
 * would, without touching the server itself.
 */
export async function postgresProxy(targetUrl: string): Promise<PostgresProxy> {
  const target = new URL(targetUrl);
  const port = await freePort();
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      const s = createServer((client) => {
        const upstream = connect(Number(target.port || 5432), target.hostname);
        for (const socket of [client, upstream]) {
          sockets.add(socket);
          socket.on('close', () => sockets.delete(socket));
          socket.on('error', () => socket.destroy());
        }
        client.pipe(upstream).pipe(client);
      });
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => {
        server = s;
        resolve();
      });
    });
  const cut = async () => {
    const s = server;
    server = undefined;
    await new Promise<void>((resolve) => {
      if (!s) return resolve();
      s.close(() => resolve());
      for (const socket of sockets) socket.destroy();
    });
  };
  await listen();
  const url = new URL(targetUrl);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return { url: url.toString(), cut, restore: listen, close: cut };
}
