/** Redis Cluster's hash slots: a key lives in CRC16 (XMODEM) of its hash tag, or of itself without one, mod 16384. */
export const CLUSTER_SLOTS = 16_384;

export function crc16(buf: Buffer): number {
  let crc = 0;
  for (const byte of buf) {
    crc ^= byte << 8;
    for (let i = 0; i < 8; i++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

/** The slot of a key: only the part between the first `{` and the next `}` counts, if it is not empty. */
export function keySlot(key: string): number {
  const s = key.indexOf('{');
  if (s >= 0) {
    const e = key.indexOf('}', s + 1);
    if (e > s + 1) key = key.slice(s + 1, e);
  }
  return crc16(Buffer.from(key)) % CLUSTER_SLOTS;
}

/** The keys of a set that leave the first key's slot (none: one slot, as a script or MULTI on a cluster needs). */
export function keysOutsideFirstSlot(keys: readonly string[]): string[] {
  if (keys.length < 2) return [];
  const slot = keySlot(keys[0]!);
  return keys.filter((k) => keySlot(k) !== slot);
}
