import { createServer, connect, type Server, type Socket } from 'node:net';
import { freePort } from '../../src/util/free-port.js';

export interface PostgresProxy {
  /** `databaseUrl` with the proxy's host and port: give it to the process under test. */
  url: string;
  /** Drops every open connection and refuses new ones, as a network outage would. */
  cut: () => Promise<void>;
  /** Accepts connections again (on the same port). */
  restore: () => Promise<void>;
  close: () => Promise<void>;
}

/**
 * A TCP hop in front of the real Postgres that a test can cut: the machine's Postgres is shared
 * and must never be stopped, so an outage drill cuts this hop instead.
 */
export async function postgresProxy(databaseUrl: string): Promise<PostgresProxy> {
  const target = new URL(databaseUrl);
  const port = await freePort();
  const sockets = new Set<Socket>();
  let server: Server;
  const listen = () =>
    new Promise<void>((resolve) => {
      server = createServer((client) => {
        const upstream = connect(Number(target.port || 5432), target.hostname);
        for (const s of [client, upstream]) {
          sockets.add(s);
          s.on('close', () => sockets.delete(s));
          s.on('error', () => s.destroy());
        }
        client.pipe(upstream).pipe(client);
      });
      server.listen(port, '127.0.0.1', () => resolve());
    });
  const cut = async () => {
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const s of sockets) s.destroy();
    });
  };
  await listen();
  const url = new URL(databaseUrl);
  url.hostname = '127.0.0.1';
  url.port = String(port);
  return { url: url.toString(), cut, restore: listen, close: cut };
}
