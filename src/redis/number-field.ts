/** A Redis hash field as a number; blank or garbage is missing, not 0 (Number('') would be 0). */
export function numberField(value: string | undefined): number | undefined {
  if (value === undefined || value.trim() === '') return undefined;
  const n = Number(value);
  return Number.isFinite(n) ? n : undefined;
}
