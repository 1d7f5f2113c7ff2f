import { describe, expect, it } from 'vitest';
import {
  byLabel,
  bytesPerRun,
  counterDelta,
  endOffsetsByTopic,
  firstKey,
  infoField,
  lessIdle,
  mostSeen,
  median,
  parseCommandStats,
  percentile,
  promSum,
  slotGroup,
  splitInFlight,
  throughputFigure,
  windowByLabel,
  windowMeanMs,
} from '../../../../src/dev/bench/sizing-figures.js';

describe('counterDelta', () => {
  it('keeps what grew, counting a name absent before from zero, largest first', () => {
    const before = new Map([['evalsha', 10], ['get', 5], ['set', 7]]);
    const after = new Map([['evalsha', 40], ['get', 5], ['set', 9], ['publish', 2]]);
    expect(counterDelta(before, after)).toEqual([['evalsha', 30], ['publish', 2], ['set', 2]]);
  });
});

describe('lessIdle', () => {
  it('subtracts the idle rate scaled to the window, never below zero', () => {
    const idle = new Map([['evalsha', 2], ['ping', 5]]);
    expect(lessIdle([['evalsha', 30], ['ping', 40], ['set', 3]], idle, 10)).toEqual([['evalsha', 10], ['set', 3]]);
  });
});

describe('INFO parsing', () => {
  const info = '# Commandstats\r\ncmdstat_evalsha:calls=120,usec=900,usec_per_call=7.50\r\ncmdstat_get:calls=3,usec=1\r\n';
  it('reads calls per command', () => {
    expect(parseCommandStats(info)).toEqual(new Map([['evalsha', 120], ['get', 3]]));
  });
  it('reads one numeric field and refuses a missing one', () => {
    expect(infoField('# Stats\r\ntotal_net_input_bytes:4096\r\ntotal_net_output_bytes:77\r\n', 'total_net_output_bytes')).toBe(77);
    expect(() => infoField('# Stats\r\n', 'total_net_input_bytes')).toThrow(/total_net_input_bytes/);
    expect(infoField('# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:3.5\r\n', 'used_cpu_sys')).toBe(1.25);
  });
});

describe('percentile', () => {
  it('is the nearest rank', () => {
    const v = Array.from({ length: 100 }, (_, i) => 100 - i);
    expect(percentile(v, 99)).toBe(99);
    expect(percentile(v, 100)).toBe(100);
    expect(percentile(v, 0)).toBe(1);
    expect(median([5, 1, 3])).toBe(3);
    expect(percentile([], 50)).toBeNaN();
  });
});

describe('throughputFigure', () => {
  it('measures runs/s against concurrent runs over the run time', () => {
    // 1000 in flight, 10 s per run: 100 runs/s ideal; 5 700 runs in 60 s is 95/s.
    const f = throughputFigure(5_700, 60, 1_000, 10_000);
    expect(f.idealPerSec).toBe(100);
    expect(f.achievedPerSec).toBe(95);
    expect(f.ratio).toBeCloseTo(0.95, 10);
  });
  it('refuses an empty window', () => {
    expect(() => throughputFigure(1, 0, 1, 1)).toThrow();
  });
});

describe('splitInFlight', () => {
  it('splits the total evenly, the remainder on the first processors', () => {
    expect(splitInFlight(1_000, 3)).toEqual([334, 333, 333]);
    expect(splitInFlight(1_000, 1)).toEqual([1_000]);
    expect(() => splitInFlight(2, 3)).toThrow();
  });
});

describe('bytesPerRun and endOffsetsByTopic', () => {
  it('divides the growth by the runs in flight', () => {
    expect(bytesPerRun(100e6, 150e6, 1_000)).toBe(50_000);
    expect(bytesPerRun(1, 2, 0)).toBeNaN();
  });
  it('sums the partitions\' end offsets per topic', () => {
    expect(endOffsetsByTopic({ a: [{ high: '3' }, { high: '4' }], b: [] })).toEqual(new Map([['a', 7], ['b', 0]]));
  });
});

describe('slotGroup and firstKey', () => {
  const ns = 'bench-x.';
  it('names the hash tag without the namespace, one group for every run', () => {
    expect(slotGroup('bench-x.sluice:permits}', ns)).toBe('(no hash tag)');
    expect(slotGroup('{bench-x.sluice:permits}:scope:global', ns)).toBe('{permits}');
    expect(slotGroup('bench-x.sluice:breaker:{anthropic}:window', ns)).toBe('{anthropic}');
    expect(slotGroup('bench-x.sluice:step:{0190f3a1-7c2b-7d6e-8f00-123456789abc}:reply', ns)).toBe('{run}');
    expect(slotGroup('bench-x.sluice:breaker-changed', ns)).toBe('(no hash tag)');
    expect(slotGroup('a{}b', ns)).toBe('(no hash tag)');
  });
  it('takes EVALSHA\'s first key after the key count', () => {
    expect(firstKey(['evalsha', 'abc', '2', 'k1', 'k2', 'arg'])).toBe('k1');
    expect(firstKey(['EVALSHA', 'abc', '0', 'arg'])).toBeUndefined();
    expect(firstKey(['publish', 'chan', 'msg'])).toBe('chan');
    expect(firstKey(['time'])).toBeUndefined();
  });
});

describe('Prometheus text over a window', () => {
  const at = (calls: number, sum: number, toOpen: number) =>
    [
      `sluice_step_call_seconds_sum{dependency="anthropic",outcome="ok"} ${sum}`,
      `sluice_step_call_seconds_count{dependency="anthropic",outcome="ok"} ${calls}`,
      'sluice_step_call_seconds_sum{dependency="order-lookup",outcome="ok"} 0.5',
      'sluice_step_call_seconds_count{dependency="order-lookup",outcome="ok"} 100',
      `sluice_breaker_transitions_total{dependency="anthropic",from="closed",to="open"} ${toOpen}`,
      'sluice_breaker_transitions_total{dependency="anthropic",from="open",to="half_open"} 1',
      'sluice_breaker_transitions_total{proto="h2",dependency="x"} 7',
      '',
    ].join('\n');

  it('sums the label sets that match', () => {
    expect(promSum(at(10, 50, 0), 'sluice_step_call_seconds_count', 'dependency="anthropic"')).toBe(10);
    expect(promSum(at(10, 50, 0), 'sluice_step_call_seconds_count', '')).toBe(110);
  });

  it('takes a histogram\'s mean over the window from its sum and count', () => {
    // 20 calls taking 110 s in all between the scrapes: 5.5 s each.
    expect(windowMeanMs(at(10, 50, 0), at(30, 160, 0), 'sluice_step_call_seconds', 'dependency="anthropic"')).toBe(5_500);
  });

  it('reads a counter by one label, not by a label that ends the same way', () => {
    expect(byLabel(at(1, 1, 2), 'sluice_breaker_transitions_total', 'to')).toEqual(new Map([['open', 2], ['half_open', 1]]));
  });

  it('adds the growth of every processor, and keeps the most any one saw', () => {
    const grown = windowByLabel([at(1, 1, 0), at(1, 1, 1)], [at(1, 1, 2), at(1, 1, 3)], 'sluice_breaker_transitions_total', 'to');
    expect(grown).toEqual({ open: 4 });
    expect(mostSeen([{ open: 2 }, { open: 3, closed: 1 }])).toEqual({ open: 3, closed: 1 });
  });
});
