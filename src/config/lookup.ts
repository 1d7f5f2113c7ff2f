/**
 * Config maps are plain objects, so `workflows[name]` with a name like "constructor" would find
 * Object.prototype members. Names that come from requests or events are looked up through this.
 */
export function ownEntry<T>(record: Readonly<Record<string, T>>, key: string): T | undefined {
  return Object.hasOwn(record, key) ? record[key] : undefined;
}
