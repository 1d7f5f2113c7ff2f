import { pino, type Logger } from 'pino';

export type { Logger };

/** Structured JSON logs on stdout; one logger per process, children per role/component. */
export function createLogger(level: string = process.env.SLUICE_LOG_LEVEL ?? 'info', name = 'sluice'): Logger {
  return pino({ name, level, base: { pid: process.pid }, timestamp: pino.stdTimeFunctions.isoTime });
}
