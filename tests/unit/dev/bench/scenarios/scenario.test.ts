import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { loadConfig } from '../../../../../src/config/load.js';
import { ANTHROPIC_TARGET } from '../../../../../src/dev/sim/fault-profile.js';
import { loadScenario, loadScenarios, parseScenario, scenariosDir } from '../../../../../src/dev/bench/scenarios/scenario.js';
import { packageRoot } from '../../../../../src/util/package-root.js';

const NAMES = ['avalanche', 'baseline', 'capacity-avalanche', 'hang', 'noisy-neighbour', 'provider-429-storm', 'slow-provider', 'spike', 'weighted-share'];

function avalancheJson(): Record<string, unknown> {
  return JSON.parse(readFileSync(join(scenariosDir(), 'avalanche.json'), 'utf8')) as Record<string, unknown>;
}

function errorOf(input: unknown): string {
  try {
    parseScenario(input, 'bad.json');
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('the scenario was accepted');
}

describe('the scenario files', () => {
  it('all load and validate, one per name', () => {
    expect(loadScenarios().map((s) => s.name)).toEqual(NAMES);
  });

  it('use only the tenants, workflows and fault targets of config/local.yaml', () => {
    const config = loadConfig({ path: join(packageRoot(), 'config', 'local.yaml'), env: {} });
    const targets = [ANTHROPIC_TARGET, ...Object.entries(config.dependencies).filter(([, d]) => d.kind === 'tool').map(([name]) => name)];
    for (const s of loadScenarios()) {
      for (const a of s.arrivals) {
        expect(Object.keys(config.tenants), s.name).toContain(a.tenant);
        expect(Object.keys(config.workflows), s.name).toContain(a.workflow);
      }
      for (const f of s.faults) expect(targets, s.name).toContain(f.target);
      for (const t of Object.keys(s.tenantWeights ?? {})) expect(Object.keys(config.tenants), s.name).toContain(t);
    }
  });

  it('carry the issue\'s targets and shapes', () => {
    const avalanche = loadScenario('avalanche');
    expect(avalanche.targets).toEqual({ interactiveP99Ms: 1500, providerCallsPerOffered: 1.2, drainSec: 10, peakAfterRatio: 1.5, lost: 0, duplicates: 0 });
    expect(loadScenario('capacity-avalanche').targets).toMatchObject({
      interactiveP99Ms: 1500,
      onTimeGoodputOfBound: 0.9,
      wastedShare: 0.05,
      provider429Share: 0.01,
      tenantOnTimeShare: { 'tenant-b': 0.95, 'tenant-c': 0.95 },
    });
    const weighted = loadScenario('weighted-share');
    expect(weighted.tenantWeights).toEqual({ 'tenant-a': 2, 'tenant-b': 1 });
    expect(weighted.targets.weightedShareError).toBe(0.1);
    expect(weighted.faults).toEqual([{ atSec: 0, forSec: 120, target: 'anthropic', fault: { rateLimit: { requestsPerMinute: 600 } } }]);
    expect(avalanche.clientRetry).toEqual({ kind: 'fixed', delaysSec: [1, 2, 4, 8] });
    expect(loadScenario('spike').targets.answerP99Ms).toBe(100);
    expect(loadScenario('noisy-neighbour').targets.quietTenantsP99Ratio).toBe(1.2);
    const spike = loadScenario('spike').arrivals[0]!.pattern;
    expect(spike.kind === 'spike' && spike.peak / spike.base).toBe(30);
  });

  it('keep the fault as the simulator normalises it: an error status alone fails every call', () => {
    const input = avalancheJson();
    input.faults = [{ atSec: 0, forSec: 1, target: 'anthropic', fault: { errorStatus: 529 } }];
    expect(parseScenario(input, 'x.json').faults[0]!.fault).toEqual({ errorStatus: 529, errorRate: 1 });
  });
});

describe('a bad scenario', () => {
  it('names the file and the field of a schema error', () => {
    const input = avalancheJson();
    (input.arrivals as Record<string, unknown>[])[1]!.class = 'urgent';
    expect(errorOf(input)).toMatch(/^bad\.json: arrivals\.1\.class: /);
  });

  it('names the fault field the simulator rejects, with its nested path', () => {
    const input = avalancheJson();
    input.faults = [
      { atSec: 0, forSec: 1, target: 'anthropic', fault: { errorStatus: 418 } },
      { atSec: 0, forSec: 1, target: 'report', fault: { rateLimit: { inputTokensPerMinute: 5 } } },
    ];
    const message = errorOf(input);
    expect(message).toContain('bad.json: faults.0.fault.errorStatus: must be one of 429, 500, 529');
    expect(message).toContain('bad.json: faults.1.fault.rateLimit.inputTokensPerMinute: is not a limit of a tool');
  });

  it('rejects a target inside the fault, where it would silently lose to the window\'s own', () => {
    const input = avalancheJson();
    input.faults = [{ atSec: 0, forSec: 1, target: 'anthropic', fault: { target: 'report', hang: true } }];
    expect(errorOf(input)).toBe('bad.json: faults.0.fault.target: belongs beside fault, not inside it');
  });

  it('rejects a window or a spike that ends after the scenario', () => {
    const input = avalancheJson();
    input.durationSec = 50;
    const message = errorOf(input);
    expect(message).toContain('bad.json: arrivals.0.pattern.forSec: ends at 60 s, after durationSec (50)');
    expect(message).toContain('bad.json: faults.0.forSec: ends at 60 s');
  });

  it('rejects a per-tenant target for a tenant that does not send, and a weighted share without two weighted senders', () => {
    const input = avalancheJson();
    input.targets = { tenantOnTimeShare: { 'tenant-z': 0.9 }, weightedShareError: 0.1 };
    input.tenantWeights = { 'tenant-a': 2, 'tenant-z': 1 };
    const message = errorOf(input);
    expect(message).toContain('bad.json: targets.tenantOnTimeShare.tenant-z: is not a tenant of the arrivals');
    expect(message).toContain('bad.json: targets.weightedShareError: needs tenantWeights naming exactly two tenants of the arrivals');
    input.targets = { onTimeGoodputOfBound: 1.5 };
    expect(errorOf(input)).toMatch(/^bad\.json: targets\.onTimeGoodputOfBound: /);
    input.targets = {};
    input.tenantWeights = { 'tenant-a': 0 };
    expect(errorOf(input)).toMatch(/^bad\.json: tenantWeights\.tenant-a: /);
  });

  it('rejects an unknown field of the targets object', () => {
    const input = avalancheJson();
    input.targets = { p99: 5 };
    expect(errorOf(input)).toMatch(/bad\.json: targets: .*p99/);
  });

  describe('from a folder', () => {
    let dir: string | undefined;
    afterEach(() => {
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('names the file for invalid JSON and for a name that differs from the file name', () => {
      dir = mkdtempSync(join(tmpdir(), 'scenarios-'));
      writeFileSync(join(dir, 'broken.json'), '{ "name": ');
      expect(() => loadScenario('broken', dir)).toThrow(/broken\.json: not valid JSON/);
      writeFileSync(join(dir, 'renamed.json'), JSON.stringify(avalancheJson()));
      expect(() => loadScenario('renamed', dir)).toThrow(/renamed\.json: name: is "avalanche", must match the file name "renamed"/);
      expect(() => loadScenario('missing', dir)).toThrow(/missing\.json: cannot read/);
    });
  });
});
