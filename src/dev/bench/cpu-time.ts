import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';

const CLOCK_TICKS_PER_SEC = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** CPU time (user + system) a process has used so far, in ms, from /proc (Linux). */
export function processCpuMs(pid: number): number {
  // Fields after the command name, which is in parentheses and may itself hold spaces.
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_SEC;
}

/** CPU time every core of the machine has spent busy so far (all but idle and iowait), in ms, from /proc/stat. */
export function machineBusyCpuMs(): number {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0]!;
  // cpu  user nice system idle iowait irq softirq steal guest guest_nice (guest time is inside user).
  const [user, nice, system, , , irq, softirq, steal] = line.trim().split(/\s+/).slice(1).map(Number);
  return ((user! + nice! + system! + irq! + softirq! + steal!) * 1000) / CLOCK_TICKS_PER_SEC;
}

/** CPU counters of a machine and some of its processes at one moment. */
export interface CpuReading {
  atMs: number;
  machineBusyMs: number;
  /** CPU ms used so far, per process name. */
  processes: Record<string, number>;
}

/** Where the machine's CPU went between two readings, in % of one core (a machine of n cores has n × 100). */
export interface CpuShares {
  windowSec: number;
  cores: number;
  machineBusyPercent: number;
  /** Per process named in both readings; `rest of the machine` is what none of them used (the broker, Redis, Postgres, other work). */
  byProcess: Record<string, number>;
}

export const REST_OF_MACHINE = 'rest of the machine';

export function readCpu(processes: Record<string, () => number>, now = Date.now()): CpuReading {
  return { atMs: now, machineBusyMs: machineBusyCpuMs(), processes: Object.fromEntries(Object.entries(processes).map(([name, used]) => [name, used()])) };
}

/** Pure: the shares between two readings. */
export function cpuShares(before: CpuReading, after: CpuReading, cores = cpus().length): CpuShares {
  const wallMs = Math.max(1, after.atMs - before.atMs);
  const percent = (ms: number) => Math.round((ms * 1000) / wallMs) / 10;
  const byProcess: Record<string, number> = {};
  let named = 0;
  for (const [name, used] of Object.entries(after.processes)) {
    const was = before.processes[name];
    if (was === undefined) continue;
    named += used - was;
    byProcess[name] = percent(used - was);
  }
  const busy = after.machineBusyMs - before.machineBusyMs;
  byProcess[REST_OF_MACHINE] = percent(Math.max(0, busy - named));
  return { windowSec: wallMs / 1000, cores, machineBusyPercent: percent(busy), byProcess };
}
