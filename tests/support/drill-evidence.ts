import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { onTestFailed, onTestFinished } from 'vitest';
import type { SluiceProcess } from '../integration/harness.js';

/** What a failed drill leaves behind: each process's log and whatever the drill collected, by file name. */
export interface DrillEvidence {
  processes: Record<string, SluiceProcess | undefined>;
  /** Written as JSON, one file each (`<name>.json`); read when the test fails, so late values are included. */
  collected: () => Record<string, unknown>;
}

/**
 * Registers, in the running test, that a failure writes the drill's evidence to
 * /tmp/<name>-<timestamp>/ and prints where: the Sluice processes' stdout (JSON log lines) and
 * stderr, and what the drill collected (exchanges, per-run outcomes). A flaky drill is then
 * diagnosed from the run that failed, not from a rerun that passes. `DRILL_KEEP_EVIDENCE=1`
 * keeps it from a passing run too.
 */
export function keepEvidenceOnFailure(name: string, evidence: DrillEvidence): void {
  const keep = () => {
    const dir = join('/tmp', `${name}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
    mkdirSync(dir, { recursive: true });
    for (const [label, p] of Object.entries(evidence.processes)) {
      if (!p) continue;
      writeFileSync(join(dir, `${label}.log.jsonl`), p.stdout());
      writeFileSync(join(dir, `${label}.stderr.txt`), p.stderr());
    }
    let collected: Record<string, unknown>;
    try {
      collected = evidence.collected();
    } catch (err) {
      collected = { collectFailed: String(err) };
    }
    for (const [file, value] of Object.entries(collected)) {
      writeFileSync(join(dir, `${file}.json`), JSON.stringify(value, (_k, v: unknown) => (v instanceof Map ? Object.fromEntries(v) : v), 2));
    }
    console.log(`DRILL ${name}: evidence kept in ${dir}`);
  };
  onTestFailed(keep);
  if (process.env.DRILL_KEEP_EVIDENCE === '1') onTestFinished(({ task }) => void (task.result?.state === 'fail' || keep()));
}
