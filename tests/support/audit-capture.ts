import { Writable } from 'node:stream';
import { createAuditLogger, type Logger } from '../../src/obs/logger.js';

/** The real audit logger writing into memory: every line as written, and each line's `audit` member. */
export function auditCapture(): { logger: Logger; lines: Record<string, any>[]; entries: Record<string, any>[] } {
  const lines: Record<string, any>[] = [];
  const entries: Record<string, any>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const text of chunk.toString().split('\n').filter(Boolean)) {
        const line = JSON.parse(text) as Record<string, any>;
        lines.push(line);
        entries.push(line.audit as Record<string, any>);
      }
      done();
    },
  });
  return { logger: createAuditLogger(sink), lines, entries };
}
