import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { EventCodec, EventDecodeError, type EventDecodeReason } from '../../../src/events/codec.js';
import { FileSchemaRegistry } from '../../../src/events/file-schema-registry.js';
import { SchemaRegistryError, type SchemaRegistry } from '../../../src/events/schema-registry.js';
import {
  SUBJECTS,
  eventSchema,
  loadEventSchemas,
  type DeadLetterEnvelope,
  type EventSchema,
  type RunRequested,
  type RunStatusChanged,
} from '../../../src/events/schemas.js';
import { deadLetter, runRequested, runStatusChanged, seededRandom, tempDir } from './fixtures.js';

const v1Text = JSON.stringify(JSON.parse(loadEventSchemas().get(SUBJECTS.runRequested)!.canonical));
const v2Json = JSON.parse(v1Text) as { fields: object[] };
v2Json.fields.push({ name: 'priority', type: ['null', 'int'], default: null, doc: 'Scheduling hint.' });
const v2: EventSchema = eventSchema(JSON.stringify(v2Json));

async function decodeError(promise: Promise<unknown>): Promise<EventDecodeError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(EventDecodeError);
  return err as EventDecodeError;
}

describe('EventCodec', () => {
  let dir: { path: string; remove: () => Promise<void> };
  let registry: FileSchemaRegistry;
  let codec: EventCodec;
  beforeEach(async () => {
    dir = await tempDir();
    registry = new FileSchemaRegistry(dir.path);
    codec = new EventCodec(registry);
  });
  afterEach(async () => {
    await dir.remove();
  });

  it('round-trips every event type', async () => {
    expect(
      await codec.decode<RunRequested>(await codec.encode(SUBJECTS.runRequested, runRequested), SUBJECTS.runRequested),
    ).toEqual(runRequested);
    expect(
      await codec.decode<RunStatusChanged>(
        await codec.encode(SUBJECTS.runStatusChanged, runStatusChanged),
        SUBJECTS.runStatusChanged,
      ),
    ).toEqual(runStatusChanged);
    const dl = await codec.decode<DeadLetterEnvelope>(
      await codec.encode(SUBJECTS.deadLetter, deadLetter),
      SUBJECTS.deadLetter,
    );
    expect(dl).toEqual(deadLetter);
    expect(dl.payload.equals(deadLetter.payload)).toBe(true);
  });

  it('decodes in another process-like codec that shares only the registry directory', async () => {
    const buf = await codec.encode(SUBJECTS.runStatusChanged, runStatusChanged);
    const other = new EventCodec(new FileSchemaRegistry(dir.path));
    expect(await other.decode(buf, SUBJECTS.runStatusChanged)).toEqual(runStatusChanged);
  });

  it('writes the Confluent wire format: magic 0, big-endian schema id, Avro body', async () => {
    const buf = await codec.encode(SUBJECTS.runRequested, runRequested);
    const schema = loadEventSchemas().get(SUBJECTS.runRequested)!;
    const id = await registry.register(schema.subject, schema.canonical);
    expect(buf[0]).toBe(0);
    expect(buf.readInt32BE(1)).toBe(id);
    expect(buf.subarray(5).equals(schema.type.toBuffer(runRequested))).toBe(true);
  });

  it('refuses to encode an invalid value and names the bad fields', async () => {
    const bad = { ...runRequested, attempt: 'one', class: 'urgent' } as unknown as RunRequested;
    await expect(codec.encode(SUBJECTS.runRequested, bad)).rejects.toThrow(/class.*attempt|attempt.*class/);
    await expect(codec.encode('dev.sluice.events.Nope', {})).rejects.toThrow(/no local schema/);
  });

  describe('schema evolution', () => {
    const v2Codec = (): EventCodec => new EventCodec(registry, new Map([[v2.subject, v2]]));

    it('v1 code reads v2 bytes, ignoring the added field', async () => {
      const withPriority = { ...runRequested, priority: 5 };
      const v2Bytes = await v2Codec().encode(SUBJECTS.runRequested, withPriority);
      const v1Id = await registry.register(SUBJECTS.runRequested, v1Text);
      expect(v2Bytes.readInt32BE(1)).not.toBe(v1Id);
      const decoded = await codec.decode<Record<string, unknown>>(v2Bytes, SUBJECTS.runRequested);
      expect(decoded).toEqual(runRequested);
      expect(decoded).not.toHaveProperty('priority');
    });

    it('v2 code reads v1 bytes, filling the added field with its default', async () => {
      const v1Bytes = await codec.encode(SUBJECTS.runRequested, runRequested);
      expect(await v2Codec().decode(v1Bytes, SUBJECTS.runRequested)).toEqual({ ...runRequested, priority: null });
    });

    it('a different record type is unknown_schema for the reader, not bad_avro', async () => {
      const buf = await codec.encode(SUBJECTS.deadLetter, deadLetter);
      const err = await decodeError(codec.decode(buf, SUBJECTS.runRequested));
      expect(err.reason).toBe('unknown_schema');
      expect(err.schemaId).toBe(buf.readInt32BE(1));
    });
  });

  describe('undecodable input', () => {
    const cases: [string, () => Promise<Buffer | null>, EventDecodeReason][] = [
      ['null (tombstone)', async () => null, 'too_short'],
      ['empty', async () => Buffer.alloc(0), 'too_short'],
      ['header cut short', async () => Buffer.from([0, 0, 0]), 'too_short'],
      ['JSON instead of Avro', async () => Buffer.from('{"runId":"x"}'), 'bad_magic'],
      ['magic byte 1', async () => Buffer.from([1, 0, 0, 0, 1, 2]), 'bad_magic'],
      ['unregistered id', async () => Buffer.from([0, 0x12, 0x34, 0x56, 0x78, 2]), 'unknown_schema'],
      ['negative id', async () => Buffer.from([0, 0xff, 0xff, 0xff, 0xff, 2]), 'unknown_schema'],
      ['id zero', async () => Buffer.from([0, 0, 0, 0, 0, 2]), 'unknown_schema'],
    ];
    for (const [name, input, reason] of cases) {
      it(`${name} → ${reason}`, async () => {
        expect((await decodeError(codec.decode(await input(), SUBJECTS.runRequested))).reason).toBe(reason);
      });
    }

    it('every truncation of a valid record is too_short or bad_avro', async () => {
      const buf = await codec.encode(SUBJECTS.runStatusChanged, runStatusChanged);
      for (let len = 0; len < buf.length; len++) {
        const err = await decodeError(codec.decode(buf.subarray(0, len), SUBJECTS.runStatusChanged));
        expect(err.reason).toBe(len < 5 ? 'too_short' : 'bad_avro');
      }
    });

    it('trailing bytes are bad_avro', async () => {
      const buf = await codec.encode(SUBJECTS.runRequested, runRequested);
      const err = await decodeError(codec.decode(Buffer.concat([buf, Buffer.from([0])]), SUBJECTS.runRequested));
      expect(err.reason).toBe('bad_avro');
      expect(err.message).toMatch(/trailing/);
    });

    it('an impossible union branch or enum symbol behind a valid header is bad_avro', async () => {
      const dlHeader = (await codec.encode(SUBJECTS.deadLetter, deadLetter)).subarray(0, 5);
      // runId's union has 2 branches; zig-zag 0x12 is branch 9.
      const badBranch = Buffer.concat([dlHeader, Buffer.from([0x12]), Buffer.alloc(40)]);
      const badBranchErr = await decodeError(codec.decode(badBranch, SUBJECTS.deadLetter));
      expect(badBranchErr.reason).toBe('bad_avro');

      const rrHeader = (await codec.encode(SUBJECTS.runRequested, runRequested)).subarray(0, 5);
      // runId "a", empty tenantId and workflow, then class symbol 99 (zig-zag 198).
      const badSymbol = Buffer.concat([rrHeader, Buffer.from([0x02, 0x61, 0x00, 0x00, 0xc6, 0x01]), Buffer.alloc(40)]);
      const badSymbolErr = await decodeError(codec.decode(badSymbol, SUBJECTS.runRequested));
      expect(badSymbolErr.reason).toBe('bad_avro');
      expect(badSymbolErr.message).toMatch(/enum/);
    });

    it('500 seeded random buffers only ever throw EventDecodeError', async () => {
      const random = seededRandom(0x5eed);
      const ids = await Promise.all(
        [...loadEventSchemas().values()].map((s) => registry.register(s.subject, s.canonical)),
      );
      const subjects = Object.values(SUBJECTS);
      const reasons = new Map<EventDecodeReason, number>();
      for (let i = 0; i < 500; i++) {
        const buf = Buffer.alloc(Math.floor(random() * 80));
        for (let j = 0; j < buf.length; j++) buf[j] = Math.floor(random() * 256);
        // Most inputs keep a valid header so the Avro decoder itself is exercised.
        const shape = random();
        if (buf.length >= 5 && shape < 0.7) {
          buf[0] = 0;
          buf.writeInt32BE(ids[Math.floor(random() * ids.length)]!, 1);
        } else if (buf.length >= 1 && shape < 0.85) {
          buf[0] = 0;
        }
        const subject = subjects[Math.floor(random() * subjects.length)]!;
        try {
          await codec.decode(buf, subject);
        } catch (err) {
          expect(err, `input ${buf.toString('hex')} as ${subject}`).toBeInstanceOf(EventDecodeError);
          const reason = (err as EventDecodeError).reason;
          reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
        }
      }
      for (const reason of ['bad_magic', 'too_short', 'unknown_schema', 'bad_avro'] as const) {
        expect(reasons.get(reason), reason).toBeGreaterThan(0);
      }
    });
  });

  it('passes registry outages through instead of calling the record poison', async () => {
    const buf = await codec.encode(SUBJECTS.runRequested, runRequested);
    let down = true;
    const flaky: SchemaRegistry = {
      register: (subject, schema) => registry.register(subject, schema),
      schemaById: (id) =>
        down ? Promise.reject(new SchemaRegistryError('registry timed out', true)) : registry.schemaById(id),
    };
    const reader = new EventCodec(flaky);
    const err = await reader.decode(buf, SUBJECTS.runRequested).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SchemaRegistryError);
    expect(err).not.toBeInstanceOf(EventDecodeError);
    down = false;
    expect(await reader.decode(buf, SUBJECTS.runRequested)).toEqual(runRequested);
  });

  it('fetches each writer schema once', async () => {
    const buf = await codec.encode(SUBJECTS.runRequested, runRequested);
    let fetches = 0;
    const counting: SchemaRegistry = {
      register: (subject, schema) => registry.register(subject, schema),
      schemaById: (id) => {
        fetches++;
        return registry.schemaById(id);
      },
    };
    const reader = new EventCodec(counting);
    await Promise.all(Array.from({ length: 20 }, () => reader.decode(buf, SUBJECTS.runRequested)));
    expect(fetches).toBe(1);
  });
});
