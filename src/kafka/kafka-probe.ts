import type { Admin } from 'kafkajs';

export type ProbeAdmin = Pick<Admin, 'connect' | 'describeCluster' | 'disconnect'>;

/**
 * Kafka's readiness over one long-lived admin client. Opening an admin connection per probe cost
 * the broker a connection and a handshake per `/readyz` request; this client connects once, and
 * kafkajs reconnects it when a broker comes back (`connect` is a no-op while connected). At most
 * one probe is in flight, so a hanging broker holds one request, however many callers wait on it.
 */
export class KafkaProbe {
  private admin: ProbeAdmin | undefined;
  private inFlight: Promise<void> | undefined;

  constructor(private readonly createAdmin: () => ProbeAdmin) {}

  /** Resolves once a broker answered a metadata request. */
  check(): Promise<void> {
    this.inFlight ??= (async () => {
      this.admin ??= this.createAdmin();
      await this.admin.connect();
      await this.admin.describeCluster();
    })().finally(() => {
      this.inFlight = undefined;
    });
    return this.inFlight;
  }

  async close(): Promise<void> {
    await this.admin?.disconnect().catch(() => undefined);
  }
}
