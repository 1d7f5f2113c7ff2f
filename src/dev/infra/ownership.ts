import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * What `infra up` started from one state dir, kept in `<stateDir>/infra.json`. A service appears
 * here only while this state dir owns it: `infra down` stops exactly these and nothing that was
 * already running (the machine's Redis and Postgres, or someone else's broker).
 */
export interface OwnershipRecord {
  /** `port`/`controllerPort` are the first node's; further nodes follow two ports apart. */
  kafka?: { port: number; controllerPort: number; nodes: { nodeId: number; pid: number; port: number; controllerPort: number }[]; startedAt: string };
  redis?: { pid: number; url: string; startedAt: string };
  postgres?: { pid: number; version: string; cluster: string; startedAt: string };
}

export type ServiceName = keyof OwnershipRecord;
export const SERVICES: readonly ServiceName[] = ['kafka', 'redis', 'postgres'];

export const ownershipFile = (stateDir: string): string => join(stateDir, 'infra.json');

/** The record, or an empty one if the file is missing or unreadable (then we own nothing). */
export async function readOwnership(stateDir: string): Promise<OwnershipRecord> {
  const raw = await readFile(ownershipFile(stateDir), 'utf8').catch(() => undefined);
  if (raw === undefined) return {};
  try {
    const parsed: unknown = JSON.parse(raw);
    return parsed !== null && typeof parsed === 'object' ? (parsed as OwnershipRecord) : {};
  } catch {
    return {};
  }
}

/** Replaces the file atomically so `infra status`, which reads without the lock, never sees half a file. */
export async function writeOwnership(stateDir: string, record: OwnershipRecord): Promise<void> {
  const path = ownershipFile(stateDir);
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, `${JSON.stringify(record, null, 2)}\n`);
  await rename(tmp, path);
}
